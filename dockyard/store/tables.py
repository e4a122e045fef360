"""The tables. Every resource row carries the account (and region) that owns it.

Columns hold what queries filter, sort or join on; the rest of a resource's
description lives in a JSON `spec` column shaped like the API's own members.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
    false,
)
from sqlalchemy.engine.default import DefaultExecutionContext
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from dockyard.domain.job_runtime import PHASE_TRANSITIONS, JobPhase, JobRuntime
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
    # IAM's words: "Active", or "Inactive" (`dockyard keys disable`): refused everywhere
    # until enabled again (services.accounts.KeyStatus).
    status: Mapped[str] = mapped_column(String(16), default="Active", server_default="Active")


class Bucket(Base):
    """An S3 bucket of the embedded S3 service, and the account that made it. Names are
    global, as in S3: one account's bucket is refused to every other."""

    __tablename__ = "buckets"

    name: Mapped[str] = mapped_column(String(63), primary_key=True)
    account_id: Mapped[str] = mapped_column(ForeignKey("accounts.id"), index=True)
    created_at: Mapped[datetime]


class ClockState(Base):
    """The manual clock's instant, so a restarted server does not travel back in time."""

    __tablename__ = "clock_state"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    now: Mapped[datetime]


class Claimed:
    """The claim a reconciler holds on a row for the length of one step (`store.claims`):
    servers sharing the database never act on one row at the same time. Jobs, clusters,
    warm pools and training plans carry it."""

    claim_owner: Mapped[str | None] = mapped_column(String(160), default=None)
    claim_token: Mapped[str | None] = mapped_column(String(32), default=None)
    claim_expires_at: Mapped[datetime | None] = mapped_column(default=None)


def _resource(member: str) -> Any:
    """A column's value from the job's own ResourceConfig, so no writer can forget it."""

    def default(context: DefaultExecutionContext) -> Any:
        return context.get_current_parameters()["spec"]["ResourceConfig"][member]

    return default


