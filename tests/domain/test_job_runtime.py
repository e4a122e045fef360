"""A job's runtime: its phases move only through the table, and it is stored losslessly."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dockyard.domain.job_runtime import (
    PHASE_TRANSITIONS,
    JobEnd,
    JobPhase,
    JobRuntime,
    Outcome,
    StopReason,
)
from dockyard.domain.placement import Placement
from dockyard.domain.transitions import IllegalTransition

NOW = datetime(2026, 12, 1, 9, tzinfo=UTC)
ON_DEMAND = Placement("ml.m5.xlarge/us-east-1a", "us-east-1a")
ON_PLAN = Placement("pool", "us-east-1b", block="rc-1", work_ends=NOW, instances=("i-1", "i-2"))


def test_an_on_demand_job_goes_queued_placed_running_ended() -> None:
    runtime = JobRuntime()
    assert runtime.phase is JobPhase.QUEUED and runtime.placement is None
    runtime = runtime.placed(ON_DEMAND, home="key", placed_at=NOW)
    assert (runtime.phase, runtime.home, runtime.placed_at) == (JobPhase.PLACED, "key", NOW)
    runtime = runtime.with_specs([{"host": "algo-1"}]).running()
    assert runtime.phase is JobPhase.RUNNING and runtime.specs == [{"host": "algo-1"}]
    assert runtime.running() is runtime  # already followed: nothing moves
    ended = runtime.ended()
    assert ended.phase is JobPhase.ENDED and ended.placement == ON_DEMAND


def test_an_interrupted_plan_job_waits_again_for_its_next_try() -> None:
    runtime = JobRuntime().placed(ON_PLAN, home="key", placed_at=NOW).running()
    runtime = runtime.interrupting("the block ends")
    assert (runtime.phase, runtime.interruption) == (JobPhase.INTERRUPTING, "the block ends")
    again = runtime.requeued(used_seconds=42.5)
    # Fresh instances next time: nothing of the placement is kept, the time run is.
    assert again == JobRuntime(attempt=2, used_seconds=42.5)
    later = datetime(2026, 12, 2, tzinfo=UTC)
    assert again.placed(ON_PLAN, home="key", placed_at=later).placed_at == later


def test_a_stop_ends_an_interrupting_job_for_good() -> None:
    runtime = JobRuntime().placed(ON_PLAN, home="key").interrupting("lost")
    ending = runtime.ending()
    assert (ending.phase, ending.interruption) == (JobPhase.ENDING, None)
    assert ending.ended().phase is JobPhase.ENDED


def test_a_queued_job_cannot_skip_being_placed() -> None:
    queued = JobRuntime()
    assert queued.running() is queued  # nothing placed: nothing to follow yet
    for move in (
        lambda: queued.interrupting("x"),
        lambda: queued.ending(),
        lambda: queued.requeued(1.0),
    ):
        with pytest.raises(IllegalTransition):
            move()
    with pytest.raises(ValueError):
        queued.with_specs([])


def test_nothing_moves_an_ended_job() -> None:
    ended = JobRuntime().ended()
    for move in (
        lambda: ended.placed(ON_DEMAND, home="k"),
        lambda: ended.interrupting("x"),
        lambda: ended.ending(),
        lambda: ended.requeued(0),
    ):
        with pytest.raises(IllegalTransition):
            move()
    others = [phase for phase in JobPhase if phase is not JobPhase.ENDED]
    assert not any(PHASE_TRANSITIONS.allowed(JobPhase.ENDED, phase) for phase in others)


def test_every_phase_can_end() -> None:
    """A job can be given up on (or stopped) wherever it is."""
    assert all(PHASE_TRANSITIONS.allowed(phase, JobPhase.ENDED) for phase in JobPhase)


def test_an_end_carries_only_the_reason_of_its_outcome() -> None:
    assert JobEnd.stopped(StopReason.PLAN_ENDED).outcome is Outcome.STOPPED
    assert JobEnd.failed("AlgorithmError: ExitCode 1").failure_reason is not None
    with pytest.raises(ValueError):
        JobEnd(Outcome.STOPPED)
    with pytest.raises(ValueError):
        JobEnd(Outcome.COMPLETED, stop_reason=StopReason.REQUESTED)
    with pytest.raises(ValueError):
        JobEnd(Outcome.STOPPED, StopReason.REQUESTED, failure_reason="x")


def test_an_agents_stop_reason_is_read_as_a_stop_reason() -> None:
    assert StopReason.reported("max_runtime") is StopReason.MAX_RUNTIME
    assert StopReason.reported("stop") is StopReason.REQUESTED
    assert StopReason.reported(None) is StopReason.REQUESTED


def test_the_stored_shape() -> None:
    runtime = (
        JobRuntime(attempt=3, used_seconds=12.5)
        .placed(ON_PLAN, home="home-key", placed_at=NOW)
        .with_specs([{"host": "algo-1", "attempt": 3}])
        .interrupting("why")
    )
    assert runtime.json() == {
        "placement": ON_PLAN.json(),
        "home": "home-key",
        "placed_at": NOW.isoformat(),
        "attempt": 3,
        "used_seconds": 12.5,
        "interruption": "why",
        "specs": [{"host": "algo-1", "attempt": 3}],
    }
    assert JobRuntime().json() == {}
    assert JobRuntime.of(None, None) == JobRuntime()
    assert JobRuntime.of("running", {}).phase is JobPhase.RUNNING


_placements = st.one_of(
    st.none(),
    st.builds(
        Placement,
        pool=st.text(min_size=1, max_size=20),
        az=st.text(min_size=1, max_size=12),
        block=st.one_of(st.none(), st.text(min_size=1, max_size=12)),
        work_ends=st.one_of(st.none(), st.datetimes(timezones=st.just(UTC))),
        instances=st.lists(st.text(min_size=1, max_size=8), max_size=3).map(tuple),
    ),
)


@given(
    phase=st.sampled_from(JobPhase),
    placement=_placements,
    home=st.one_of(st.none(), st.text(min_size=1, max_size=30)),
    placed_at=st.one_of(st.none(), st.datetimes(timezones=st.just(UTC))),
    attempt=st.integers(min_value=1, max_value=50),
    used=st.floats(min_value=0, max_value=1e7, allow_nan=False),
    interruption=st.one_of(st.none(), st.text(min_size=1, max_size=40)),
    specs=st.one_of(
        st.none(), st.lists(st.dictionaries(st.text(max_size=5), st.integers()), max_size=3)
    ),
)
def test_a_runtime_reads_back_as_it_was_stored(
    phase: JobPhase,
    placement: Placement | None,
    home: str | None,
    placed_at: datetime | None,
    attempt: int,
    used: float,
    interruption: str | None,
    specs: list[dict[str, int]] | None,
) -> None:
    runtime = JobRuntime(
        phase=phase,
        placement=placement,
        home=home,
        placed_at=placed_at,
        attempt=attempt,
        used_seconds=used,
        interruption=interruption,
        specs=specs,  # type: ignore[arg-type]
    )
    assert JobRuntime.of(phase.value, runtime.json()) == runtime
