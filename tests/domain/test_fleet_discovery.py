"""The fleet a Ray cluster's nodes offer by their custom resources (docs/ray.md)."""

from __future__ import annotations

import pytest

from dockyard.domain.fleet import FleetError, discovered_groups, expand, merged

GPUS = {"ml.g5.xlarge": 1, "ml.p4d.24xlarge": 8}


def test_nodes_are_summed_by_type_and_zone() -> None:
    nodes = [
        ("head", {"CPU": 4.0}),  # offers nothing: not part of the fleet
        ("a1", {"CPU": 8.0, "dockyard/ml.m5.xlarge": 2.0, "dockyard/az/us-east-1a": 1.0}),
        ("a2", {"CPU": 8.0, "dockyard/ml.m5.xlarge": 1.0, "dockyard/az/us-east-1a": 1.0}),
        (
            "b1",
            {
                "GPU": 2.0,
                "dockyard/ml.g5.xlarge": 2.0,
                "dockyard/ml.m5.xlarge": 1.0,
                "dockyard/az/us-east-1b": 1.0,
            },
        ),
    ]
    assert discovered_groups(nodes, GPUS) == [
        {"instance_type": "ml.g5.xlarge", "availability_zone": "us-east-1b", "count": 2},
        {"instance_type": "ml.m5.xlarge", "availability_zone": "us-east-1a", "count": 3},
        {"instance_type": "ml.m5.xlarge", "availability_zone": "us-east-1b", "count": 1},
    ]
    ids = [i.id for i in expand(discovered_groups(nodes, GPUS))]
    assert "us-east-1a-ml.m5.xlarge-003" in ids


@pytest.mark.parametrize(
    ("resources", "message"),
    [
        ({"dockyard/ml.m5.xlarge": 1.0}, "must name one availability zone"),
        (
            {
                "dockyard/ml.m5.xlarge": 1.0,
                "dockyard/az/us-east-1a": 1.0,
                "dockyard/az/us-east-1b": 1.0,
            },
            "it names 2",
        ),
        ({"dockyard/m5": 1.0, "dockyard/az/us-east-1a": 1.0}, "not an ml.* type"),
        ({"dockyard/ml.m5.xlarge": 0.5, "dockyard/az/us-east-1a": 1.0}, "whole number"),
        (
            {"GPU": 4.0, "dockyard/ml.p4d.24xlarge": 1.0, "dockyard/az/us-east-1a": 1.0},
            "need 8 GPUs and it has 4",
        ),
        ({"dockyard/ml.m5.xlarge": 1.0, "dockyard/az/nowhere": 1.0}, "availability_zone"),
    ],
)
def test_a_node_that_cannot_be_used_is_named(resources: dict[str, float], message: str) -> None:
    with pytest.raises(FleetError, match=message) as caught:
        discovered_groups([("node-7", resources)], GPUS)
    if "availability_zone" not in message:
        assert "node-7" in str(caught.value)


def test_declared_groups_stay_for_pools_the_nodes_do_not_offer() -> None:
    declared = [
        {"instance_type": "ml.m5.xlarge", "availability_zone": "us-east-1a", "count": 9},
        {"instance_type": "ml.c5.xlarge", "availability_zone": "us-east-1a", "count": 2},
        {
            "instance_type": "ml.p6e-gb200.36xlarge",
            "availability_zone": "us-east-1a",
            "ultraserver_type": "ml.u-p6e-gb200x72",
            "ultraservers": 1,
            "instances_per_ultraserver": 18,
        },
    ]
    discovered = [{"instance_type": "ml.m5.xlarge", "availability_zone": "us-east-1a", "count": 2}]
    fleet = merged(declared, discovered)
    assert [(g["instance_type"], g.get("count")) for g in fleet] == [
        ("ml.c5.xlarge", 2),
        ("ml.p6e-gb200.36xlarge", None),
        ("ml.m5.xlarge", 2),
    ]
    assert merged([], discovered) == tuple(discovered)
