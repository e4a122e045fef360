"""Migration 0018: clusters, warm pools and training plans get claim columns, both ways,
and a claim on each works as a job's does."""

from __future__ import annotations

from sqlalchemy import inspect, text

from dockyard.store import claims, migrate
from dockyard.store.db import Database
from dockyard.store.tables import Cluster, TrainingPlan, WarmPool

NOW = "2026-01-01 00:00:00"
COLUMNS = {"claim_owner", "claim_token", "claim_expires_at"}
TABLES = ("clusters", "warm_pools", "training_plans")


def _columns(db: Database, table: str) -> set[str]:
    return {column["name"] for column in inspect(db.engine).get_columns(table)}


def _insert_rows(db: Database) -> None:
    with db.engine.begin() as connection:
        connection.execute(
            text("INSERT INTO accounts (id, name, created_at) VALUES ('111122223333', 'a', :now)"),
            {"now": NOW},
        )
        connection.execute(
            text(
                "INSERT INTO clusters (account_id, region, name, cluster_id, arn, status, spec, "
                "tags, created_at, last_modified_time) VALUES ('111122223333', 'us-east-1', "
                "'c', 'abcdefabcdef', 'arn:c', 'Creating', '{}', '{}', :now, :now)"
            ),
            {"now": NOW},
        )
        connection.execute(
            text(
                "INSERT INTO warm_pools (account_id, region, status, instance_type, "
                "instance_count, match_key, job_id, home, placement, born_at) VALUES "
                "('111122223333', 'us-east-1', 'Available', 'ml.m5.xlarge', 1, 'k', 1, 'h', "
                "'{}', :now)"
            ),
            {"now": NOW},
        )
        connection.execute(
            text(
                "INSERT INTO training_plans (account_id, region, name, arn, status, "
                "offering_id, target, instance_type, instance_count, spare_per_ultraserver, "
                "upfront_fee, currency, start_time, end_time, tags, created_at, "
                "last_modified_time) VALUES ('111122223333', 'us-east-1', 'p', 'arn:p', "
                "'Pending', 'o', 'training-job', 'ml.m5.xlarge', 1, 0, '1', 'USD', :now, :now, "
                "'{}', :now, :now)"
            ),
            {"now": NOW},
        )


def test_0018_adds_claims_to_clusters_pools_and_plans_and_back(database_url: str) -> None:
    db = Database(database_url)
    try:
        migrate.upgrade(db, "0017")
        _insert_rows(db)
        assert not any(COLUMNS & _columns(db, table) for table in TABLES)
        migrate.upgrade(db)
        assert all(COLUMNS <= _columns(db, table) for table in TABLES)
        here = claims.Claimant()
        far = claims.Claimant(owner="elsewhere/boot/1/1")
        for table in (Cluster, WarmPool, TrainingPlan):
            with db.session() as session:  # rows from before 0018 are unclaimed
                assert claims.claim(session, table, 1, far, "far") is not None
            with db.session() as session:
                assert claims.claim(session, table, 1, here, "mine") is None
            with db.session() as session:
                row = claims.held_row(session, table, 1, "far")
                assert row is not None
                claims.release(row)
        migrate.downgrade(db, "0017")
        assert not any(COLUMNS & _columns(db, table) for table in TABLES)
        with db.engine.connect() as connection:  # the rows themselves stay
            for table in TABLES:
                assert connection.execute(text(f"SELECT COUNT(*) FROM {table}")).scalar() == 1
    finally:
        db.dispose()
