"""The tables. Every resource row carries the account (and region) that owns it.

Columns hold what queries filter, sort or join on; the rest of a resource's
description lives in a JSON `spec` column shaped like the API's own members.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, ForeignKey, Index, Integer, MetaData, String, Text, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from dockyard.store.types import UTCDateTime

# Explicit constraint names keep Alembic migrations identical on SQLite and PostgreSQL.
NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)
    type_annotation_map = {datetime: UTCDateTime(), dict[str, Any]: JSON()}


class Account(Base):
    __tablename__ = "accounts"

    id: Mapped[str] = mapped_column(String(12), primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime]


class AccessKey(Base):
    __tablename__ = "access_keys"

    access_key_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    account_id: Mapped[str] = mapped_column(ForeignKey("accounts.id"), index=True)
    # Encrypted with the data dir's master key: SigV4 needs the secret itself to verify.
    secret_ciphertext: Mapped[str] = mapped_column(Text)
    # Optional IAM-style policy document (JSON text); None allows everything in the account.
    policy: Mapped[str | None] = mapped_column(Text, default=None)
    created_at: Mapped[datetime]


class ClockState(Base):
    """The manual clock's instant, so a restarted server does not travel back in time."""

    __tablename__ = "clock_state"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    now: Mapped[datetime]


class TrainingJob(Base):
    __tablename__ = "training_jobs"
    __table_args__ = (
        UniqueConstraint("account_id", "region", "name", name="uq_training_jobs_account_name"),
        Index("ix_training_jobs_account_created", "account_id", "region", "creation_time"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    account_id: Mapped[str] = mapped_column(ForeignKey("accounts.id"))
    region: Mapped[str] = mapped_column(String(32))
    name: Mapped[str] = mapped_column(String(63))
    arn: Mapped[str] = mapped_column(String(256))
    status: Mapped[str] = mapped_column(String(32))
    secondary_status: Mapped[str] = mapped_column(String(64))
    warm_pool_status: Mapped[str | None] = mapped_column(String(32), default=None)
    training_plan_arn: Mapped[str | None] = mapped_column(String(2048), default=None)
    creation_time: Mapped[datetime]
    last_modified_time: Mapped[datetime]
    training_end_time: Mapped[datetime | None] = mapped_column(default=None)
    # The job's request members (AlgorithmSpecification, ResourceConfig, ...) as the API has them.
    spec: Mapped[dict[str, Any]] = mapped_column(default=dict)
