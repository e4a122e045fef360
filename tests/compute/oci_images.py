"""Small real layers and images for the image tests, built offline: layers with
Python's tarfile (hostile ones included, which no image builder would write), images as
OCI layouts whose JSON is written here by hand."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Member:
    name: str
    type: bytes = tarfile.REGTYPE
    data: bytes = b""
    mode: int = 0o644
    linkname: str = ""


def layer(*members: Member) -> bytes:
    """An uncompressed tar layer holding `members` exactly as given."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for member in members:
            info = tarfile.TarInfo(member.name)
            info.type = member.type
            info.mode = member.mode
            info.linkname = member.linkname
            if member.type in (tarfile.CHRTYPE, tarfile.BLKTYPE):
                info.devmajor, info.devminor = 1, 3
            info.size = len(member.data) if member.type == tarfile.REGTYPE else 0
            tar.addfile(info, io.BytesIO(member.data) if info.size else None)
    return out.getvalue()


def file(name: str, data: bytes = b"x", mode: int = 0o644) -> Member:
    return Member(name, data=data, mode=mode)


def directory(name: str, mode: int = 0o755) -> Member:
    return Member(name, tarfile.DIRTYPE, mode=mode)


def symlink(name: str, target: str) -> Member:
    return Member(name, tarfile.SYMTYPE, mode=0o777, linkname=target)


def hardlink(name: str, target: str) -> Member:
    return Member(name, tarfile.LNKTYPE, linkname=target)


def sha256(data: bytes) -> str:
    return f"sha256:{hashlib.sha256(data).hexdigest()}"


@dataclass(frozen=True)
class Layout:
    path: Path
    digest: str  # of the image manifest
    layer_digests: list[str]

    @property
    def source(self) -> str:
        return f"oci:{self.path}:latest"

    def blob(self, digest: str) -> Path:
        return self.path / "blobs" / "sha256" / digest.removeprefix("sha256:")


def oci_layout(path: Path, layers: list[bytes], env: list[str] | None = None) -> Layout:
    """An OCI image layout at `path` with gzip `layers` (given uncompressed), tagged
    `latest`."""
    blobs = path / "blobs" / "sha256"
    blobs.mkdir(parents=True)

    def put(data: bytes) -> tuple[str, int]:
        digest = sha256(data)
        (blobs / digest.removeprefix("sha256:")).write_bytes(data)
        return digest, len(data)

    descriptors = []
    for raw in layers:
        digest, size = put(gzip.compress(raw, mtime=0))
        descriptors.append(
            {
                "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                "digest": digest,
                "size": size,
            }
        )
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Env": env or ["PATH=/usr/bin"], "Cmd": ["train"]},
        "rootfs": {"type": "layers", "diff_ids": [sha256(raw) for raw in layers]},
    }
    config_digest, config_size = put(json.dumps(config).encode())
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": config_digest,
            "size": config_size,
        },
        "layers": descriptors,
    }
    manifest_digest, manifest_size = put(json.dumps(manifest).encode())
    index = {
        "schemaVersion": 2,
        "manifests": [
            {
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": manifest_digest,
                "size": manifest_size,
                "annotations": {"org.opencontainers.image.ref.name": "latest"},
            }
        ],
    }
    (path / "index.json").write_text(json.dumps(index))
    (path / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    return Layout(path, manifest_digest, [d["digest"] for d in descriptors])
