"""UltraServers bought on a training plan (spec §3.6): spares, failures and health.

An UltraServer is bought whole; `SpareInstanceCountPerUltraServer` of its instances are
kept out of the usable count. A failed instance is replaced from the spares while
there are any, so work on the UltraServer keeps its usable count; once the spares are
used up a further failure takes usable capacity away.
"""

from __future__ import annotations

OK = "OK"
IMPAIRED = "Impaired"


def usable(size: int, spares: int, unhealthy: int) -> int:
    """Instances of one UltraServer that work may use now."""
    return max(0, min(size - spares, size - unhealthy))


def available_spares(spares: int, unhealthy: int) -> int:
    """Spares still standing by: each failure uses one up."""
    return max(0, spares - unhealthy)


def health(spares: int, unhealthy: int) -> str:
    """`Impaired` once a failure has left it without a spare to heal the next one (or
    has taken usable capacity away); `OK` otherwise."""
    return IMPAIRED if unhealthy and available_spares(spares, unhealthy) == 0 else OK


def position(instance_id: str) -> int:
    """An instance's place in its UltraServer (1-based; the fleet numbers them so)."""
    tail = instance_id.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else 0