class TrainingJob(Claimed, Base):
    __tablename__ = "training_jobs"
    __table_args__ = (
        UniqueConstraint("account_id", "region", "name", name="uq_training_jobs_account_name"),
        Index("ix_training_jobs_account_created", "account_id", "region", "creation_time"),
        # The quota check sums the instances an account's running jobs hold per type
        # from here alone (the count is in the index), rather than loading every
        # running job (spec §5.7; issue 13).
        Index(
            "ix_training_jobs_quota",
            "account_id",
            "region",
            "instance_type",
            "status",
            "instance_count",
        ),
        # The ARN lower-cases the name: names that differ only in case are one job, or two
        # jobs would share an ARN (and the capacity leases held under it).
        Index("ix_training_jobs_arn", "arn", unique=True),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    account_id: Mapped[str] = mapped_column(ForeignKey("accounts.id"))
    region: Mapped[str] = mapped_column(String(32))
    name: Mapped[str] = mapped_column(String(63))
    arn: Mapped[str] = mapped_column(String(256))
    # Names this job's files on a backend (instance directories, logs): a job created
    # again under a deleted one's name starts from nothing of the old one's.
    uid: Mapped[str | None] = mapped_column(String(32), default=None)
    status: Mapped[str] = mapped_column(String(32))
    secondary_status: Mapped[str] = mapped_column(String(64))
    # ResourceConfig's InstanceType and InstanceCount, which never change after create.
    instance_type: Mapped[str] = mapped_column(String(64), default=_resource("InstanceType"))
    instance_count: Mapped[int] = mapped_column(Integer, default=_resource("InstanceCount"))
    # A job waiting for on-demand capacity: what the capacity of its type looked like
    # when it last failed to place (`capacity.WaitStamp`). A pass skips it while that
    # still holds: nothing it waits for has changed (issue 13).
    waiting_for: Mapped[str | None] = mapped_column(String(200), default=None)
    warm_pool_status: Mapped[str | None] = mapped_column(String(32), default=None)
    training_plan_arn: Mapped[str | None] = mapped_column(String(2048), default=None)
    creation_time: Mapped[datetime]
    last_modified_time: Mapped[datetime]
    training_end_time: Mapped[datetime | None] = mapped_column(default=None)
    # The job's request members (AlgorithmSpecification, ResourceConfig, ...) as the API has them.
    spec: Mapped[dict[str, Any]] = mapped_column(default=dict)
    training_start_time: Mapped[datetime | None] = mapped_column(default=None)
    failure_reason: Mapped[str | None] = mapped_column(Text, default=None)
    # SecondaryStatusTransitions, oldest first, as the API shows them.
    transitions: Mapped[dict[str, Any]] = mapped_column(default=dict)
    # Where the jobs reconciler has the job (`JobPhase`), and the rest of what it keeps
    # of the running job (placement, home, tries, specs): read and written only as one
    # typed `JobRuntime`, through the `runtime` property below.
    phase: Mapped[str] = mapped_column(
        String(16), default=JobPhase.QUEUED.value, server_default=JobPhase.QUEUED.value
    )
    runtime_json: Mapped[dict[str, Any]] = mapped_column("runtime", default=dict)
    stop_requested: Mapped[bool] = mapped_column(default=False)
    billable_seconds: Mapped[int | None] = mapped_column(Integer, default=None)
    # FinalMetricDataList, {"items": [...]} (Timestamp in ISO 8601), merged from the
    # instances' scraped values when the job ended: a Describe reads no files.
    final_metrics: Mapped[dict[str, Any] | None] = mapped_column(default=None)
    # The warm pool this job ran on or left behind (spec §5); the job's own view of it.
    warm_pool_id: Mapped[int | None] = mapped_column(Integer, default=None, index=True)
    warm_pool_reused_by: Mapped[str | None] = mapped_column(String(63), default=None)
    # Seconds the pool was retained for this job, once that period is over.
    warm_pool_retained_seconds: Mapped[int | None] = mapped_column(Integer, default=None)

    @property
    def runtime(self) -> JobRuntime:
        return JobRuntime.of(self.phase, self.runtime_json)

    @runtime.setter
    def runtime(self, value: JobRuntime) -> None:
        """Store a new runtime; its phase must follow the job's through the table."""
        PHASE_TRANSITIONS.check(JobPhase(self.phase or JobPhase.QUEUED), value.phase)
        if self.phase != value.phase.value:
            self.phase = value.phase.value
        data = value.json()
        if data != self.runtime_json:  # a step that changed nothing writes nothing
            self.runtime_json = data


class Instance(Base):
    """One instance of the fleet, as declared in the config (synchronised on start)."""

    __tablename__ = "instances"

    id: Mapped[str] = mapped_column(String(160), primary_key=True)
    instance_type: Mapped[str] = mapped_column(String(64))
    availability_zone: Mapped[str] = mapped_column(String(32))
    region: Mapped[str] = mapped_column(String(32))
    ultraserver_id: Mapped[str | None] = mapped_column(String(160), default=None)
    ultraserver_type: Mapped[str | None] = mapped_column(String(64), default=None)
    pool_key: Mapped[str] = mapped_column(String(200), index=True)
    health: Mapped[str] = mapped_column(String(32), default="Healthy")
    created_at: Mapped[datetime]


class CapacityPool(Base):
    """A calendar's header: capacity (healthy instances) and a version bumped on every change."""

    __tablename__ = "capacity_pools"

    key: Mapped[str] = mapped_column(String(200), primary_key=True)
    instance_type: Mapped[str] = mapped_column(String(64))
    availability_zone: Mapped[str] = mapped_column(String(32))
    region: Mapped[str] = mapped_column(String(32), index=True)
    ultraserver_id: Mapped[str | None] = mapped_column(String(160), default=None)
    ultraserver_type: Mapped[str | None] = mapped_column(String(64), default=None)
    capacity: Mapped[int] = mapped_column(Integer)
    version: Mapped[int] = mapped_column(Integer, default=0)


class CapacityLock(Base):
    """One row; every transaction that books capacity updates it first, so bookings serialise."""

    __tablename__ = "capacity_lock"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    generation: Mapped[int] = mapped_column(Integer, default=0)


class LeaseRow(Base):
    """An interval x count on one pool's calendar, held by a block, a job or a warm pool."""

    __tablename__ = "leases"
    __table_args__ = (Index("ix_leases_pool_end", "pool_key", "end_time"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    pool_key: Mapped[str] = mapped_column(ForeignKey("capacity_pools.key"))
    start_time: Mapped[datetime]
    end_time: Mapped[datetime]
    count: Mapped[int] = mapped_column(Integer)
    kind: Mapped[str] = mapped_column(String(32))
    holder: Mapped[str] = mapped_column(String(200), index=True)
    account_id: Mapped[str | None] = mapped_column(String(12), default=None)


class TrainingPlanOffering(Base):
    __tablename__ = "training_plan_offerings"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    account_id: Mapped[str] = mapped_column(ForeignKey("accounts.id"))
    region: Mapped[str] = mapped_column(String(32))
    created_at: Mapped[datetime]
    expires_at: Mapped[datetime]
    target: Mapped[str] = mapped_column(String(32))
    request: Mapped[dict[str, Any]] = mapped_column(default=dict)
    # The blocks as the API shows them, plus the pool leases each one needs.
    blocks: Mapped[dict[str, Any]] = mapped_column(default=dict)
    upfront_fee: Mapped[str] = mapped_column(String(32))
    currency: Mapped[str] = mapped_column(String(8))
    purchased_by: Mapped[str | None] = mapped_column(String(2048), default=None)


class TrainingPlan(Claimed, Base):
    __tablename__ = "training_plans"
    __table_args__ = (
        UniqueConstraint("account_id", "region", "name", name="uq_training_plans_account_name"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    account_id: Mapped[str] = mapped_column(ForeignKey("accounts.id"))
    region: Mapped[str] = mapped_column(String(32))
    name: Mapped[str] = mapped_column(String(64))
    arn: Mapped[str] = mapped_column(String(256))
    status: Mapped[str] = mapped_column(String(16), index=True)
    status_message: Mapped[str | None] = mapped_column(String(1024), default=None)
    offering_id: Mapped[str] = mapped_column(String(64))
    target: Mapped[str] = mapped_column(String(32))
    instance_type: Mapped[str] = mapped_column(String(64))
    instance_count: Mapped[int] = mapped_column(Integer)
    ultraserver_type: Mapped[str | None] = mapped_column(String(64), default=None)
    ultraserver_count: Mapped[int | None] = mapped_column(Integer, default=None)
    spare_per_ultraserver: Mapped[int] = mapped_column(Integer, default=0)
    upfront_fee: Mapped[str] = mapped_column(String(32))
    currency: Mapped[str] = mapped_column(String(8))
    start_time: Mapped[datetime]
    end_time: Mapped[datetime]
    tags: Mapped[dict[str, Any]] = mapped_column(default=dict)
    created_at: Mapped[datetime]
    last_modified_time: Mapped[datetime]


class ReservedCapacity(Base):
    """One block of a plan."""

    __tablename__ = "reserved_capacities"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    plan_id: Mapped[int] = mapped_column(ForeignKey("training_plans.id"), index=True)
    account_id: Mapped[str] = mapped_column(ForeignKey("accounts.id"))
    region: Mapped[str] = mapped_column(String(32))
    arn: Mapped[str] = mapped_column(String(256), index=True)
    ordinal: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(16))
    instance_type: Mapped[str] = mapped_column(String(64))
    instance_count: Mapped[int] = mapped_column(Integer)
    availability_zone: Mapped[str] = mapped_column(String(32))
    ultraserver_type: Mapped[str | None] = mapped_column(String(64), default=None)
    ultraserver_count: Mapped[int | None] = mapped_column(Integer, default=None)
    # (pool key, count) pairs the block leases; for UltraServers, one per UltraServer.
    pools: Mapped[dict[str, Any]] = mapped_column(default=dict)
    start_time: Mapped[datetime]
    end_time: Mapped[datetime]


class LedgerEntry(Base):
    """Money: every upfront fee and billed second, per account (amounts as exact decimals)."""

    __tablename__ = "ledger_entries"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    account_id: Mapped[str] = mapped_column(ForeignKey("accounts.id"), index=True)
    region: Mapped[str] = mapped_column(String(32))
    kind: Mapped[str] = mapped_column(String(32))
    resource_arn: Mapped[str] = mapped_column(String(2048))
    amount: Mapped[str] = mapped_column(String(32))
    currency: Mapped[str] = mapped_column(String(8))
    description: Mapped[str] = mapped_column(String(512))
    created_at: Mapped[datetime]


class WarmPool(Claimed, Base):
    """A finished job's instances kept for the next matching job (spec §5).

    One row per cluster of instances, from the first retention to termination; it passes
    from job to job (`job_id` is the job it belongs to now).
    """

    __tablename__ = "warm_pools"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    account_id: Mapped[str] = mapped_column(ForeignKey("accounts.id"), index=True)
    region: Mapped[str] = mapped_column(String(32))
    status: Mapped[str] = mapped_column(String(16), index=True)
    instance_type: Mapped[str] = mapped_column(String(64))
    instance_count: Mapped[int] = mapped_column(Integer)
    # The matching fields of §5.3, canonicalised and hashed: equal keys, matching jobs.
    match_key: Mapped[str] = mapped_column(String(64), index=True)
    job_id: Mapped[int] = mapped_column(Integer)
    # The backend's name for the instances (the first job's instance key) and where they are.
    home: Mapped[str] = mapped_column(String(256))
    placement: Mapped[dict[str, Any]] = mapped_column(default=dict)
    # A terminated pool whose instances are gone (the backend released them): the
    # pools reconciler asks no more.
    released: Mapped[bool] = mapped_column(default=False, server_default=false())
    # When the instances were first launched: the 28-day cap counts from here.
    born_at: Mapped[datetime]
    available_since: Mapped[datetime | None] = mapped_column(default=None)
    deadline: Mapped[datetime | None] = mapped_column(default=None)
    terminated_at: Mapped[datetime | None] = mapped_column(default=None)
    termination_reason: Mapped[str | None] = mapped_column(String(256), default=None)


class ServiceQuotaValue(Base):
    """An account's applied value of one quota, where it differs from the default."""

    __tablename__ = "service_quotas"
    __table_args__ = (
        UniqueConstraint("account_id", "region", "quota_code", name="uq_service_quotas_quota"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    account_id: Mapped[str] = mapped_column(ForeignKey("accounts.id"), index=True)
    region: Mapped[str] = mapped_column(String(32))
    quota_code: Mapped[str] = mapped_column(String(32))
    value: Mapped[float]
    updated_at: Mapped[datetime]


class QuotaRequest(Base):
    """A RequestServiceQuotaIncrease, until an operator approves or denies it."""

    __tablename__ = "quota_requests"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    account_id: Mapped[str] = mapped_column(ForeignKey("accounts.id"), index=True)
    region: Mapped[str] = mapped_column(String(32))
    service_code: Mapped[str] = mapped_column(String(64))
    quota_code: Mapped[str] = mapped_column(String(32))
    quota_name: Mapped[str] = mapped_column(String(256))
    desired_value: Mapped[float]
    status: Mapped[str] = mapped_column(String(32), index=True)
    case_id: Mapped[str | None] = mapped_column(String(64), default=None)
    requester: Mapped[str | None] = mapped_column(String(256), default=None)
    created_at: Mapped[datetime]
    last_updated: Mapped[datetime]


class Cluster(Claimed, Base):
    """A HyperPod cluster (spec §3.5): its request as the API has it, and its status."""

    __tablename__ = "clusters"
    __table_args__ = (
        UniqueConstraint("account_id", "region", "name", name="uq_clusters_account_name"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    account_id: Mapped[str] = mapped_column(ForeignKey("accounts.id"))
    region: Mapped[str] = mapped_column(String(32))
    name: Mapped[str] = mapped_column(String(63))
    # The id in its ARN (12 lower-case letters and digits, as SageMaker's).
    cluster_id: Mapped[str] = mapped_column(String(12), unique=True)
    arn: Mapped[str] = mapped_column(String(256), index=True)
    status: Mapped[str] = mapped_column(String(16), index=True)
    failure_message: Mapped[str | None] = mapped_column(String(1024), default=None)
    # InstanceGroups, NodeRecovery, Orchestrator, VpcConfig, as the request had them
    # (UpdateCluster replaces the groups).
    spec: Mapped[dict[str, Any]] = mapped_column(default=dict)
    tags: Mapped[dict[str, Any]] = mapped_column(default=dict)
    created_at: Mapped[datetime]
    last_modified_time: Mapped[datetime]


class ClusterNode(Base):
    """One node of a cluster's instance group: a long-lived instance on the backend."""

    __tablename__ = "cluster_nodes"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    cluster_id: Mapped[int] = mapped_column(ForeignKey("clusters.id"), index=True)
    account_id: Mapped[str] = mapped_column(ForeignKey("accounts.id"))
    region: Mapped[str] = mapped_column(String(32))
    instance_group: Mapped[str] = mapped_column(String(63))
    # "i-" and 17 hex digits, as EC2's; the backend knows the node by it too.
    instance_id: Mapped[str] = mapped_column(String(32), unique=True)
    instance_type: Mapped[str] = mapped_column(String(64))
    status: Mapped[str] = mapped_column(String(16))
    message: Mapped[str | None] = mapped_column(String(1024), default=None)
    availability_zone: Mapped[str] = mapped_column(String(32))
    pool_key: Mapped[str] = mapped_column(String(200))
    # The plan block the node runs on (its lease holds the instance), or None on demand.
    block_id: Mapped[str | None] = mapped_column(String(64), default=None, index=True)
    # On an UltraServer, the fleet instance the node runs on (nodes are placed on
    # instances there: spares and failures are per instance), and its UltraServer.
    fleet_instance_id: Mapped[str | None] = mapped_column(String(160), default=None)
    ultraserver_id: Mapped[str | None] = mapped_column(String(160), default=None)
    # The node's own access key (its account's, S3 only), for its S3 requests; deleted
    # with the node.
    access_key_id: Mapped[str | None] = mapped_column(String(32), default=None)
    launch_time: Mapped[datetime]
    # Set when the node is to go (deleted, its block's cutoff, its cluster deleted).
    shutdown_requested: Mapped[bool] = mapped_column(default=False)


class InstancePurge(Base):
    """A deleted job's instances, whose files are to go (DeleteTrainingJob records it,
    the purges reconciler removes them once no agent of theirs runs)."""

    __tablename__ = "instance_purges"

    job_key: Mapped[str] = mapped_column(String(255), primary_key=True)
    requested_at: Mapped[datetime]


class ConsoleSession(Base):
    """A console sign-in that has not ended: its cookie works while this row exists and
    has not expired. Signing out removes it, and so does disabling or deleting the key
    it signed in with, so a copied cookie ends with it, on every server, across
    restarts (web.session)."""

    __tablename__ = "console_sessions"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    # The access key id it signed in with, or "operator".
    principal: Mapped[str] = mapped_column(String(32), index=True)
    created_at: Mapped[datetime]
    expires_at: Mapped[datetime] = mapped_column(index=True)


class Repository(Base):
    """An ECR repository of the embedded registry (issue 27): per account and region, as
    ECR's are. Its URI is not stored: it is the registry's address (a setting, which may
    change) plus the account and name (services.repositories.repository_uri)."""

    __tablename__ = "repositories"
    __table_args__ = (
        UniqueConstraint("account_id", "region", "name", name="uq_repositories_account_name"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    account_id: Mapped[str] = mapped_column(ForeignKey("accounts.id"))
    region: Mapped[str] = mapped_column(String(32))
    # ECR's RepositoryName: up to 256 characters, lower case, `/` allowed.
    name: Mapped[str] = mapped_column(String(256))
    arn: Mapped[str] = mapped_column(String(512), index=True)
    image_tag_mutability: Mapped[str] = mapped_column(String(32))
    scan_on_push: Mapped[bool] = mapped_column(default=False)
    # encryptionConfiguration and imageTagMutabilityExclusionFilters, as the request had
    # them (or ECR's defaults): described back, not acted on.
    spec: Mapped[dict[str, Any]] = mapped_column(default=dict)
    tags: Mapped[dict[str, Any]] = mapped_column(default=dict)
    created_at: Mapped[datetime]
