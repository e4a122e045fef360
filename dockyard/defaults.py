"""Embedded defaults: the demo fleet and the price table, used when the config names none.

The demo fleet lets `make run` reserve and run things at once: in each of three AZs,
8 instances of every reservable GPU type (except the UltraServer type) plus a few
small on-demand instances, and two UltraServers in a Dallas Local Zone.
"""

from __future__ import annotations

from decimal import Decimal

DEMO_AZS = ("us-east-1a", "us-east-1b", "us-east-1c")
ULTRASERVER_AZ = "us-east-1-dfw-2a"
ULTRASERVER_TYPE = "ml.u-p6e-gb200x72"
ULTRASERVER_INSTANCE_TYPE = "ml.p6e-gb200.36xlarge"
ULTRASERVER_SIZE = 18

# SageMaker's ReservedCapacityInstanceType enum (botocore 1.43.11) minus the UltraServer type.
RESERVABLE_TYPES = (
    "ml.p4d.24xlarge",
    "ml.p4de.24xlarge",
    "ml.p5.4xlarge",
    "ml.p5.48xlarge",
    "ml.p5e.48xlarge",
    "ml.p5en.48xlarge",
    "ml.p6-b200.48xlarge",
    "ml.p6-b300.48xlarge",
    "ml.trn1.32xlarge",
    "ml.trn2.48xlarge",
)
ON_DEMAND_TYPES = ("ml.m5.xlarge", "ml.g5.xlarge")


def demo_fleet() -> list[dict[str, object]]:
    """The demo fleet as config-file groups (the same shape `[[fleet]]` tables have)."""
    groups: list[dict[str, object]] = []
    for az in DEMO_AZS:
        for instance_type in RESERVABLE_TYPES:
            groups.append({"instance_type": instance_type, "availability_zone": az, "count": 8})
        for instance_type in ON_DEMAND_TYPES:
            groups.append({"instance_type": instance_type, "availability_zone": az, "count": 4})
    groups.append(
        {
            "instance_type": ULTRASERVER_INSTANCE_TYPE,
            "availability_zone": ULTRASERVER_AZ,
            "ultraserver_type": ULTRASERVER_TYPE,
            "ultraservers": 2,
            "instances_per_ultraserver": ULTRASERVER_SIZE,
        }
    )
    return groups


# USD per instance-hour for reserved capacity (illustrative list prices; override with [prices]).
PRICES: dict[str, Decimal] = {
    "ml.p4d.24xlarge": Decimal("25.25"),
    "ml.p4de.24xlarge": Decimal("31.58"),
    "ml.p5.4xlarge": Decimal("8.12"),
    "ml.p5.48xlarge": Decimal("55.04"),
    "ml.p5e.48xlarge": Decimal("61.92"),
    "ml.p5en.48xlarge": Decimal("66.08"),
    "ml.p6-b200.48xlarge": Decimal("79.20"),
    "ml.p6-b300.48xlarge": Decimal("95.04"),
    "ml.p6e-gb200.36xlarge": Decimal("84.10"),
    "ml.trn1.32xlarge": Decimal("15.48"),
    "ml.trn2.48xlarge": Decimal("33.70"),
    "ml.m5.xlarge": Decimal("0.23"),
    "ml.g5.xlarge": Decimal("1.41"),
}
CURRENCY = "USD"
# Reserved instances an account may hold per instance type unless [quotas] says otherwise.
DEFAULT_RESERVED_INSTANCE_QUOTA = 256
# Instances of one type an account's running training jobs may hold at once.
DEFAULT_TRAINING_INSTANCE_QUOTA = 64
# Instances of one type an account may keep in warm pools: AWS's default is 0 (spec §5.7).
DEFAULT_WARM_POOL_INSTANCE_QUOTA = 0
# "<type> for cluster usage": instances of a type across an account's HyperPod clusters.
DEFAULT_CLUSTER_INSTANCE_QUOTA = 64
# The development account's warm-pool quota per type, so `make run` can try warm pools at once.
DEVELOPMENT_WARM_POOL_INSTANCES = 4

# The bucket a new server has for jobs' code and output (the SageMaker SDK's default
# bucket plays this part on AWS); the README's examples and `dockyard jobs run` use it.
DEFAULT_BUCKET = "dockyard-jobs"
