"""ECR repositories on both databases: one name per account and region, pages in name
order, and a row per account that no other account reaches."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from dockyard.services import accounts, repositories
from dockyard.services.errors import (
    RepositoryAlreadyExistsException,
    RepositoryNotFoundException,
)
from dockyard.services.repositories import Registry
from dockyard.store import migrate
from dockyard.store.db import Database

NOW = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)
REGION = "us-east-1"
REGISTRY = Registry.at("", "0.0.0.0", 8080)


@pytest.fixture
def db(database_url: str) -> Iterator[Database]:
    database = Database(database_url)
    migrate.upgrade(database)
    yield database
    database.dispose()


def test_repositories_per_account(db: Database) -> None:
    with db.session() as session:
        team = accounts.create_account(session, NOW, "team").id
        other = accounts.create_account(session, NOW, "other").id
        for name in ("b", "a/x", "c"):
            repositories.create(session, NOW, REGISTRY, team, REGION, {"repositoryName": name})
        repositories.create(session, NOW, REGISTRY, other, REGION, {"repositoryName": "a/x"})
    with db.session() as session, pytest.raises(RepositoryAlreadyExistsException):
        repositories.create(session, NOW, REGISTRY, team, REGION, {"repositoryName": "b"})
    with db.read_session() as session:
        first = repositories.describe(session, REGISTRY, team, REGION, {"maxResults": 2})
        assert [r["repositoryName"] for r in first["repositories"]] == ["a/x", "b"]
        rest = repositories.describe(
            session, REGISTRY, team, REGION, {"nextToken": first["nextToken"]}
        )
        assert [r["repositoryName"] for r in rest["repositories"]] == ["c"]
        assert "nextToken" not in rest
        assert first["repositories"][0]["repositoryUri"] == f"127.0.0.1:8080/{team}/a/x"
        # Another region of the same account has none.
        assert repositories.describe(session, REGISTRY, team, "eu-west-1", {}) == {
            "repositories": []
        }
    with db.session() as session:
        repositories.delete(session, REGISTRY, other, REGION, {"repositoryName": "a/x"})
        with pytest.raises(RepositoryNotFoundException):
            repositories.delete(session, REGISTRY, other, REGION, {"repositoryName": "b"})
    with db.read_session() as session:
        left = repositories.describe(session, REGISTRY, team, REGION, {})["repositories"]
        assert [r["repositoryName"] for r in left] == ["a/x", "b", "c"]


def test_the_registry_address() -> None:
    assert Registry.at("", "::", 9000).host == "127.0.0.1:9000"
    assert Registry.at("", "::1", 9000).host == "[::1]:9000"
    behind = Registry.at("https://registry.example.com/", "0.0.0.0", 8080)
    assert (behind.url, behind.uri("123456789012", "t")) == (
        "https://registry.example.com",
        "registry.example.com/123456789012/t",
    )
