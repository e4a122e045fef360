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
import shutil
import tempfile
from pathlib import Path
from typing import Any, Protocol


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
    """

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root).resolve()

    def _bucket_dir(self, bucket: str) -> Path:
        if bucket in (".", "..") or "/" in bucket or "\\" in bucket:
            raise S3Error("InvalidBucketName", f'"{bucket}" is not a valid bucket name')
        return self.root / bucket

    def _path(self, uri: str) -> Path:
        bucket, key = parse_s3_uri(uri)
        base = self._bucket_dir(bucket)
        parts = key.split("/")
        # A key is a flat name in S3, but here it becomes a path: refuse anything that
        # could leave the bucket directory or name the directory itself.
        if not key or key.endswith("/") or any(p in ("", ".", "..") for p in parts):
            raise S3Error("InvalidKey", f'"{uri}" cannot be stored by the local S3 store')
        return base.joinpath(*parts)

    def _require_bucket(self, bucket: str) -> Path:
        base = self._bucket_dir(bucket)
        if not base.is_dir():
            raise S3Error("NoSuchBucket", f'The bucket "{bucket}" does not exist')
        return base

    def list(self, prefix_uri: str) -> list[str]:
        bucket, prefix = parse_s3_uri(prefix_uri)
        base = self._require_bucket(bucket)
        # S3 prefixes are plain string prefixes, not directories ("data/tr" matches
        # "data/train/x"), so walk from the deepest directory the prefix names fully.
        start = base.joinpath(*prefix.split("/")[:-1]) if "/" in prefix else base
        if ".." in prefix.split("/") or not start.is_dir():
            return []
        found = []
        for dirpath, _dirs, files in os.walk(start):
            for name in files:
                if name.startswith(".upload-"):
                    continue  # another writer's object, not yet in place
                key = (Path(dirpath) / name).relative_to(base).as_posix()
                if key.startswith(prefix):
                    found.append(join_uri(bucket, key))
        return sorted(found)

    def download(self, uri: str, path: Path) -> None:
        source = self._path(uri)
        if not source.is_file():
            raise S3Error("NoSuchKey", f'The object "{uri}" does not exist')
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, path)

    def upload(self, path: Path, uri: str) -> None:
        self._write(uri, lambda tmp: shutil.copyfile(path, tmp))

    def exists(self, uri: str) -> bool:
        try:
            return self._path(uri).is_file()
        except S3Error:
            return False

    def read_bytes(self, uri: str) -> bytes:
        source = self._path(uri)
        if not source.is_file():
            raise S3Error("NoSuchKey", f'The object "{uri}" does not exist')
        return source.read_bytes()

    def write_bytes(self, uri: str, data: bytes) -> None:
        self._write(uri, lambda tmp: Path(tmp).write_bytes(data))

    def _write(self, uri: str, fill: Any) -> None:
        bucket, _ = parse_s3_uri(uri)
        self._require_bucket(bucket)
        target = self._path(uri)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            # Readers (other instances, the control plane) must never see half an object.
            fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".upload-")
            os.close(fd)
            try:
                fill(tmp)
                os.replace(tmp, target)
            finally:
                if os.path.exists(tmp):
                    os.unlink(tmp)
        except OSError as exc:
            raise S3Error("InternalError", f'Could not write "{uri}": {exc}') from exc


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
        self._call(uri, "download", self._client.download_file, bucket, key, str(path))

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


def s3_from_config(config: dict[str, Any]) -> S3Store:
    """`{"root": DIR}` for LocalS3, or `{"endpoint_url": ..., credentials, "region"}`."""
    if config.get("root"):
        return LocalS3(config["root"])
    if "endpoint_url" in config or "access_key_id" in config:
        return BotoS3(
            config.get("endpoint_url"),
            config.get("access_key_id"),
            config.get("secret_access_key"),
            config.get("region"),
        )
    raise S3Error("InvalidConfig", f"cannot tell which S3 store {sorted(config)} describes")
