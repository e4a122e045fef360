"""Warm pools in the database: keep, claim, chain, terminate (spec §5).

A pool's instances stay on the capacity calendar as a lease (kind "warm-pool") from
the end of a job to the pool's deadline; claiming the pool turns that lease into the
new job's training lease on the same instances, in the same transaction, behind the
capacity lock, so two jobs never take one pool. The agents themselves are told by the
reconcilers (control/), after these transactions commit.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from dockyard.config import PlanSettings
from dockyard.domain import billing
from dockyard.domain import warm_pools as rules
from dockyard.domain.job_runtime import Outcome
from dockyard.domain.placement import Placement
from dockyard.domain.quotas import QuotaKind
from dockyard.domain.warm_pools import JOB_VIEW_TRANSITIONS, POOL_TRANSITIONS, WarmPoolStatus
from dockyard.services import capacity, ledger, quotas
from dockyard.services.errors import ResourceNotFound, ValidationException
from dockyard.store.scoped import owned
from dockyard.store.tables import TrainingJob, WarmPool

LEASE_KIND = "warm-pool"


def holder(pool: WarmPool) -> str:
    return f"warm-pool/{pool.id}"


def _placement(pool: WarmPool) -> Placement:
    placement = Placement.of(pool.placement)
    if placement is None:
        raise ValueError(f"warm pool {pool.id} has no placement")
    return placement


def _keep_until(session: Session, pool: WarmPool, now: datetime, until: datetime) -> datetime:
    """Hold the pool's instances from now until `until` at the latest; answer the end.

    On-demand capacity: a `warm-pool` lease, ending early where capacity was sold for
    later. Plan capacity: no lease (the block holds it), and never past the block's
    working time (spec §3.4: a pool never outlives the block it sits in).
    """
    placement = _placement(pool)
    if placement.on_plan:
        return min(until, placement.work_ends or until)
    pool_key = placement.pool
    capacity.lock(session)
    capacity.release(session, holder(pool))
    calendar = capacity.load_calendar(session, now, pool_keys=[pool_key])
    until = calendar[pool_key].fits_until(now, until, pool.instance_count)
    if until > now:
        capacity.reserve(
            session,
            [(pool_key, pool.instance_count)],
            now,
            until,
            kind=LEASE_KIND,
            holder=holder(pool),
            account_id=pool.account_id,
            calendar=calendar,
        )
    return until


def _set_pool(pool: WarmPool, status: WarmPoolStatus) -> None:
    pool.status = POOL_TRANSITIONS.check(WarmPoolStatus(pool.status), status).value


def _set_view(job: TrainingJob, status: WarmPoolStatus) -> None:
    """A job's WarmPoolStatus; its first value may be any, later ones follow the table."""
    if job.warm_pool_status is not None:
        JOB_VIEW_TRANSITIONS.check(WarmPoolStatus(job.warm_pool_status), status)
    job.warm_pool_status = status.value


def _bill(
    session: Session, pool: WarmPool, job: TrainingJob, now: datetime, plans: PlanSettings
) -> None:
    """Close the job's retained period: its seconds on the job, its charge in the ledger
    (spec §6; none inside a plan's block, which the plan paid for: `domain.billing`)."""
    if pool.available_since is None:
        return
    bill = billing.retained_bill(
        on_plan=_placement(pool).on_plan,
        count=pool.instance_count,
        price_per_hour=billing.price(plans.prices, pool.instance_type),
        since=pool.available_since,
        until=now,
    )
    job.warm_pool_retained_seconds = bill.seconds
    if bill.amount is not None:
        ledger.record(
            session,
            account_id=pool.account_id,
            region=pool.region,
            kind=bill.charge,
            resource_arn=job.arn,
            amount=bill.amount,
            currency=plans.currency,
            description=(
                f"{pool.instance_count} x {bill.seconds} s of warm pool retained after {job.name}"
            ),
            now=now,
        )
    pool.available_since = None


