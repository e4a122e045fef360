"""Instances in or out of service, as an operator asks (spec §5.10): their health, and
the warm pools that cannot stay on them."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from dockyard.config import PlanSettings
from dockyard.domain.warm_pools import MAINTENANCE
from dockyard.services import fleet, warm_pools


def set_health(
    session: Session,
    now: datetime,
    plans: PlanSettings,
    health: str,
    *,
    instance_ids: Iterable[str] = (),
    instance_type: str | None = None,
    availability_zone: str | None = None,
) -> dict[str, Any]:
    """Put instances (by id, or all of a type and/or AZ) in or out of service; out of
    service, the warm pools kept on them are terminated. Raises ValueError for a
    request that names nothing, or a move the instances cannot make."""
    rows = fleet.set_health(
        session,
        health,
        instance_ids=instance_ids,
        instance_type=instance_type,
        availability_zone=availability_zone,
    )
    ended: list[int] = []
    if health != fleet.HEALTHY:
        # An UltraServer's warm pools hold their instances by id; others by pool.
        ended = warm_pools.terminate_on(
            session,
            {row.pool_key for row in rows if row.ultraserver_id is None},
            now,
            MAINTENANCE,
            plans,
            instance_ids={row.id for row in rows if row.ultraserver_id is not None},
        )
    return {
        "instances": [row.id for row in rows],
        "health": health,
        "terminated_warm_pools": len(ended),
    }
