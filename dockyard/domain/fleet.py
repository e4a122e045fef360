"""The fleet: which instances dockyard may hand out, expanded from the config's groups.

A group is one `[[fleet]]` table: `count` plain instances of one type in one AZ, or
`ultraservers` UltraServers of `instances_per_ultraserver` instances each. A plain
group may list the host's GPUs its instances run on (`gpus = [0, 1, ...]`): they are
shared out in order, the same number to each instance (one 8-GPU host as eight 1-GPU
instances: `count = 8, gpus = [0, 1, 2, 3, 4, 5, 6, 7]`). Instance and
UltraServer ids are derived from the group, so the same config always yields the
same ids (a restart finds its instances again).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

_AZ = re.compile(r"[a-z]+-[0-9a-z-]+")
_REGION = re.compile(r"([a-z]{2}(?:-[a-z]+)+-\d+)")
_INSTANCE_TYPE = re.compile(r"ml\.[a-z0-9.-]+")


class FleetError(ValueError):
    """A fleet declaration that cannot be used; the message says which group and why."""


@dataclass(frozen=True)
class FleetInstance:
    id: str
    instance_type: str
    availability_zone: str
    ultraserver_id: str | None = None
    ultraserver_type: str | None = None
    # The host GPUs this instance runs on (its share of its group's `gpus`).
    gpus: tuple[int, ...] = ()

    @property
    def pool_key(self) -> str:
        return pool_key(self.instance_type, self.availability_zone, self.ultraserver_id)

    @property
    def region(self) -> str:
        return region_of(self.availability_zone)


def pool_key(instance_type: str, availability_zone: str, ultraserver_id: str | None) -> str:
    """Plain instances of one (type, AZ) share a pool; each UltraServer is a pool of its own."""
    if ultraserver_id is not None:
        return f"us:{ultraserver_id}"
    return f"{instance_type}@{availability_zone}"


def region_of(availability_zone: str) -> str:
    """us-east-1a -> us-east-1; us-east-1-dfw-2a (a Local Zone) -> us-east-1."""
    match = _REGION.match(availability_zone)
    if match is None:
        raise FleetError(f"cannot tell the region of availability zone {availability_zone!r}")
    return match.group(1)


def _int(group: Mapping[str, Any], key: str, where: str, default: int | None = None) -> int:
    value = group.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise FleetError(f"{where}: {key} must be a positive integer (got {value!r})")
    return value


def _gpu_shares(gpus: Any, count: int, where: str) -> list[tuple[int, ...]]:
    """A group's GPU list split into `count` equal shares, in order."""
    if not isinstance(gpus, list) or any(
        isinstance(g, bool) or not isinstance(g, int) or g < 0 for g in gpus
    ):
        raise FleetError(f"{where}: gpus must be a list of GPU indices such as [0, 1]")
    if len(set(gpus)) != len(gpus):
        raise FleetError(f"{where}: gpus names a GPU twice")
    if len(gpus) % count:
        raise FleetError(
            f"{where}: {len(gpus)} GPUs cannot be shared equally by {count} instances"
        )
    size = len(gpus) // count
    return [tuple(gpus[i * size : (i + 1) * size]) for i in range(count)]


def gpu_shares(instances: Iterable[FleetInstance]) -> dict[str, list[tuple[int, ...]]]:
    """Each pool's GPU shares (one per instance that has GPUs), in instance order: what
    a backend hands its instances as they start. The GPUs are the host's (the local
    backend runs every instance on one host): two instances given one GPU are refused."""
    shares: dict[str, list[tuple[int, ...]]] = {}
    owner: dict[int, str] = {}
    for instance in instances:
        if not instance.gpus:
            continue
        for gpu in instance.gpus:
            other = owner.setdefault(gpu, instance.id)
            if other != instance.id:
                raise FleetError(f"GPU {gpu} is given to both {other} and {instance.id}")
        shares.setdefault(instance.pool_key, []).append(instance.gpus)
    return shares


