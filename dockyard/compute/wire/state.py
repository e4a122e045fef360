"""What an instance reports of itself, in one shape for every backend: the agent writes
it (`agent.State`, as `state.json` on the local backend) and `Backend.poll` answers it.

Times are ISO 8601 UTC strings; every key may be missing from an older agent's report,
and {"phase": "launching"} is an instance that has not reported yet.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Literal, TypedDict

Phase = Literal[
    "launching",  # not started yet (the backend's answer until the agent reports)
    "downloading",  # staging its channels and code
    "training",  # the job's code runs (a node: its OnCreate script)
    "uploading",  # the job ended; model, output and checkpoints go to S3
    "running",  # a cluster node is up, its OnCreate done
    "completed",
    "failed",
    "stopped",
]


class InstanceState(TypedDict, total=False):
    phase: Phase
    # The job's process (its process group), while there is one.
    pid: int | None
    exit_code: int | None
    failure_reason: str | None
    # "stop" (asked to) or "max_runtime" (MaxRuntimeInSeconds ran out).
    stop_reason: str | None
    # Whether a warm pool's parked interpreter ran the job ("parked") or a new one.
    interpreter: str
    # The job ran outside the sandbox (--unsafe-no-sandbox).
    unconfined: bool
    started_at: str | None
    training_started_at: str | None
    first_output_at: str | None
    # A cluster node: when its OnCreate succeeded and it came up.
    ready_at: str | None
    ended_at: str | None


LAUNCHING: InstanceState = {"phase": "launching"}
# The phases an instance ends in (it reports nothing after one).
ENDED_PHASES = frozenset({"completed", "failed", "stopped"})

TimeKey = Literal["started_at", "training_started_at", "first_output_at", "ready_at", "ended_at"]


def times(states: Iterable[InstanceState], key: TimeKey) -> list[datetime]:
    """The given moment of every instance that reported it."""
    return [datetime.fromisoformat(at) for state in states if (at := state.get(key))]
