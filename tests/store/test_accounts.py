"""Accounts, keys and scoped queries on both databases."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from dockyard.secretbox import SecretBox
from dockyard.services import accounts, training_jobs
from dockyard.services.errors import ConflictException, ResourceNotFound, ValidationException
from dockyard.store import migrate
from dockyard.store.db import Database
from tests.fixtures import BASE_TIME, insert_training_jobs

NOW = datetime(2026, 6, 1, tzinfo=UTC)


@pytest.fixture
def db(database_url: str):
    database = Database(database_url)
    migrate.upgrade(database)
    yield database
    database.dispose()


def test_accounts_and_keys_round_trip(db: Database, tmp_path: Path) -> None:
    box = SecretBox.for_data_dir(tmp_path)
    with db.session() as session:
        account = accounts.create_account(session, NOW, "team-a")
        assert len(account.id) == 12 and account.id.isdigit()
        creds = accounts.create_access_key(session, NOW, box, "team-a")
    with db.session() as session:
        record = accounts.lookup_key(session, box, creds.access_key_id)
        assert record is not None
        assert record.account_id == account.id
        assert record.secret_access_key == creds.secret_access_key
        assert accounts.lookup_key(session, box, "AKIAUNKNOWN") is None
        stored = accounts.list_access_keys(session, account.id)[0].secret_ciphertext
        assert creds.secret_access_key not in stored


def test_a_disabled_key_is_found_by_no_request_and_a_deleted_one_by_nothing(
    db: Database, tmp_path: Path
) -> None:
    box = SecretBox.for_data_dir(tmp_path)
    with db.session() as session:
        accounts.create_account(session, NOW, "keys")
        key_id = accounts.create_access_key(session, NOW, box, "keys").access_key_id
    with db.session() as session:
        before = accounts.set_key_status(session, key_id, accounts.KeyStatus.INACTIVE)
        assert before is accounts.KeyStatus.ACTIVE
    with db.read() as connection:
        assert accounts.lookup_key(connection, box, key_id) is None
        assert accounts.lookup_key(connection, box, key_id, active_only=False) is not None
    with db.session() as session:
        assert accounts.set_key_status(session, key_id, accounts.KeyStatus.ACTIVE) is (
            accounts.KeyStatus.INACTIVE
        )
    with db.read() as connection:
        assert accounts.lookup_key(connection, box, key_id) is not None
    with db.session() as session:
        accounts.delete_access_key(session, key_id)
    with db.read() as connection:
        assert accounts.lookup_key(connection, box, key_id, active_only=False) is None
    for change in (
        lambda s: accounts.set_key_status(s, key_id, accounts.KeyStatus.ACTIVE),
        lambda s: accounts.delete_access_key(s, key_id),
    ):
        with pytest.raises(ResourceNotFound), db.session() as session:
            change(session)


def test_the_revocation_file_changes_with_every_revocation(tmp_path: Path) -> None:
    seen = {accounts.revocations_seen(tmp_path)}
    for what in ("disabled", "deleted", "disabled"):
        accounts.announce_revocation(tmp_path, NOW, "AKIASAME", what)
        seen.add(accounts.revocations_seen(tmp_path))
    assert len(seen) == 4
    assert oct((tmp_path / accounts.REVOCATIONS_FILE).stat().st_mode & 0o777) == "0o600"


def test_account_rules(db: Database) -> None:
    with db.session() as session:
        accounts.create_account(session, NOW, "dup", account_id="111122223333")
    with pytest.raises(ConflictException), db.session() as session:
        accounts.create_account(session, NOW, "dup")
    with pytest.raises(ValidationException), db.session() as session:
        accounts.create_account(session, NOW, "other", account_id="12345")
    with pytest.raises(ResourceNotFound), db.session() as session:
        accounts.find_account(session, "nobody")


def test_queries_are_scoped_by_account_and_region(db: Database) -> None:
    with db.session() as session:
        a = accounts.create_account(session, NOW, "a").id
        b = accounts.create_account(session, NOW, "b").id
    insert_training_jobs(db.url, a, ["same", "only-a"])
    insert_training_jobs(db.url, b, ["same"])
    insert_training_jobs(db.url, a, ["west"], region="us-west-2")
    with db.read() as session:
        listed = training_jobs.list_training_jobs(session, a, "us-east-1", {})
        assert [s["TrainingJobName"] for s in listed["TrainingJobSummaries"]] == ["same", "only-a"]
        assert (
            b
            in training_jobs.describe_training_job(session, b, "us-east-1", "same")[
                "TrainingJobArn"
            ]
        )
        with pytest.raises(ResourceNotFound):
            training_jobs.describe_training_job(session, b, "us-east-1", "only-a")
        with pytest.raises(ResourceNotFound):
            training_jobs.describe_training_job(session, a, "us-east-1", "west")


def test_name_contains_is_literal_and_case_insensitive(db: Database) -> None:
    with db.session() as session:
        a = accounts.create_account(session, NOW, "names").id
    insert_training_jobs(db.url, a, ["Alpha-One", "beta-two", "gamma"])
    with db.read() as connection:

        def names(fragment: str) -> list[str]:
            listed = training_jobs.list_training_jobs(
                connection, a, "us-east-1", {"NameContains": fragment}
            )
            return [s["TrainingJobName"] for s in listed["TrainingJobSummaries"]]

        assert names("ALPHA") == ["Alpha-One"]
        assert names("-t") == ["beta-two"]
        # LIKE wildcards in the fragment are matched literally, never as wildcards.
        assert names("%") == [] and names("_") == [] and names("a%a") == []


def test_list_training_jobs_pages_before_it_filters_by_status_and_name(db: Database) -> None:
    # As SageMaker documents for StatusEquals (and does for NameContains): MaxResults jobs
    # are taken first, then filtered, so a filtered page may be empty with a NextToken.
    with db.session() as session:
        a = accounts.create_account(session, NOW, "pages").id
    insert_training_jobs(db.url, a, ["one", "two"], status="Completed")
    insert_training_jobs(
        db.url, a, ["three"], status="Failed", start=BASE_TIME + timedelta(hours=1)
    )
    with db.read() as connection:

        def walk(**params: object) -> list[list[str]]:
            pages, token = [], None
            while True:
                listed = training_jobs.list_training_jobs(
                    connection,
                    a,
                    "us-east-1",
                    {"MaxResults": 1, **params, **({"NextToken": token} if token else {})},
                )
                pages.append([s["TrainingJobName"] for s in listed["TrainingJobSummaries"]])
                token = listed.get("NextToken")
                if not token:
                    return pages

        assert walk(StatusEquals="Failed") == [[], [], ["three"]]
        assert walk(NameContains="TW") == [[], ["two"], []]
        assert walk(StatusEquals="Completed", NameContains="o") == [["one"], ["two"], []]
