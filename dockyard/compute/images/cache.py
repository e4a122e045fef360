"""A host's image cache: each image pulled once, by digest, unpacked into a read-only
root shared by every instance that runs it.

    <root>/<hex of the manifest's sha256>/rootfs/     the image's tree, sealed read-only
    <root>/<hex>/config.json                           the image config (Env, Entrypoint...)
    <root>/<hex>/complete                              its size; written last
    <root>/.locks/<hex>.pull, <hex>.use                flock files (kept, never removed)
    <root>/.state/<hex>.used                           when it was last handed out
    <root>/.tmp/                                       pulls in progress

Why each piece:

- Content-addressed by the manifest's digest, never by a tag: a tag moves, a digest
  names exactly the blobs the job was promised, so two jobs of one digest share a tree.
- A pull happens in `.tmp/`, is sealed (no write bit anywhere), gets its `complete`
  marker last and only then is renamed into place: a reader sees a whole image or
  none, and a crash leaves only `.tmp/` litter (cleared by the next pull).
- `skopeo copy` brings the image into a `dir:` layout, not `oci:` - writing `oci:` from a
  registry's Docker v2 manifest converts it, and the digest asked for would no longer be
  the manifest's; `dir:` keeps the manifest byte for byte (`--preserve-digests` makes
  skopeo refuse rather than change one). skopeo checks what it fetches, and so do we:
  the manifest's sha256 against the digest asked for, each blob's against the manifest,
  each uncompressed layer against the config's diff_ids - before and as it unpacks.
- One pull per digest: the `.pull` lock is held (flock, so a crashed puller lets go) by
  whoever pulls; a second caller blocks on it and then finds the image complete.
- In use means a shared flock on `.use`, held for as long as a caller holds its
  `ImageLease`; eviction takes that lock exclusively without waiting and skips an image
  it cannot get, so an image in use (or being pulled) is never evicted, and a caller
  arriving during an eviction waits for it and pulls again.
- The cap counts sealed images' disk use; past it, the least recently handed out go
  first (last use recorded from the clock, not file times, so tests can drive it).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import secrets
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from dockyard.clock import Clock, RealClock
from dockyard.compute.images.layers import (
    UnpackReport,
    remove_tree,
    seal,
    unpack_layers,
)

_DIGEST = re.compile(r"^sha256:([0-9a-f]{64})$")
_LAYER_TYPES = (
    "application/vnd.oci.image.layer.v1.tar",
    "application/vnd.oci.image.layer.v1.tar+gzip",
    "application/vnd.oci.image.layer.v1.tar+zstd",
    "application/vnd.docker.image.rootfs.diff.tar.gzip",
)
_LISTS = (
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
)

# Runs skopeo's argv; tests may count calls through it.
Runner = Callable[[list[str]], None]


class ImageError(Exception):
    """An image that cannot be pulled or does not match its digest, with a message a
    person can act on (it names the image)."""


@dataclass(frozen=True)
class CachedImage:
    digest: str  # sha256:<hex> of the manifest
    path: Path  # <root>/<hex>
    size: int  # bytes on disk
    report: UnpackReport | None  # what the unpack neutralised (None: it was cached)

    @property
    def rootfs(self) -> Path:
        return self.path / "rootfs"

    def config(self) -> dict[str, Any]:
        loaded: dict[str, Any] = json.loads((self.path / "config.json").read_text())
        return loaded


def skopeo_runner(argv: list[str]) -> None:
    try:
        subprocess.run(argv, check=True, capture_output=True, text=True)
    except FileNotFoundError as exc:
        raise ImageError(f"{argv[0]} is not installed (apt-get install skopeo)") from exc
    except subprocess.CalledProcessError as exc:
        raise ImageError(f"skopeo could not copy the image: {exc.stderr.strip()[-2000:]}") from exc


def hex_of(digest: str) -> str:
    match = _DIGEST.match(digest)
    if match is None:
        raise ImageError(f"{digest!r} is not a sha256 digest (sha256:<64 hex digits>)")
    return match.group(1)


class ImageCache:
    def __init__(
        self,
        root: Path,
        cap_bytes: int,
        clock: Clock | None = None,
        runner: Runner = skopeo_runner,
        skopeo: str = "skopeo",
        limit_bytes: int | None = None,
    ) -> None:
        self.root = root
        self.cap_bytes = cap_bytes
        self.clock = clock or RealClock()
        self.runner = runner
        self.skopeo = skopeo
        self.limit_bytes = limit_bytes  # what one image may unpack to
        for name in (".locks", ".state", ".tmp"):
            (root / name).mkdir(parents=True, exist_ok=True, mode=0o700)

    # -- handing images out ------------------------------------------------------------

    @contextmanager
    def lease(self, source: str, digest: str) -> Iterator[CachedImage]:
        """The image `digest` (pulled from `source`, a skopeo reference such as
        `docker://registry/repo@sha256:...`, `oci:/path:tag` or `docker-archive:/x.tar`,
        if it is not cached), held in use until the block ends."""
        key = hex_of(digest)
        with self._flock(f"{key}.use", fcntl.LOCK_SH):
            image = self._cached(key)
            if image is None:
                with self._flock(f"{key}.pull", fcntl.LOCK_EX):
                    image = self._cached(key) or self._pull(source, digest, key)
                self._evict()
            self._touch(key)
            try:
                yield image
            finally:
                self._touch(key)

    def cached(self, digest: str) -> CachedImage | None:
        return self._cached(hex_of(digest))

    def _cached(self, key: str) -> CachedImage | None:
        path = self.root / key
        try:
            size = int((path / "complete").read_text())
        except (FileNotFoundError, ValueError):
            return None
        return CachedImage(f"sha256:{key}", path, size, None)

    # -- pulling -------------------------------------------------------------------------

    def _pull(self, source: str, digest: str, key: str) -> CachedImage:
        work = self.root / ".tmp" / f"{key}.{secrets.token_hex(4)}"
        work.mkdir(mode=0o700)
        try:
            layout = work / "layout"
            self.runner(
                [self.skopeo, "copy", "--quiet", "--preserve-digests", source, f"dir:{layout}"]
            )
            manifest, config = _verified(layout, digest, source)
            image = work / "image"
            rootfs = image / "rootfs"
            rootfs.mkdir(parents=True, mode=0o755)
            layers = [layout / hex_of(layer["digest"]) for layer in manifest["layers"]]
            try:
                report = unpack_layers(
                    layers, rootfs, config["rootfs"]["diff_ids"], self.limit_bytes
                )
            except Exception as exc:
                raise ImageError(f"image {source} ({digest}) was refused: {exc}") from exc
            (image / "config.json").write_bytes(json.dumps(config).encode())
            size = seal(rootfs)
            _write_durably(image / "complete", str(size).encode())
            for name in ("config.json", "complete"):
                os.chmod(image / name, 0o444)
            os.chmod(image, 0o555)
            os.rename(image, self.root / key)
            return CachedImage(digest, self.root / key, size, report)
        finally:
            remove_tree(work)

    # -- eviction ------------------------------------------------------------------------

    def _evict(self) -> None:
        """Past the cap, drop the least recently used images no one holds."""
        with self._flock("evict", fcntl.LOCK_EX):
            images = [image for image in map(self._cached, self._keys()) if image is not None]
            total = sum(image.size for image in images)
            for image in sorted(images, key=lambda image: self._last_use(image.path.name)):
                if total <= self.cap_bytes:
                    return
                key = image.path.name
                with self._try_flock(f"{key}.use") as free:
                    if not free:
                        continue  # in use, or being pulled again
                    trash = self.root / ".tmp" / f"{key}.evicted.{secrets.token_hex(4)}"
                    # Out of sight first (one rename), then removed at leisure.
                    os.rename(image.path, trash)
                    (self.root / ".state" / f"{key}.used").unlink(missing_ok=True)
                    remove_tree(trash)
                    total -= image.size

    def _keys(self) -> list[str]:
        return [path.name for path in self.root.iterdir() if _DIGEST.match(f"sha256:{path.name}")]

    def _touch(self, key: str) -> None:
        stamp = self.root / ".state" / f"{key}.used"
        scratch = stamp.with_name(f"{stamp.name}.{secrets.token_hex(4)}")
        scratch.write_text(f"{self.clock.now().timestamp():.6f}")
        os.replace(scratch, stamp)

    def _last_use(self, key: str) -> float:
        try:
            return float((self.root / ".state" / f"{key}.used").read_text())
        except (FileNotFoundError, ValueError):
            return 0.0

    # -- locks ---------------------------------------------------------------------------

    @contextmanager
    def _flock(self, name: str, mode: int) -> Iterator[None]:
        with _lock_file(self.root / ".locks" / name) as handle:
            fcntl.flock(handle, mode)
            yield

    @contextmanager
    def _try_flock(self, name: str) -> Iterator[bool]:
        with _lock_file(self.root / ".locks" / name) as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                yield False
                return
            yield True


@contextmanager
def _lock_file(path: Path) -> Iterator[IO[bytes]]:
    # Its own open file description each time: flock then holds between threads too.
    with open(path, "ab") as handle:
        yield handle


def _write_durably(path: Path, data: bytes) -> None:
    with open(path, "xb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as source:
        while chunk := source.read(1024 * 1024):
            digest.update(chunk)
    return f"sha256:{digest.hexdigest()}"


def _verified(layout: Path, digest: str, source: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The manifest and config of a `dir:` layout, each blob checked against its digest."""
    raw = (layout / "manifest.json").read_bytes()
    found = f"sha256:{hashlib.sha256(raw).hexdigest()}"
    if found != digest:
        raise ImageError(f"image {source} has the manifest {found}, not {digest}")
    manifest: dict[str, Any] = json.loads(raw)
    if manifest.get("mediaType") in _LISTS or "manifests" in manifest:
        raise ImageError(
            f"{digest} is a manifest list: name the platform's manifest digest instead"
        )
    blobs = [manifest["config"], *manifest.get("layers", [])]
    for blob in blobs:
        path = layout / hex_of(blob["digest"])
        if not path.is_file() or path.stat().st_size != blob["size"]:
            raise ImageError(
                f"image {source}: blob {blob['digest']} is missing or its size is off"
            )
        if _sha256_file(path) != blob["digest"]:
            raise ImageError(f"image {source}: blob {blob['digest']} does not match its digest")
    for layer in manifest.get("layers", []):
        media = layer.get("mediaType", "")
        if media not in _LAYER_TYPES:
            raise ImageError(f"image {source}: layer media type {media!r} is not supported")
    config: dict[str, Any] = json.loads(
        (layout / hex_of(manifest["config"]["digest"])).read_bytes()
    )
    return manifest, config


def clear_leftovers(root: Path) -> None:
    """Pulls and evictions a crash interrupted (nothing else is in `.tmp`). Call while no
    pull runs, e.g. when the agent starts."""
    scratch = root / ".tmp"
    for path in scratch.iterdir() if scratch.is_dir() else []:
        if path.is_dir() and not path.is_symlink():
            remove_tree(path)
        else:
            path.unlink(missing_ok=True)