# ---------------------------------------------------------------------------- claiming


def claim(
    session: Session, job: TrainingJob, now: datetime, plans: PlanSettings
) -> tuple[WarmPool, str] | None:
    """Give `job` an Available matching pool of its account, and the name of the job
    that left it; None if there is none (the job starts cold).

    Call with the capacity lock held. The pool's lease gives way to the job's training
    lease on the same instances for the job's whole MaxRuntime; a pool that cannot hold
    them that long (capacity sold for later) is left as it is.
    """
    key = rules.match_key(job.spec)
    runtime = timedelta(seconds=int(job.spec["StoppingCondition"]["MaxRuntimeInSeconds"]))
    candidates = session.scalars(
        owned(WarmPool, job.account_id, job.region)
        .where(
            WarmPool.status == WarmPoolStatus.AVAILABLE.value,
            WarmPool.match_key == key,
            WarmPool.deadline > now,
        )
        .order_by(WarmPool.available_since.desc(), WarmPool.id.desc())
    ).all()
    for pool in candidates:
        placement = _placement(pool)
        if placement.on_plan:
            # The job runs inside the same block's lease; only time matters.
            if placement.work_ends is not None and now >= placement.work_ends:
                continue
        else:
            pool_key = placement.pool
            capacity.release(session, holder(pool))
            calendar = capacity.load_calendar(session, now, pool_keys=[pool_key])
            if not calendar[pool_key].fits(now, now + runtime, pool.instance_count):
                _keep_until(session, pool, now, pool.deadline or now)
                continue
            capacity.reserve(
                session,
                [(pool_key, pool.instance_count)],
                now,
                now + runtime,
                kind="training-job",
                holder=job.arn,
                account_id=job.account_id,
                calendar=calendar,
            )
        # The capacity lock serialises every claimer, so the pool read above is still
        # Available here: one job takes it.
        previous_id = pool.job_id
        _set_pool(pool, WarmPoolStatus.IN_USE)
        pool.job_id = job.id
        previous = session.get(TrainingJob, previous_id)
        if previous is not None:
            _bill(session, pool, previous, now, plans)
            _set_view(previous, WarmPoolStatus.REUSED)
            previous.warm_pool_reused_by = job.name
        pool.available_since = None
        pool.deadline = None
        job.warm_pool_id = pool.id
        _set_view(job, WarmPoolStatus.IN_USE)
        return pool, previous.name if previous is not None else "an earlier job"
    return None


# ---------------------------------------------------------------------------- keeping


def settle(
    session: Session,
    job: TrainingJob,
    now: datetime,
    *,
    outcome: Outcome,
    failure_reason: str | None,
    launched: bool,
    plans: PlanSettings,
) -> WarmPool | None:
    """After `job` ended (its training lease released): keep its instances, or not.

    Answers the job's pool, if it has one (kept or just terminated); a job that asked
    for no keep-alive and ran on no pool has none.
    """
    keep = rules.keep_alive_seconds(job.spec)
    pool = session.get(WarmPool, job.warm_pool_id) if job.warm_pool_id else None
    if pool is None and keep == 0:
        return None
    resources = job.spec["ResourceConfig"]
    runtime = job.runtime
    placement = runtime.placement
    if pool is None:
        if placement is None:
            return None  # never placed: there are no instances to keep
        pool = WarmPool(
            account_id=job.account_id,
            region=job.region,
            status=WarmPoolStatus.IN_USE.value,
            instance_type=resources["InstanceType"],
            instance_count=int(resources["InstanceCount"]),
            match_key=rules.match_key(job.spec),
            job_id=job.id,
            home=runtime.home or "",
            placement=placement.json(),
            born_at=runtime.placed_at or now,
        )
        session.add(pool)
        session.flush()
        job.warm_pool_id = pool.id
        job.warm_pool_status = WarmPoolStatus.IN_USE.value
    refused = _refusal(session, job, pool, now, outcome, failure_reason, launched, plans)
    if refused is not None:
        terminate(session, pool, now, refused, plans)
        return pool
    # Control-plane time throughout: the agents' clocks are not the (maybe manual) clock.
    until = _keep_until(session, pool, now, rules.deadline(now, keep, pool.born_at))
    if until <= now:
        terminate(session, pool, now, rules.NO_CAPACITY, plans)
        return pool
    _set_pool(pool, WarmPoolStatus.AVAILABLE)
    pool.job_id = job.id
    pool.available_since = now
    pool.deadline = until
    _set_view(job, WarmPoolStatus.AVAILABLE)
    return pool


