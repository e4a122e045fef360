"""A job is stepped by one server at a time (issue 13): claims, their expiry and their
owners' deaths."""

from __future__ import annotations

import os
import subprocess
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

from sqlalchemy import select, update

from dockyard.clock import wall_now
from dockyard.services import accounts
from dockyard.store import claims, migrate
from dockyard.store.db import Database
from dockyard.store.tables import TrainingJob
from tests.fixtures import BASE_TIME, insert_training_jobs


def _job(database_url: str) -> tuple[Database, int]:
    db = Database(database_url)
    migrate.upgrade(db)
    with db.session() as session:
        account = accounts.create_account(session, BASE_TIME, "claims").id
    insert_training_jobs(database_url, account, ["claimed"], status="InProgress")
    with db.read_session() as session:
        return db, int(session.scalars(select(TrainingJob.id)).one())


def _other_server(claimant: claims.Claimant, pid: str, start: str) -> claims.Claimant:
    host, boot, _, _ = claimant.owner.split("/")
    return replace(claimant, owner=f"{host}/{boot}/{pid}/{start}")


def test_a_claimed_job_is_refused_to_another_server_until_given_up(
    database_url: str, tmp_path: Path
) -> None:
    db, job_id = _job(database_url)
    try:
        here = claims.Claimant()
        # Another server on this host that is running: this test's parent process.
        parent = str(os.getppid())
        start = claims._start_ticks(int(parent))
        assert start is not None
        there = _other_server(here, parent, start)
        with db.session() as session:
            assert claims.claim_job(session, job_id, here, "t1") is not None
        with db.session() as session:
            assert claims.claim_job(session, job_id, there, "t2") is None
        with db.session() as session:  # the holder itself may claim again (a new step)
            assert claims.claim_job(session, job_id, here, "t3") is not None
        with db.session() as session:
            assert claims.held(session, job_id, "t1") is None  # that step's claim is gone
            job = claims.held(session, job_id, "t3")
            assert job is not None
            claims.release(job)
        with db.session() as session:
            assert claims.claim_job(session, job_id, there, "t4") is not None
    finally:
        db.dispose()


def test_an_expired_claim_or_one_of_a_dead_server_is_taken_over(
    database_url: str, tmp_path: Path
) -> None:
    db, job_id = _job(database_url)
    try:
        here = claims.Claimant()
        # A server on another host: only its claim's expiry frees the job.
        far = replace(here, owner="elsewhere/boot/1/1")
        with db.session() as session:
            assert claims.claim_job(session, job_id, far, "far") is not None
        with db.session() as session:
            assert claims.claim_job(session, job_id, here, "mine") is None
        with db.session() as session:
            session.execute(
                update(TrainingJob).values(claim_expires_at=wall_now() - timedelta(seconds=1))
            )
        with db.session() as session:
            assert claims.claim_job(session, job_id, here, "mine") is not None
        with db.session() as session:
            assert claims.held(session, job_id, "far") is None  # the old step applies nothing

        # A server on this host that is gone (killed mid-step): taken over at once.
        dead = subprocess.Popen(["true"])
        dead.wait()
        gone = _other_server(here, str(dead.pid), "1")
        with db.session() as session:
            job = claims.held(session, job_id, "mine")
            assert job is not None
            job.claim_owner = gone.owner
        with db.session() as session:
            assert claims.claim_job(session, job_id, here, "again") is not None
    finally:
        db.dispose()
