"""Both S3 stores behave alike: LocalS3 on a directory, BotoS3 against a moto server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from moto.server import ThreadedMotoServer

from dockyard.compute.agent.s3 import (
    BotoS3,
    LocalS3,
    S3Error,
    S3Store,
    parse_s3_uri,
    s3_from_config,
)

REGION = "us-east-1"


@pytest.fixture(scope="module")
def moto_endpoint() -> Iterator[str]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture(params=["local", "boto"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> S3Store:
    """A store holding an empty bucket "bkt" (unique per test on the shared moto server)."""
    if request.param == "local":
        (tmp_path / "s3" / "bkt").mkdir(parents=True)
        return LocalS3(tmp_path / "s3")
    endpoint = request.getfixturevalue("moto_endpoint")
    client = boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id="test",
        aws_secret_access_key="test",
        region_name=REGION,
    )
    # moto keeps state between tests, so start from an empty bucket each time.
    listing = client.list_objects_v2(Bucket="bkt") if _has_bucket(client) else {}
    for obj in listing.get("Contents", []):
        client.delete_object(Bucket="bkt", Key=obj["Key"])
    if not _has_bucket(client):
        client.create_bucket(Bucket="bkt")
    return s3_from_config(
        {
            "endpoint_url": endpoint,
            "access_key_id": "test",
            "secret_access_key": "test",
            "region": REGION,
        }
    )


def _has_bucket(client: object) -> bool:
    names = [b["Name"] for b in client.list_buckets()["Buckets"]]  # type: ignore[attr-defined]
    return "bkt" in names


def test_parse_s3_uri() -> None:
    assert parse_s3_uri("s3://b/a/b.txt") == ("b", "a/b.txt")
    assert parse_s3_uri("s3://b") == ("b", "")
    assert parse_s3_uri("s3://b/") == ("b", "")
    for bad in ["", "http://b/k", "s3://", "s3:///key", "b/k"]:
        with pytest.raises(S3Error, match="S3 URI|no bucket"):
            parse_s3_uri(bad)


def test_round_trip_list_and_exists(store: S3Store, tmp_path: Path) -> None:
    store.write_bytes("s3://bkt/data/train/a.csv", b"a")
    store.write_bytes("s3://bkt/data/train/sub/b.csv", b"b")
    store.write_bytes("s3://bkt/data/test/c.csv", b"c")
    source = tmp_path / "up.bin"
    source.write_bytes(b"uploaded")
    store.upload(source, "s3://bkt/other/up.bin")

    assert store.list("s3://bkt/data/train/") == [
        "s3://bkt/data/train/a.csv",
        "s3://bkt/data/train/sub/b.csv",
    ]
    # S3 prefixes are string prefixes, not directories.
    assert store.list("s3://bkt/data/t") == [
        "s3://bkt/data/test/c.csv",
        "s3://bkt/data/train/a.csv",
        "s3://bkt/data/train/sub/b.csv",
    ]
    assert len(store.list("s3://bkt")) == 4
    assert store.list("s3://bkt/nothing/") == []
    assert store.exists("s3://bkt/other/up.bin")
    assert not store.exists("s3://bkt/other/missing")
    assert store.read_bytes("s3://bkt/other/up.bin") == b"uploaded"
    target = tmp_path / "down" / "deep" / "b.csv"
    store.download("s3://bkt/data/train/sub/b.csv", target)
    assert target.read_bytes() == b"b"


def test_errors(store: S3Store, tmp_path: Path) -> None:
    with pytest.raises(S3Error):
        store.read_bytes("s3://bkt/missing")
    with pytest.raises(S3Error):
        store.download("s3://bkt/missing", tmp_path / "x")
    with pytest.raises(S3Error, match="(?i)bucket"):
        store.write_bytes("s3://no-such-bucket-here/k", b"x")


@pytest.mark.parametrize(
    "uri",
    ["s3://bkt/../escape", "s3://bkt/a/../../escape", "s3://../k", "s3://bkt/a/", "s3://bkt"],
)
def test_local_refuses_escapes(tmp_path: Path, uri: str) -> None:
    (tmp_path / "s3" / "bkt").mkdir(parents=True)
    store = LocalS3(tmp_path / "s3")
    with pytest.raises(S3Error):
        store.write_bytes(uri, b"x")
    assert not (tmp_path / "escape").exists()
    assert store.list("s3://bkt/../") == []


_segment = st.text(alphabet="abcXYZ019-_.", min_size=1, max_size=8).filter(
    lambda s: s not in (".", "..")
)


@settings(max_examples=40, deadline=None)
@given(keys=st.lists(st.lists(_segment, min_size=1, max_size=3).map("/".join), max_size=6))
def test_local_lists_exactly_what_was_written(
    tmp_path_factory: pytest.TempPathFactory, keys: list[str]
) -> None:
    root = tmp_path_factory.mktemp("s3")
    (root / "bkt").mkdir()
    store = LocalS3(root)
    written: set[str] = set()
    for key in keys:
        # A key that is also a "directory" of another key cannot exist on a file system.
        if any(k.startswith(key + "/") or key.startswith(k + "/") for k in written):
            continue
        store.write_bytes(f"s3://bkt/{key}", key.encode())
        written.add(key)
    assert store.list("s3://bkt/") == sorted(f"s3://bkt/{k}" for k in written)
    for key in written:
        assert store.read_bytes(f"s3://bkt/{key}") == key.encode()


def test_config_picks_the_store(tmp_path: Path) -> None:
    assert isinstance(s3_from_config({"root": str(tmp_path)}), LocalS3)
    assert isinstance(
        s3_from_config({"endpoint_url": "http://127.0.0.1:1", "region": REGION}), BotoS3
    )
    with pytest.raises(S3Error):
        s3_from_config({})
