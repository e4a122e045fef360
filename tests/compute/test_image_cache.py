"""The image cache with the real skopeo: one pull per digest however many ask, digests
checked, a read-only tree, least-recently-used eviction past the cap that never takes
an image in use."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import threading
from datetime import timedelta
from pathlib import Path

import pytest

from dockyard.clock import ManualClock
from dockyard.compute.images.cache import ImageCache, ImageError, skopeo_runner
from tests.compute.oci_images import Layout, file, layer, oci_layout

if shutil.which("skopeo") is None:
    pytest.skip("skopeo is not installed (apt-get install skopeo)", allow_module_level=True)


class CountingRunner:
    def __init__(self, after: object = None) -> None:
        self.calls: list[list[str]] = []
        self.lock = threading.Lock()
        self.after = after

    def __call__(self, argv: list[str]) -> None:
        with self.lock:
            self.calls.append(argv)
        skopeo_runner(argv)
        if callable(self.after):
            self.after(Path(argv[-1].removeprefix("dir:")))


def _image(tmp_path: Path, name: str, size: int = 64 * 1024) -> Layout:
    data = (name.encode() * size)[:size]
    return oci_layout(
        tmp_path / "images" / name,
        [layer(file("etc/os-release", f'ID="{name}"\n'.encode())), layer(file("data", data))],
    )


def test_a_pull_unpacks_a_sealed_root(tmp_path: Path) -> None:
    image = _image(tmp_path, "one")
    cache = ImageCache(tmp_path / "cache", cap_bytes=1 << 30)
    with cache.lease(image.source, image.digest) as cached:
        assert cached.path == tmp_path / "cache" / image.digest.removeprefix("sha256:")
        assert (cached.rootfs / "etc" / "os-release").read_text() == 'ID="one"\n'
        assert cached.config()["config"]["Cmd"] == ["train"]
        for path in [cached.path, *cached.path.rglob("*")]:
            assert os.lstat(path).st_mode & 0o222 == 0, path
        assert (cached.path / "complete").read_text() == str(cached.size)
    assert list((tmp_path / "cache" / ".tmp").iterdir()) == []


def test_concurrent_callers_pull_once(tmp_path: Path) -> None:
    image = _image(tmp_path, "shared")
    runner = CountingRunner()
    cache = ImageCache(tmp_path / "cache", cap_bytes=1 << 30, runner=runner)
    start = threading.Barrier(4)
    roots: list[Path] = []
    errors: list[BaseException] = []

    def pull() -> None:
        # Each thread its own cache object, as separate processes would have.
        mine = ImageCache(tmp_path / "cache", cap_bytes=1 << 30, runner=runner)
        start.wait()
        try:
            with mine.lease(image.source, image.digest) as cached:
                roots.append(cached.rootfs)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=pull) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len(runner.calls) == 1
    assert len(set(roots)) == 1 and len(roots) == 4
    with cache.lease(image.source, image.digest):
        pass
    assert len(runner.calls) == 1  # cached: no copy at all


def test_concurrent_processes_pull_once(tmp_path: Path) -> None:
    image = _image(tmp_path, "procs")
    script = (
        "import sys; from pathlib import Path\n"
        "from dockyard.compute.images.cache import ImageCache\n"
        "c = ImageCache(Path(sys.argv[1]), 1 << 30)\n"
        "with c.lease(sys.argv[2], sys.argv[3]) as i: print(i.report is not None)\n"
    )
    argv = [sys.executable, "-c", script, str(tmp_path / "cache"), image.source, image.digest]
    procs = [subprocess.Popen(argv, stdout=subprocess.PIPE, text=True) for _ in range(3)]
    pulled = [proc.communicate()[0].strip() for proc in procs]
    assert all(proc.returncode == 0 for proc in procs)
    assert sorted(pulled) == ["False", "False", "True"]


def test_a_tampered_blob_is_refused(tmp_path: Path) -> None:
    image = _image(tmp_path, "tampered")
    cache = ImageCache(tmp_path / "cache", cap_bytes=1 << 30)
    blob = image.blob(image.layer_digests[1])
    blob.chmod(0o644)
    original = blob.read_bytes()
    blob.write_bytes(original[:-1] + bytes([original[-1] ^ 1]))
    with pytest.raises(ImageError):
        with cache.lease(image.source, image.digest):
            pass
    assert cache.cached(image.digest) is None


def test_blobs_are_checked_after_skopeo_too(tmp_path: Path) -> None:
    # A blob changed between skopeo's copy and the unpack (or a skopeo that let one by).
    image = _image(tmp_path, "after")
    layer_hex = image.layer_digests[0].removeprefix("sha256:")

    def tamper(layout: Path) -> None:
        blob = layout / layer_hex
        data = bytearray(blob.read_bytes())
        data[-1] ^= 1  # same size, one bit off
        blob.write_bytes(bytes(data))

    cache = ImageCache(tmp_path / "cache", cap_bytes=1 << 30, runner=CountingRunner(tamper))
    with pytest.raises(ImageError, match="does not match its digest"):
        with cache.lease(image.source, image.digest):
            pass
    assert cache.cached(image.digest) is None


def test_the_digest_asked_for_must_be_the_manifests(tmp_path: Path) -> None:
    image = _image(tmp_path, "one")
    other = _image(tmp_path, "two")
    cache = ImageCache(tmp_path / "cache", cap_bytes=1 << 30)
    with pytest.raises(ImageError, match="has the manifest"):
        with cache.lease(image.source, other.digest):
            pass
    with pytest.raises(ImageError, match="not a sha256 digest"):
        with cache.lease(image.source, "latest"):
            pass


def test_a_hostile_image_is_refused_and_leaves_nothing(tmp_path: Path) -> None:
    image = oci_layout(tmp_path / "evil", [layer(file("../../escape"))])
    cache = ImageCache(tmp_path / "cache", cap_bytes=1 << 30)
    with pytest.raises(ImageError, match="refused"):
        with cache.lease(image.source, image.digest):
            pass
    assert not (tmp_path / "escape").exists()
    assert cache.cached(image.digest) is None
    assert list((tmp_path / "cache" / ".tmp").iterdir()) == []


def test_least_recently_used_is_evicted_past_the_cap(tmp_path: Path) -> None:
    clock = ManualClock()
    images = {name: _image(tmp_path, name) for name in ("a", "b", "c")}
    probe = ImageCache(tmp_path / "probe", cap_bytes=1 << 30)
    with probe.lease(images["a"].source, images["a"].digest) as cached:
        one = cached.size
    cache = ImageCache(tmp_path / "cache", cap_bytes=one * 2 + one // 2, clock=clock)

    def use(name: str) -> None:
        clock.advance(timedelta(minutes=1))
        with cache.lease(images[name].source, images[name].digest):
            pass

    use("a")
    use("b")
    use("a")  # b is now the least recently used
    use("c")
    assert cache.cached(images["a"].digest) is not None
    assert cache.cached(images["b"].digest) is None
    assert cache.cached(images["c"].digest) is not None


def test_an_image_in_use_is_never_evicted(tmp_path: Path) -> None:
    clock = ManualClock()
    images = {name: _image(tmp_path, name) for name in ("held", "x", "y", "z")}
    cache = ImageCache(tmp_path / "cache", cap_bytes=1, clock=clock)
    with cache.lease(images["held"].source, images["held"].digest) as held:
        for name in ("x", "y"):
            clock.advance(timedelta(minutes=1))
            with cache.lease(images[name].source, images[name].digest):
                pass
        # Over the cap all along, yet the oldest image stays while it is held.
        assert (held.rootfs / "etc" / "os-release").read_text() == 'ID="held"\n'
        assert cache.cached(images["held"].digest) is not None
    assert cache.cached(images["x"].digest) is None
    # Released, it goes at the next eviction.
    clock.advance(timedelta(minutes=1))
    with cache.lease(images["z"].source, images["z"].digest):
        pass
    assert cache.cached(images["held"].digest) is None


@pytest.mark.skipif(shutil.which("umoci") is None, reason="umoci is not installed")
def test_an_image_built_by_umoci(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "etc").mkdir(parents=True)
    (tree / "etc" / "os-release").write_text('ID="umoci"\n')
    (tree / "bin").mkdir()
    (tree / "bin" / "sh").write_text("#!")
    (tree / "bin" / "sh").chmod(0o4755)
    layout = tmp_path / "layout"

    def umoci(*args: str) -> None:
        subprocess.run(["umoci", *args], check=True, capture_output=True)

    umoci("init", "--layout", str(layout))
    umoci("new", "--image", f"{layout}:t")
    umoci("insert", "--image", f"{layout}:t", str(tree), "/")
    index = json.loads((layout / "index.json").read_text())
    digest = index["manifests"][0]["digest"]
    cache = ImageCache(tmp_path / "cache", cap_bytes=1 << 30)
    with cache.lease(f"oci:{layout}:t", digest) as cached:
        assert (cached.rootfs / "etc" / "os-release").read_text() == 'ID="umoci"\n'
        assert stat.S_IMODE(os.lstat(cached.rootfs / "bin" / "sh").st_mode) == 0o555
