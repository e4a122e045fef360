"""Migration 0017: jobs' runtimes get their phase, pools their released flag, both ways."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import select, text

from dockyard.domain.job_runtime import JobPhase
from dockyard.store import migrate
from dockyard.store.db import Database
from dockyard.store.tables import TrainingJob, WarmPool

NOW = "2026-01-01 00:00:00"
PLACEMENT = {"pool": "ml.m5.xlarge/us-east-1a", "az": "us-east-1a"}
# As 0016 kept them: with the outside S3 service's secret, which 0017 drops.
STORED_SPECS = [{"host": "algo-1", "s3": {"endpoint_url": "http://s3", "secret_access_key": "x"}}]
SPECS = [{"host": "algo-1", "s3": {"endpoint_url": "http://s3"}}]
# name -> (status, stop requested, runtime as 0016 kept it)
JOBS: dict[str, tuple[str, bool, dict[str, Any]]] = {
    "new": ("InProgress", False, {}),
    "resumed": ("InProgress", False, {"attempt": 2, "used_seconds": 30.5}),
    "placed": (
        "InProgress",
        False,
        {"placement": PLACEMENT, "home": "h", "placed_at": NOW, "specs": STORED_SPECS},
    ),
    "stopping": ("Stopping", True, {"placement": PLACEMENT, "home": "h", "specs": SPECS}),
    "interrupted": (
        "InProgress",
        False,
        {"placement": {**PLACEMENT, "block": "rc-1"}, "home": "h", "interrupting": "why"},
    ),
    "done": ("Completed", False, {"placement": PLACEMENT, "home": "h", "specs": SPECS}),
}
PHASES = {
    "new": JobPhase.QUEUED,
    "resumed": JobPhase.QUEUED,
    "placed": JobPhase.RUNNING,
    "stopping": JobPhase.ENDING,
    "interrupted": JobPhase.INTERRUPTING,
    "done": JobPhase.ENDED,
}


def _insert_old_rows(db: Database) -> None:
    with db.engine.begin() as connection:
        connection.execute(
            text("INSERT INTO accounts (id, name, created_at) VALUES ('111122223333', 'a', :now)"),
            {"now": NOW},
        )
        for name, (status, stop, runtime) in JOBS.items():
            connection.execute(
                text(
                    "INSERT INTO training_jobs (account_id, region, name, arn, status, "
                    "secondary_status, creation_time, last_modified_time, spec, transitions, "
                    "runtime, stop_requested, instance_type, instance_count) VALUES "
                    "('111122223333', 'us-east-1', :name, :arn, :status, 'Training', :now, "
                    ":now, '{}', '{}', :runtime, :stop, 'ml.m5.xlarge', 1)"
                ),
                {
                    "name": name,
                    "arn": f"arn:{name}",
                    "status": status,
                    "now": NOW,
                    "runtime": json.dumps(runtime),
                    "stop": stop,
                },
            )
        for job_id, placement in ((1, {**PLACEMENT, "released": True}), (2, PLACEMENT)):
            connection.execute(
                text(
                    "INSERT INTO warm_pools (account_id, region, status, instance_type, "
                    "instance_count, match_key, job_id, home, placement, born_at) VALUES "
                    "('111122223333', 'us-east-1', 'Terminated', 'ml.m5.xlarge', 1, 'k', "
                    ":job_id, 'h', :placement, :now)"
                ),
                {"job_id": job_id, "placement": json.dumps(placement), "now": NOW},
            )


def _old_rows(db: Database) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    with db.engine.connect() as connection:
        jobs = {
            name: json.loads(runtime) if isinstance(runtime, str) else runtime
            for name, runtime in connection.execute(
                text("SELECT name, runtime FROM training_jobs")
            )
        }
        pools = [
            json.loads(placement) if isinstance(placement, str) else placement
            for (placement,) in connection.execute(
                text("SELECT placement FROM warm_pools ORDER BY id")
            )
        ]
    return jobs, pools


def test_0017_moves_runtimes_and_released_pools_and_back(database_url: str) -> None:
    db = Database(database_url)
    try:
        migrate.upgrade(db, "0016")
        _insert_old_rows(db)
        migrate.upgrade(db)
        with db.read_session() as session:
            jobs = {job.name: job.runtime for job in session.scalars(select(TrainingJob))}
            pools = session.scalars(select(WarmPool).order_by(WarmPool.id)).all()
            assert {name: runtime.phase for name, runtime in jobs.items()} == PHASES
            assert (jobs["resumed"].attempt, jobs["resumed"].used_seconds) == (2, 30.5)
            assert jobs["placed"].placement is not None and jobs["placed"].home == "h"
            assert jobs["placed"].specs == SPECS and jobs["placed"].placed_at is not None
            assert jobs["interrupted"].interruption == "why"
            assert jobs["interrupted"].placement is not None
            assert jobs["interrupted"].placement.block == "rc-1"
            assert [pool.released for pool in pools] == [True, False]
            assert all(pool.placement == PLACEMENT for pool in pools)

        migrate.downgrade(db, "0016")
        runtimes, placements = _old_rows(db)
        placed = runtimes.pop("placed")
        assert placed == {**JOBS["placed"][2], "specs": SPECS}  # the secret stays gone
        assert runtimes == {
            name: runtime for name, (_, _, runtime) in JOBS.items() if name != "placed"
        }
        assert placements == [{**PLACEMENT, "released": True}, PLACEMENT]
    finally:
        db.dispose()
