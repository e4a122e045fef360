"""Unpacking hostile layers: each attack a pushed image could carry is refused or
neutralised, and nothing outside the root changes."""

from __future__ import annotations

import gzip
import os
import stat
import tarfile
from pathlib import Path

import pytest

from dockyard.compute.images.layers import (
    UnsafeLayer,
    UnsupportedLayer,
    seal,
    unpack_layers,
)
from tests.compute.oci_images import (
    Member,
    directory,
    file,
    hardlink,
    layer,
    sha256,
    symlink,
)


def _unpack(tmp_path: Path, *layers: bytes, gzipped: bool = False) -> Path:
    root = tmp_path / "rootfs"
    root.mkdir(exist_ok=True)
    paths = []
    for index, raw in enumerate(layers):
        path = tmp_path / f"layer{index}.tar"
        path.write_bytes(gzip.compress(raw) if gzipped else raw)
        paths.append(path)
    unpack_layers(paths, root)
    return root


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory beside the root standing for the host's /etc."""
    path = tmp_path / "host-etc"
    path.mkdir()
    (path / "passwd").write_text("root:x:0:0")
    return path


def _untouched(outside: Path) -> None:
    assert sorted(p.name for p in outside.iterdir()) == ["passwd"]
    assert (outside / "passwd").read_text() == "root:x:0:0"


@pytest.mark.parametrize("name", ["../x", "a/../../x", "/etc/x"])
def test_names_leading_out_of_the_root_are_refused(tmp_path: Path, name: str) -> None:
    with pytest.raises(UnsafeLayer):
        _unpack(tmp_path, layer(file(name)))
    assert not (tmp_path / "x").exists()


def test_a_link_is_never_written_through(tmp_path: Path, outside: Path) -> None:
    with pytest.raises(UnsafeLayer, match="through a link"):
        _unpack(tmp_path, layer(symlink("a", str(outside)), file("a/passwd", b"pwned")))
    _untouched(outside)
    # Nor when a lower layer left the link and a later one writes under it.
    with pytest.raises(UnsafeLayer):
        _unpack(tmp_path, layer(symlink("b", "../host-etc")), layer(file("b/passwd", b"pwned")))
    _untouched(outside)


def test_a_link_is_kept_as_the_link_it_says(tmp_path: Path, outside: Path) -> None:
    root = _unpack(tmp_path, layer(symlink("etc-link", "/etc"), symlink("up", "../../..")))
    assert os.readlink(root / "etc-link") == "/etc"
    assert os.readlink(root / "up") == "../../.."


def test_a_file_replacing_a_link_replaces_the_link_not_its_target(
    tmp_path: Path, outside: Path
) -> None:
    root = _unpack(
        tmp_path, layer(symlink("passwd", str(outside / "passwd"))), layer(file("passwd", b"new"))
    )
    assert not (root / "passwd").is_symlink()
    assert (root / "passwd").read_bytes() == b"new"
    _untouched(outside)


def test_devices_and_fifos_are_skipped_and_counted(tmp_path: Path) -> None:
    root = tmp_path / "rootfs"
    root.mkdir()
    path = tmp_path / "l.tar"
    path.write_bytes(
        layer(
            Member("dev/sda", tarfile.BLKTYPE, mode=0o666),
            Member("dev/null", tarfile.CHRTYPE, mode=0o666),
            Member("pipe", tarfile.FIFOTYPE),
            file("ok"),
        )
    )
    report = unpack_layers([path], root)
    assert report.skipped == {"device": 2, "fifo": 1}
    assert not (root / "dev" / "sda").exists() and not (root / "dev" / "null").exists()
    assert not (root / "pipe").exists()
    assert (root / "ok").is_file()


def test_setuid_setgid_and_world_write_are_stripped(tmp_path: Path) -> None:
    root = tmp_path / "rootfs"
    root.mkdir()
    path = tmp_path / "l.tar"
    path.write_bytes(
        layer(
            file("bin/sh", b"#!", mode=0o4755),
            file("bin/g", mode=0o2777),
            directory("shared", mode=0o3777),
        )
    )
    report = unpack_layers([path], root)
    assert report.stripped_modes == 3
    assert stat.S_IMODE(os.lstat(root / "bin" / "sh").st_mode) == 0o755
    assert stat.S_IMODE(os.lstat(root / "bin" / "g").st_mode) == 0o755
    assert stat.S_IMODE(os.lstat(root / "shared").st_mode) == 0o755
    # Everything is the unpacking user's, whatever the layer said.
    assert {os.lstat(p).st_uid for p in root.rglob("*")} == {os.geteuid()}


