"""Where a job's instances are: one typed value instead of a JSON dict read by key.

A job's placement is part of its `JobRuntime` (`domain.job_runtime`) and passes to the
warm pool its instances become (`warm_pools.placement`), as JSON; every reader goes
through `Placement.of` and every writer through `Placement.json`, so the shape has one
home. On demand it names the capacity pool and AZ; on a training plan also the block
whose lease holds the instances and when that block's working time ends (30 minutes
before the block does), and on an UltraServer the very instances it runs on.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any


@dataclass(frozen=True)
class Placement:
    pool: str
    az: str
    block: str | None = None
    work_ends: datetime | None = None
    # On an UltraServer block, the fleet instances the job runs on (a failed one
    # interrupts it; it resumes on healthy ones, a spare's among them).
    instances: tuple[str, ...] = ()

    @property
    def on_plan(self) -> bool:
        """On a training plan's block: the block's lease holds the instances already."""
        return self.block is not None

    def json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"pool": self.pool, "az": self.az}
        if self.block is not None:
            data["block"] = self.block
        if self.work_ends is not None:
            data["work_ends"] = self.work_ends.isoformat()
        if self.instances:
            data["instances"] = list(self.instances)
        return data

    @classmethod
    def of(cls, data: Mapping[str, Any] | None) -> Placement | None:
        """The placement stored as `data` (None for a job not placed yet)."""
        if not data or "az" not in data:
            return None
        ends = data.get("work_ends")
        return cls(
            pool=str(data.get("pool") or ""),
            az=str(data["az"]),
            block=str(data["block"]) if data.get("block") else None,
            work_ends=datetime.fromisoformat(str(ends)) if ends else None,
            instances=tuple(str(i) for i in data.get("instances") or ()),
        )