def _refusal(
    session: Session,
    job: TrainingJob,
    pool: WarmPool,
    now: datetime,
    outcome: Outcome,
    failure_reason: str | None,
    launched: bool,
    plans: PlanSettings,
) -> str | None:
    keep = rules.keep_alive_seconds(job.spec)
    if keep == 0:
        return rules.NOT_KEPT_ALIVE
    why = rules.may_retain(outcome, failure_reason, launched)
    if why is not None:
        return why
    if pool.born_at + rules.MAX_LIFETIME <= now:
        return rules.LIFETIME
    limit = quotas.limit(
        session, plans, job.account_id, job.region, QuotaKind.WARM_POOL, pool.instance_type
    )
    others = session.scalar(
        select(func.coalesce(func.sum(WarmPool.instance_count), 0)).where(
            WarmPool.account_id == job.account_id,
            WarmPool.region == job.region,
            WarmPool.instance_type == pool.instance_type,
            WarmPool.status.in_([WarmPoolStatus.AVAILABLE.value, WarmPoolStatus.IN_USE.value]),
            WarmPool.id != pool.id,
        )
    )
    if int(others or 0) + pool.instance_count > limit:
        return rules.QUOTA
    return None


# ---------------------------------------------------------------------------- ending


def terminate(
    session: Session, pool: WarmPool, now: datetime, reason: str, plans: PlanSettings
) -> None:
    """End a pool: its lease goes, its job's view says Terminated, its time is billed."""
    if WarmPoolStatus(pool.status) is WarmPoolStatus.TERMINATED:
        return
    job = session.get(TrainingJob, pool.job_id)
    if job is not None:
        _bill(session, pool, job, now, plans)
        _set_view(job, WarmPoolStatus.TERMINATED)
    capacity.release(session, holder(pool))
    _set_pool(pool, WarmPoolStatus.TERMINATED)
    pool.terminated_at = now
    pool.termination_reason = reason[:256]
    pool.deadline = None


def terminate_on(
    session: Session,
    pool_keys: set[str],
    now: datetime,
    reason: str,
    plans: PlanSettings,
    instance_ids: set[str] | frozenset[str] = frozenset(),
) -> list[int]:
    """Terminate the Available warm pools on these capacity pools, or on these very
    instances (an UltraServer's pools hold theirs by id) - their instances are being
    taken out of service (spec §5.10); answer their ids."""
    capacity.lock(session)  # before the pools are read: claimers take them under it
    ended = [
        pool
        for pool in session.scalars(
            select(WarmPool).where(WarmPool.status == WarmPoolStatus.AVAILABLE.value)
        )
        if (placement := _placement(pool)).pool in pool_keys
        or instance_ids.intersection(placement.instances)
    ]
    for pool in ended:
        terminate(session, pool, now, reason, plans)
    return [pool.id for pool in ended]


