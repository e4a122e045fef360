"""What one instance of a type is: vCPUs, memory and accelerators.

An instance's sandbox is limited to its type's memory, CPUs and processes (spec §4.8),
so a job that outgrows an ml.m5.xlarge fails as it would on one. The catalogue holds
SageMaker's training types; a type it does not list is sized from its name the way
EC2 names sizes (large = 2 vCPUs, xlarge = 4, Nxlarge = 4N) and its family's memory
per vCPU. The config's `[instance_types."ml.x.y"]` tables override or add entries.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

GIB = 1024**3
# Room for the threads of a busy training process (data loaders, NCCL, BLAS pools).
PIDS_PER_VCPU = 512
MIN_PIDS = 1024


class InstanceTypeError(ValueError):
    """An `[instance_types]` entry that cannot be used; the message says which and why."""


@dataclass(frozen=True)
class InstanceType:
    name: str
    vcpus: int
    memory_bytes: int
    gpus: int = 0
    pids: int = 0  # 0: from the vCPUs

    @property
    def max_pids(self) -> int:
        return self.pids or max(MIN_PIDS, PIDS_PER_VCPU * self.vcpus)

    @property
    def memory_gib(self) -> float:
        return self.memory_bytes / GIB


def _entry(vcpus: int, memory_gib: float, gpus: int = 0) -> tuple[int, float, int]:
    return (vcpus, memory_gib, gpus)


# (vCPUs, memory GiB, GPUs or accelerators) as AWS publishes them for the ml.* types.
CATALOGUE: dict[str, tuple[int, float, int]] = {
    "ml.m5.large": _entry(2, 8),
    "ml.m5.xlarge": _entry(4, 16),
    "ml.m5.2xlarge": _entry(8, 32),
    "ml.m5.4xlarge": _entry(16, 64),
    "ml.m5.12xlarge": _entry(48, 192),
    "ml.m5.24xlarge": _entry(96, 384),
    "ml.c5.xlarge": _entry(4, 8),
    "ml.c5.2xlarge": _entry(8, 16),
    "ml.c5.4xlarge": _entry(16, 32),
    "ml.c5.9xlarge": _entry(36, 72),
    "ml.c5.18xlarge": _entry(72, 144),
    "ml.g4dn.xlarge": _entry(4, 16, 1),
    "ml.g4dn.2xlarge": _entry(8, 32, 1),
    "ml.g4dn.4xlarge": _entry(16, 64, 1),
    "ml.g4dn.8xlarge": _entry(32, 128, 1),
    "ml.g4dn.12xlarge": _entry(48, 192, 4),
    "ml.g4dn.16xlarge": _entry(64, 256, 1),
    "ml.g5.xlarge": _entry(4, 16, 1),
    "ml.g5.2xlarge": _entry(8, 32, 1),
    "ml.g5.4xlarge": _entry(16, 64, 1),
    "ml.g5.8xlarge": _entry(32, 128, 1),
    "ml.g5.12xlarge": _entry(48, 192, 4),
    "ml.g5.16xlarge": _entry(64, 256, 1),
    "ml.g5.24xlarge": _entry(96, 384, 4),
    "ml.g5.48xlarge": _entry(192, 768, 8),
    "ml.p3.2xlarge": _entry(8, 61, 1),
    "ml.p3.8xlarge": _entry(32, 244, 4),
    "ml.p3.16xlarge": _entry(64, 488, 8),
    "ml.p3dn.24xlarge": _entry(96, 768, 8),
    "ml.p4d.24xlarge": _entry(96, 1152, 8),
    "ml.p4de.24xlarge": _entry(96, 1152, 8),
    "ml.p5.4xlarge": _entry(16, 256, 1),
    "ml.p5.48xlarge": _entry(192, 2048, 8),
    "ml.p5e.48xlarge": _entry(192, 2048, 8),
    "ml.p5en.48xlarge": _entry(192, 2048, 8),
    "ml.p6-b200.48xlarge": _entry(192, 2048, 8),
    "ml.p6-b300.48xlarge": _entry(192, 4096, 8),
    "ml.p6e-gb200.36xlarge": _entry(144, 960, 4),
    "ml.trn1.2xlarge": _entry(8, 32, 1),
    "ml.trn1.32xlarge": _entry(128, 512, 16),
    "ml.trn1n.32xlarge": _entry(128, 512, 16),
    "ml.trn2.48xlarge": _entry(192, 2048, 16),
}

# Memory per vCPU by family letter, for types the catalogue does not list.
_FAMILY_GIB_PER_VCPU = {"c": 2, "m": 4, "t": 4, "r": 8, "x": 16, "z": 8}
_SIZE = re.compile(r"(\d+)?(xlarge|large|medium|small|micro|nano)")
_NAMED_SIZES = {"nano": 1, "micro": 1, "small": 1, "medium": 1, "large": 2, "xlarge": 4}


def _derived(name: str) -> tuple[int, float, int]:
    parts = name.split(".")
    family = parts[1] if len(parts) == 3 else ""
    match = _SIZE.fullmatch(parts[-1]) if parts else None
    if match is None:
        return (4, 16.0, 0)
    vcpus = _NAMED_SIZES[match.group(2)] * (int(match.group(1)) if match.group(1) else 1)
    per_vcpu = _FAMILY_GIB_PER_VCPU.get(family[:1], 4)
    return (vcpus, float(vcpus * per_vcpu), 0)


def _positive(entry: Mapping[str, Any], key: str, where: str, kind: type) -> Any:
    value = entry[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise InstanceTypeError(f"{where}.{key} must be a positive number (got {value!r})")
    if kind is int and not float(value).is_integer():
        raise InstanceTypeError(f"{where}.{key} must be a whole number (got {value!r})")
    return kind(value)


def catalogue(overrides: Mapping[str, Any] | None = None) -> dict[str, InstanceType]:
    """Every listed type, with the config's `[instance_types]` entries applied."""
    known = {
        name: InstanceType(name, vcpus, int(memory * GIB), gpus)
        for name, (vcpus, memory, gpus) in CATALOGUE.items()
    }
    for name, entry in dict(overrides or {}).items():
        where = f'[instance_types."{name}"]'
        if not isinstance(entry, Mapping):
            raise InstanceTypeError(f"{where} must be a table")
        unknown = set(entry) - {"vcpus", "memory_gib", "gpus", "pids"}
        if unknown:
            raise InstanceTypeError(f"{where}: unknown keys {sorted(unknown)}")
        base = known.get(name) or describe(name)
        known[name] = InstanceType(
            name,
            _positive(entry, "vcpus", where, int) if "vcpus" in entry else base.vcpus,
            int(_positive(entry, "memory_gib", where, float) * GIB)
            if "memory_gib" in entry
            else base.memory_bytes,
            int(entry.get("gpus", base.gpus)),
            _positive(entry, "pids", where, int) if "pids" in entry else base.pids,
        )
    return known


def describe(name: str, known: Mapping[str, InstanceType] | None = None) -> InstanceType:
    """One type: from `known` (a `catalogue()`), the built-in table, or its name."""
    if known is not None and name in known:
        return known[name]
    vcpus, memory, gpus = CATALOGUE.get(name) or _derived(name)
    return InstanceType(name, vcpus, int(memory * GIB), gpus)
