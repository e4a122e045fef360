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
