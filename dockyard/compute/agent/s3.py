"""The instance agent's view of S3: just enough to stage inputs and upload results.

A training instance reads its channels, code and checkpoints from S3 and writes its model,
output and checkpoints back. Two stores serve that: `LocalS3` keeps buckets as directories
on this host (a single-machine deployment needs no object store at all), and `BotoS3` talks
to any S3-compatible service. Both speak full `s3://bucket/key` URIs so the agent never
cares which one it has; every failure is an `S3Error` whose message can go straight into a
job's FailureReason.
"""

from __future__ import annotations

import os
import posixpath
import shutil
import stat
import uuid
from pathlib import Path
from typing import Any, Protocol

from dockyard.compute.wire.bucket_marks import marked_owner

_NOFOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | _NOFOLLOW
_FILE_FLAGS = os.O_RDONLY | os.O_NONBLOCK | _NOFOLLOW


class S3Error(Exception):
    """An S3 request that failed; `code` follows S3's error codes where one applies."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def parse_s3_uri(uri: str) -> tuple[str, str]:
    """Split `s3://bucket/key` into (bucket, key); the key may be empty (a bucket prefix)."""
    if not isinstance(uri, str) or not uri.startswith("s3://"):
        raise S3Error("InvalidURI", f'"{uri}" is not an S3 URI (expected s3://bucket/key)')
    bucket, _, key = uri[len("s3://") :].partition("/")
    if not bucket:
        raise S3Error("InvalidURI", f'"{uri}" names no bucket (expected s3://bucket/key)')
    if "\x00" in uri:
        raise S3Error("InvalidURI", f"{uri!r} contains a NUL character")
    return bucket, key


def join_uri(bucket: str, key: str) -> str:
    return f"s3://{bucket}/{key}"


class S3Store(Protocol):
    """What the agent asks of an object store."""

    def list(self, prefix_uri: str) -> list[str]:
        """Every object whose key starts with the prefix, as sorted full s3:// URIs."""
        ...

    def download(self, uri: str, path: Path) -> None:
        """Copy one object to a local file, creating its parent directories."""
        ...

    def upload(self, path: Path, uri: str) -> None:
        """Copy one local file to an object (the bucket must exist)."""
        ...

    def exists(self, uri: str) -> bool:
        """Whether exactly this object exists."""
        ...

    def read_bytes(self, uri: str) -> bytes: ...

    def write_bytes(self, uri: str, data: bytes) -> None: ...