def expire(session: Session, pool: WarmPool, now: datetime, plans: PlanSettings) -> bool:
    """Terminate the pool if it is Available and its time is up; whether it was.

    Call with the capacity lock held (its lease goes, and a claimer may be taking the
    pool): a server doing the same waits, then sees the pool terminated, so a pool's
    retained time is billed once."""
    if pool.status != WarmPoolStatus.AVAILABLE.value or pool.deadline is None:
        return False
    if pool.deadline > now:
        return False
    lifetime_over = pool.born_at + rules.MAX_LIFETIME <= now
    terminate(session, pool, now, rules.LIFETIME if lifetime_over else rules.EXPIRED, plans)
    return True


def update_keep_alive(
    session: Session,
    now: datetime,
    account_id: str,
    region: str,
    name: str,
    seconds: int,
    plans: PlanSettings,
) -> TrainingJob:
    """UpdateTrainingJob's ResourceConfig.KeepAlivePeriodInSeconds (spec §5.6)."""
    capacity.lock(session)  # the pool is read as claimers and the reconciler leave it
    job = session.scalar(
        owned(TrainingJob, account_id, region).where(TrainingJob.name == name).with_for_update()
    )
    if job is None:
        raise ResourceNotFound(
            f"Requested resource not found: training job {name!r} does not exist"
        )
    if not 0 <= seconds <= rules.MAX_KEEP_ALIVE_SECONDS:
        raise ValidationException(
            f"ResourceConfig.KeepAlivePeriodInSeconds must be between 0 and "
            f"{rules.MAX_KEEP_ALIVE_SECONDS} seconds; got {seconds}"
        )
    pool = session.get(WarmPool, job.warm_pool_id) if job.warm_pool_id else None
    if (
        pool is None
        or job.warm_pool_status != WarmPoolStatus.AVAILABLE.value
        or pool.job_id != job.id
    ):
        shown = job.warm_pool_status or "none"
        raise ValidationException(
            f"The warm pool of training job {name} is not Available (its warm pool status is "
            f"{shown}); KeepAlivePeriodInSeconds can be updated only while the job's warm "
            "pool is Available"
        )
    spec = dict(job.spec)
    spec["ResourceConfig"] = {**spec["ResourceConfig"], "KeepAlivePeriodInSeconds": seconds}
    job.spec = spec
    job.last_modified_time = now
    if seconds == 0:
        terminate(session, pool, now, rules.RELEASED, plans)
        return job
    # The new period counts from when the job ended (its pool became Available).
    until = rules.deadline(pool.available_since or now, seconds, pool.born_at)
    until = _keep_until(session, pool, now, until)
    if until <= now:
        terminate(session, pool, now, rules.EXPIRED, plans)
        return job
    pool.deadline = until
    return job


def job_view(
    pool_since: datetime | None,
    status: str | None,
    reused_by: str | None,
    retained: int | None,
    now: datetime,
) -> dict[str, Any] | None:
    """DescribeTrainingJob's WarmPoolStatus: retained time counts live while Available."""
    if status is None:
        return None
    seconds = retained
    if status == WarmPoolStatus.AVAILABLE.value and pool_since is not None:
        seconds = billing.retained_seconds(pool_since, now)
    view: dict[str, Any] = {"Status": status}
    if seconds is not None:
        view["ResourceRetainedBillableTimeInSeconds"] = seconds
    if reused_by:
        view["ReusedByJob"] = reused_by
    return view


def available_until(
    session: Session, account_id: str, region: str, job_names: list[str]
) -> dict[str, datetime]:
    """When each named job's Available warm pool ends (its deadline, which a plan's
    block or the 28-day cap may have brought forward): what the console counts down."""
    if not job_names:
        return {}
    rows = session.execute(
        select(TrainingJob.name, WarmPool.deadline)
        .join(TrainingJob, TrainingJob.id == WarmPool.job_id)
        .where(
            WarmPool.account_id == account_id,
            WarmPool.region == region,
            WarmPool.status == WarmPoolStatus.AVAILABLE.value,
            WarmPool.deadline.is_not(None),
            TrainingJob.name.in_(job_names),
        )
    )
    return {name: deadline for name, deadline in rows if deadline is not None}
