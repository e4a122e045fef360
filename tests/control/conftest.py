"""The fast control-plane tests' world: reconcilers over a fake backend (`world`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.control.world import World, make_world


@pytest.fixture
def world(database_url: str, tmp_path: Path) -> Iterator[World]:
    """Warm pools allowed (4 instances a type), on SQLite and, where configured, PostgreSQL."""
    yield from make_world(database_url, tmp_path, quotas={"warm_pool_instances_per_type": 4})