class LocalS3:
    """Buckets as directories: `s3://bucket/key` is the file `root/bucket/key`.

    Like S3, a bucket must exist (as a directory) before anything is written to it, so a
    job pointed at a missing bucket fails here as it would against the real service.

    With `owners` and `account_id` (an instance agent's store: every job's), a bucket
    is used only if the server marked the directory opened as the account's
    (`dockyard.compute.wire.bucket_marks`), whichever way its name reached the agent (a request,
    a manifest's prefix); everything after that goes by descriptor from that very
    directory, one component at a time, never through a link.
    """

    def __init__(
        self, root: str | Path, owners: str | Path | None = None, account_id: str | None = None
    ) -> None:
        self.root = Path(root).resolve()
        self.owners = Path(owners) if owners is not None else None
        self.account_id = account_id
        self._root: int | None = None  # the store's directory, opened once

    def _bucket_dir(self, bucket: str) -> Path:
        if bucket in (".", "..") or "/" in bucket or "\\" in bucket:
            raise S3Error("InvalidBucketName", f'"{bucket}" is not a valid bucket name')
        return self.root / bucket

    def _key_parts(self, uri: str) -> tuple[str, list[str]]:
        bucket, key = parse_s3_uri(uri)
        self._bucket_dir(bucket)
        parts = key.split("/")
        # A key is a flat name in S3, but here it becomes a path: refuse anything that
        # could leave the bucket directory or name the directory itself.
        if not key or key.endswith("/") or any(p in ("", ".", "..") for p in parts):
            raise S3Error("InvalidKey", f'"{uri}" cannot be stored by the local S3 store')
        return bucket, parts

    def _open_bucket(self, bucket: str) -> int:
        """A descriptor of the bucket's directory, once it is known to be usable."""
        self._bucket_dir(bucket)
        try:
            fd = os.open(bucket, _DIR_FLAGS, dir_fd=self._root_fd())
        except OSError:
            raise S3Error("NoSuchBucket", f'The bucket "{bucket}" does not exist') from None
        if self.owners is not None and marked_owner(self.owners, bucket, fd) != self.account_id:
            os.close(fd)
            raise S3Error(
                "AccessDenied",
                f'Access to the bucket "{bucket}" is denied (AccessDenied): it is not a '
                "bucket of the job's account",
            )
        return fd

    def _root_fd(self) -> int:
        if self._root is None:
            try:
                self._root = os.open(self.root, _DIR_FLAGS)
            except OSError:
                raise S3Error("NoSuchBucket", f"There is no S3 store at {self.root}") from None
        return self._root

    def _walk_to(self, bucket_fd: int, parts: list[str], *, make: bool = False) -> int | None:
        """A descriptor of the directory `parts` below the bucket; None if it is not
        there (or is not a real directory)."""
        fd = os.dup(bucket_fd)
        try:
            for part in parts:
                if make:
                    try:
                        os.mkdir(part, 0o700, dir_fd=fd)
                    except FileExistsError:
                        pass
                try:
                    inner = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except OSError:
                    if make:
                        raise
                    os.close(fd)
                    return None
                os.close(fd)
                fd = inner
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _open_object(self, uri: str) -> int:
        bucket, parts = self._key_parts(uri)
        bucket_fd = self._open_bucket(bucket)
        try:
            directory = self._walk_to(bucket_fd, parts[:-1])
        finally:
            os.close(bucket_fd)
        if directory is not None:
            try:
                fd = os.open(parts[-1], _FILE_FLAGS, dir_fd=directory)
            except OSError:
                fd = None
            finally:
                os.close(directory)
            if fd is not None:
                if stat.S_ISREG(os.fstat(fd).st_mode):
                    return fd
                os.close(fd)
        raise S3Error("NoSuchKey", f'The object "{uri}" does not exist')

    def list(self, prefix_uri: str) -> list[str]:
        bucket, prefix = parse_s3_uri(prefix_uri)
        bucket_fd = self._open_bucket(bucket)
        try:
            # S3 prefixes are plain string prefixes, not directories ("data/tr" matches
            # "data/train/x"), so walk from the deepest directory the prefix names fully.
            above = prefix.split("/")[:-1]
            if ".." in above or "." in above or "" in above:
                return []
            start = self._walk_to(bucket_fd, above)
        finally:
            os.close(bucket_fd)
        if start is None:
            return []
        found = []
        base = "/".join(above)
        try:
            for dirpath, _dirs, files, dir_fd in os.fwalk(".", dir_fd=start):
                for name in files:
                    if name.startswith(".upload-"):
                        continue  # another writer's object, not yet in place
                    try:
                        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
                    except OSError:
                        continue
                    if not stat.S_ISREG(info.st_mode):
                        continue
                    inner = posixpath.normpath(posixpath.join(dirpath, name))
                    key = f"{base}/{inner}" if base else inner
                    if key.startswith(prefix):
                        found.append(join_uri(bucket, key))
        finally:
            os.close(start)
        return sorted(found)

    def download(self, uri: str, path: Path) -> None:
        fd = self._open_object(uri)
        with os.fdopen(fd, "rb") as source:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "wb") as target:
                shutil.copyfileobj(source, target, 1024 * 1024)

    def upload(self, path: Path, uri: str) -> None:
        with open(path, "rb") as source:
            self._write(uri, lambda target: shutil.copyfileobj(source, target, 1024 * 1024))

    def exists(self, uri: str) -> bool:
        try:
            os.close(self._open_object(uri))
        except S3Error as exc:
            if exc.code == "NoSuchKey":
                return False
            raise
        return True

    def read_bytes(self, uri: str) -> bytes:
        with os.fdopen(self._open_object(uri), "rb") as source:
            return source.read()

    def write_bytes(self, uri: str, data: bytes) -> None:
        self._write(uri, lambda target: target.write(data))

    def _write(self, uri: str, fill: Any) -> None:
        bucket, parts = self._key_parts(uri)
        bucket_fd = self._open_bucket(bucket)
        try:
            directory = self._walk_to(bucket_fd, parts[:-1], make=True)
        except OSError as exc:
            raise S3Error("InternalError", f'Could not write "{uri}": {exc}') from exc
        finally:
            os.close(bucket_fd)
        assert directory is not None
        # Readers (other instances, the control plane) must never see half an object.
        partial = f".upload-{uuid.uuid4().hex}"
        try:
            fd = os.open(
                partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o600, dir_fd=directory
            )
            try:
                with os.fdopen(fd, "wb") as target:
                    fill(target)
                os.replace(partial, parts[-1], src_dir_fd=directory, dst_dir_fd=directory)
            finally:
                try:
                    os.unlink(partial, dir_fd=directory)
                except FileNotFoundError:
                    pass
        except OSError as exc:
            raise S3Error("InternalError", f'Could not write "{uri}": {exc}') from exc
        finally:
            os.close(directory)