def expand(groups: Iterable[Mapping[str, Any]]) -> list[FleetInstance]:
    instances: list[FleetInstance] = []
    seen: set[str] = set()
    for index, group in enumerate(groups):
        where = f"fleet group {index + 1}"
        instance_type = str(group.get("instance_type", ""))
        az = str(group.get("availability_zone", ""))
        if not _INSTANCE_TYPE.fullmatch(instance_type):
            raise FleetError(f"{where}: instance_type must look like ml.p5.48xlarge")
        if not _AZ.fullmatch(az):
            raise FleetError(f"{where}: availability_zone must look like us-east-1a (got {az!r})")
        region_of(az)
        unknown = set(group) - {
            "instance_type",
            "availability_zone",
            "count",
            "ultraserver_type",
            "ultraservers",
            "instances_per_ultraserver",
            "gpus",
        }
        if unknown:
            raise FleetError(f"{where}: unknown keys {sorted(unknown)}")
        if "ultraserver_type" in group:
            us_type = str(group["ultraserver_type"])
            for u in range(1, _int(group, "ultraservers", where) + 1):
                us_id = f"us-{az}-{instance_type.split('.')[1]}-{u}"
                size = _int(group, "instances_per_ultraserver", where)
                for n in range(1, size + 1):
                    instances.append(
                        FleetInstance(f"{us_id}-{n:02d}", instance_type, az, us_id, us_type)
                    )
        else:
            count = _int(group, "count", where)
            shares = _gpu_shares(group.get("gpus", []), count, where)
            for n in range(1, count + 1):
                instances.append(
                    FleetInstance(
                        f"{az}-{instance_type}-{n:03d}", instance_type, az, gpus=shares[n - 1]
                    )
                )
    for instance in instances:
        if instance.id in seen:
            raise FleetError(f"instance {instance.id} is declared twice; merge the groups")
        seen.add(instance.id)
    return instances


# A Ray node offers dockyard instances by custom resources (docs/ray.md):
# `dockyard/<instance type>` = how many instances of that type it runs, and
# `dockyard/az/<availability zone>` = 1 for the zone it stands in.
RESOURCE_PREFIX = "dockyard/"
AZ_PREFIX = "dockyard/az/"


def type_resource(instance_type: str) -> str:
    return f"{RESOURCE_PREFIX}{instance_type}"


def az_resource(availability_zone: str) -> str:
    return f"{AZ_PREFIX}{availability_zone}"


def discovered_groups(
    nodes: Iterable[tuple[str, Mapping[str, float]]], gpus_of: Mapping[str, int]
) -> list[dict[str, Any]]:
    """The fleet groups a Ray cluster's nodes offer: one `count` group per (type, AZ),
    summed over the nodes, in a stable order. `nodes` is (node id, its resources);
    `gpus_of` the GPUs one instance of a type has. A node that offers instances but no
    AZ, or two AZs, or fewer GPUs than its instances need, is refused by name."""
    counts: dict[tuple[str, str], int] = {}
    for node_id, resources in nodes:
        offered = {
            name.removeprefix(RESOURCE_PREFIX): amount
            for name, amount in resources.items()
            if name.startswith(RESOURCE_PREFIX) and not name.startswith(AZ_PREFIX)
        }
        if not offered:
            continue
        zones = [name.removeprefix(AZ_PREFIX) for name in resources if name.startswith(AZ_PREFIX)]
        where = f"Ray node {node_id}"
        if len(zones) != 1:
            raise FleetError(
                f"{where} offers {sorted(offered)} and must name one availability zone "
                f"as a {AZ_PREFIX}<az> resource (it names {len(zones)})"
            )
        needed = 0
        for instance_type, amount in offered.items():
            if not _INSTANCE_TYPE.fullmatch(instance_type):
                raise FleetError(f"{where}: {RESOURCE_PREFIX}{instance_type} is not an ml.* type")
            if amount < 1 or not float(amount).is_integer():
                raise FleetError(
                    f"{where}: {RESOURCE_PREFIX}{instance_type} must be a whole number of "
                    f"instances (got {amount})"
                )
            needed += int(amount) * gpus_of.get(instance_type, 0)
            key = (instance_type, zones[0])
            counts[key] = counts.get(key, 0) + int(amount)
        if needed > resources.get("GPU", 0):
            raise FleetError(
                f"{where}: its instances need {needed} GPUs and it has "
                f"{int(resources.get('GPU', 0))}"
            )
    groups = [
        {"instance_type": instance_type, "availability_zone": az, "count": count}
        for (instance_type, az), count in sorted(counts.items())
    ]
    expand(groups)  # the same checks as a declared group (AZ and type names)
    return groups


def merged(
    declared: Iterable[Mapping[str, Any]], discovered: Iterable[Mapping[str, Any]]
) -> tuple[dict[str, Any], ...]:
    """The fleet when Ray nodes offer instances: what they offer, plus the declared
    groups of the pools they do not offer (an UltraServer group, or a type placed on
    any node). A config that declares no fleet gets the nodes' alone, not the demo one."""
    offered = {(g["instance_type"], g["availability_zone"]) for g in discovered}
    kept = [
        dict(g)
        for g in declared
        if "ultraserver_type" in g
        or (g.get("instance_type"), g.get("availability_zone")) not in offered
    ]
    return (*kept, *(dict(g) for g in discovered))