def test_xattrs_such_as_file_capabilities_are_not_applied(tmp_path: Path) -> None:
    raw = layer(file("ping"))
    # A PAX header granting CAP_NET_RAW, as `setcap` would leave in a layer.
    path = tmp_path / "cap.tar"
    import io

    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo("ping")
        info.size = 1
        info.pax_headers = {"SCHILY.xattr.security.capability": "\x01\x00\x00\x02"}
        tar.addfile(info, io.BytesIO(b"x"))
    path.write_bytes(out.getvalue())
    root = _unpack(tmp_path, raw)
    unpack_layers([path], root)
    assert "security.capability" not in os.listxattr(root / "ping")


def test_whiteouts_hide_lower_layers_only(tmp_path: Path) -> None:
    lower = layer(
        file("a/gone"),
        file("a/kept"),
        file("opaque/old"),
        directory("opaque/olddir"),
        file("opaque/olddir/deep"),
        directory("tree"),
        file("tree/x"),
    )
    upper = layer(
        file("a/.wh.gone"),
        file(".wh.tree"),
        file("opaque/new"),  # the same layer's own entry survives its opaque marker
        file("opaque/.wh..wh..opq"),
        file(".wh.never-existed"),
    )
    root = _unpack(tmp_path, lower, upper)
    assert sorted(p.name for p in (root / "a").iterdir()) == ["kept"]
    assert not (root / "tree").exists()
    assert sorted(p.name for p in (root / "opaque").iterdir()) == ["new"]
    assert not list(root.rglob(".wh.*"))


def test_a_whiteout_never_reaches_through_a_link(tmp_path: Path, outside: Path) -> None:
    _unpack(tmp_path, layer(symlink("etc", str(outside))), layer(file("etc/.wh.passwd")))
    _untouched(outside)
    _unpack(tmp_path, layer(file("etc/.wh..wh..opq")))
    _untouched(outside)


def test_hard_links_only_to_files_inside_the_root(tmp_path: Path, outside: Path) -> None:
    root = _unpack(
        tmp_path, layer(file("bin/python3", b"elf")), layer(hardlink("py", "bin/python3"))
    )
    assert os.lstat(root / "py").st_ino == os.lstat(root / "bin" / "python3").st_ino
    for target in (str(outside / "passwd"), "../host-etc/passwd", "missing"):
        with pytest.raises(UnsafeLayer):
            _unpack(tmp_path, layer(hardlink("evil", target)))
    # A link in the way of the target is not followed either.
    with pytest.raises(UnsafeLayer):
        _unpack(tmp_path, layer(symlink("h", str(outside)), hardlink("evil2", "h/passwd")))
    assert os.lstat(outside / "passwd").st_nlink == 1
    _untouched(outside)


def test_a_later_write_never_changes_a_hard_linked_file(tmp_path: Path) -> None:
    root = _unpack(
        tmp_path,
        layer(file("a", b"one"), hardlink("b", "a")),
        layer(file("b", b"two")),
    )
    assert (root / "a").read_bytes() == b"one"
    assert (root / "b").read_bytes() == b"two"


def test_gzip_layers_and_diff_ids(tmp_path: Path) -> None:
    raw = layer(file("etc/os-release", b'ID="test"\n'))
    root = _unpack(tmp_path, raw, gzipped=True)
    assert (root / "etc" / "os-release").read_bytes() == b'ID="test"\n'
    path = tmp_path / "layer0.tar"
    unpack_layers([path], root, [sha256(raw)])
    with pytest.raises(UnsafeLayer, match="diff_id"):
        unpack_layers([path], root, [sha256(b"another")])


def test_zstd_is_refused_by_name(tmp_path: Path) -> None:
    path = tmp_path / "l.tar.zst"
    path.write_bytes(b"\x28\xb5\x2f\xfd" + b"\0" * 64)
    (tmp_path / "rootfs").mkdir()
    with pytest.raises(UnsupportedLayer, match="zstd"):
        unpack_layers([path], tmp_path / "rootfs")


def test_garbage_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "l.tar"
    path.write_bytes(b"\x1f\x8bnot gzip at all")
    (tmp_path / "rootfs").mkdir()
    with pytest.raises(UnsafeLayer):
        unpack_layers([path], tmp_path / "rootfs")


def test_seal_leaves_no_write_bit(tmp_path: Path) -> None:
    root = _unpack(
        tmp_path, layer(file("a/b", mode=0o644), directory("c", 0o777), symlink("l", "a"))
    )
    assert seal(root) > 0
    for path in [root, *root.rglob("*")]:
        info = os.lstat(path)
        if not stat.S_ISLNK(info.st_mode):
            assert info.st_mode & 0o222 == 0, path


def test_a_member_cut_short_is_refused(tmp_path: Path) -> None:
    raw = layer(file("big", b"y" * 4096))
    path = tmp_path / "l.tar"
    path.write_bytes(raw[: 512 + 1000])
    (tmp_path / "rootfs").mkdir()
    with pytest.raises(UnsafeLayer):
        unpack_layers([path], tmp_path / "rootfs")