class BotoS3:
    """Any S3-compatible service (AWS, MinIO, moto) through boto3."""

    def __init__(
        self,
        endpoint_url: str | None,
        access_key_id: str | None,
        secret_access_key: str | None,
        region: str | None = "us-east-1",
    ) -> None:
        # Imported here: boto3 takes a noticeable fraction of a second to import, and
        # agents on LocalS3 (the common case on one host) never need it.
        import boto3
        from botocore.config import Config

        self._client: Any = boto3.client(
            "s3",
            endpoint_url=endpoint_url,
            aws_access_key_id=access_key_id,
            aws_secret_access_key=secret_access_key,
            region_name=region or "us-east-1",
            # Path-style addressing: self-hosted services rarely have wildcard DNS.
            config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 5}),
        )

    def _call(self, uri: str, action: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return fn(*args, **kwargs)
        except ClientError as exc:
            error = exc.response.get("Error", {})
            code = str(error.get("Code", "Unknown"))
            message = str(error.get("Message", "")) or code
            raise S3Error(code, f'Could not {action} "{uri}": {code}: {message}') from exc
        except BotoCoreError as exc:
            raise S3Error("ConnectionError", f'Could not {action} "{uri}": {exc}') from exc

    def list(self, prefix_uri: str) -> list[str]:
        bucket, prefix = parse_s3_uri(prefix_uri)

        def collect() -> list[str]:
            pages = self._client.get_paginator("list_objects_v2").paginate(
                Bucket=bucket, Prefix=prefix
            )
            return [join_uri(bucket, o["Key"]) for page in pages for o in page.get("Contents", [])]

        return sorted(self._call(prefix_uri, "list", collect))

    def download(self, uri: str, path: Path) -> None:
        bucket, key = parse_s3_uri(uri)
        path.parent.mkdir(parents=True, exist_ok=True)
        # Into the file at `path` itself (it may be a descriptor's /proc/self/fd/N), not
        # a temporary file beside it renamed over it.
        with open(path, "wb") as target:
            self._call(uri, "download", self._client.download_fileobj, bucket, key, target)

    def upload(self, path: Path, uri: str) -> None:
        bucket, key = parse_s3_uri(uri)
        self._call(uri, "upload to", self._client.upload_file, str(path), bucket, key)

    def exists(self, uri: str) -> bool:
        bucket, key = parse_s3_uri(uri)
        try:
            self._call(uri, "read", self._client.head_object, Bucket=bucket, Key=key)
        except S3Error as exc:
            if exc.code in ("404", "NoSuchKey", "NotFound"):
                return False
            raise
        return True

    def read_bytes(self, uri: str) -> bytes:
        bucket, key = parse_s3_uri(uri)
        response = self._call(uri, "read", self._client.get_object, Bucket=bucket, Key=key)
        return bytes(response["Body"].read())

    def write_bytes(self, uri: str, data: bytes) -> None:
        bucket, key = parse_s3_uri(uri)
        self._call(uri, "write", self._client.put_object, Bucket=bucket, Key=key, Body=data)


def s3_from_config(config: dict[str, Any], account_id: str | None = None) -> S3Store:
    """`{"root": DIR, "owners": DIR}` for LocalS3 (buckets of `account_id`'s only, when
    `owners` names the store's marks), or `{"endpoint_url": ..., credentials, "region"}`."""
    if config.get("root"):
        return LocalS3(config["root"], config.get("owners"), account_id)
    if "endpoint_url" in config or "access_key_id" in config:
        return BotoS3(
            config.get("endpoint_url"),
            config.get("access_key_id"),
            config.get("secret_access_key"),
            config.get("region"),
        )
    raise S3Error("InvalidConfig", f"cannot tell which S3 store {sorted(config)} describes")
