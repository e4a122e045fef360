"""Training jobs on training plans (spec §3.4): when a block may take work, and the words.

A job created with `ResourceConfig.TrainingPlanArn` runs only on its plan's reserved
capacity and only while a block is usable: from the block's start until 30 minutes
before its end. With 30 minutes left its instances are stopped (checkpoints saved)
and it waits for the next block; after the last block it ends Stopped.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

# The last part of every block is not for work: running jobs are stopped then, and
# nothing new starts (spec §3.4).
CUTOFF = timedelta(minutes=30)


@dataclass(frozen=True)
class Block:
    """What the rules need of a reserved capacity block."""

    id: str
    start: datetime
    end: datetime
    instance_count: int
    availability_zone: str

    @property
    def work_ends(self) -> datetime:
        return self.end - CUTOFF


def usable(block: Block, now: datetime, cutoff: timedelta = CUTOFF) -> bool:
    """Whether work may start or keep running on `block` at `now`: from its start until
    `cutoff` before its end (30 minutes for training jobs; HyperPod nodes use 1 hour)."""
    return block.start <= now < block.end - cutoff


def current(blocks: Sequence[Block], now: datetime, cutoff: timedelta = CUTOFF) -> Block | None:
    return next((b for b in blocks if usable(b, now, cutoff)), None)


def upcoming(blocks: Sequence[Block], now: datetime) -> Block | None:
    """The next block a waiting job can run on: the current one, else the next to start."""
    found = current(blocks, now)
    if found is not None:
        return found
    later = sorted((b for b in blocks if b.start > now), key=lambda b: b.start)
    return later[0] if later else None


def waiting_message(block: Block, now: datetime, free: int, wanted: int) -> str:
    if usable(block, now):
        return (
            f"Waiting for the training plan's capacity: {free} of its instances are free "
            f"in the reserved capacity until {block.work_ends.isoformat()}, the job needs "
            f"{wanted}"
        )
    return (
        "Waiting for the training plan's reserved capacity: the next block starts at "
        f"{block.start.isoformat()}"
    )


INTERRUPTED = (
    "Training job interrupted: the training plan's reserved capacity ends in 30 minutes. "
    "Checkpoints were saved; the job continues in the plan's next block."
)
PLAN_ENDED = (
    "Training job stopped: its training plan has no more reserved capacity (the last block ended)."
)
INSTANCE_LOST = (
    "Training job interrupted: an instance of the reserved capacity failed; the job "
    "restarts from its checkpoints."
)


def restarting(attempt: int, az: str) -> str:
    return (
        f"Restarting the training job on the training plan's reserved capacity in {az} "
        f"(attempt {attempt}); checkpoints are restored first."
    )


def starting_on_plan(az: str) -> str:
    return f"Starting the training job on the training plan's reserved capacity in {az}."
