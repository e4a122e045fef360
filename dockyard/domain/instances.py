"""A fleet instance's health: a checked state machine, not a free string.

Healthy instances are handed out; an operator takes one out of service for maintenance
and back; a failed one (a hardware fault, or `dockyard fleet fail` injecting one) is
Unhealthy until it is repaired. Only Healthy instances count towards a pool's capacity.
"""

from __future__ import annotations

from enum import StrEnum

from dockyard.domain.transitions import Transitions


class InstanceHealth(StrEnum):
    HEALTHY = "Healthy"
    MAINTENANCE = "Maintenance"  # taken out of service by an operator (spec §5.10)
    UNHEALTHY = "Unhealthy"  # failed; replaced from an UltraServer's spares (spec §3.6)


HEALTH_TRANSITIONS = Transitions(
    "instance health",
    {
        InstanceHealth.HEALTHY: frozenset({InstanceHealth.MAINTENANCE, InstanceHealth.UNHEALTHY}),
        InstanceHealth.MAINTENANCE: frozenset({InstanceHealth.HEALTHY, InstanceHealth.UNHEALTHY}),
        # Repaired, or taken to the workshop.
        InstanceHealth.UNHEALTHY: frozenset({InstanceHealth.HEALTHY, InstanceHealth.MAINTENANCE}),
    },
)
