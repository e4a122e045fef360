"""A fleet group's GPUs, shared out to its instances (issue 16)."""

from __future__ import annotations

import pytest

from dockyard.domain.fleet import FleetError, expand, gpu_shares


def group(**extra: object) -> dict[str, object]:
    return {"instance_type": "ml.g5.xlarge", "availability_zone": "us-east-1a", **extra}


def test_one_8_gpu_host_as_eight_1_gpu_instances() -> None:
    instances = expand([group(count=8, gpus=list(range(8)))])
    assert [i.gpus for i in instances] == [(g,) for g in range(8)]
    assert gpu_shares(instances) == {"ml.g5.xlarge@us-east-1a": [(g,) for g in range(8)]}


def test_shares_are_equal_and_in_order() -> None:
    instances = expand(
        [
            group(instance_type="ml.g5.12xlarge", count=2, gpus=[4, 5, 6, 7]),
            group(instance_type="ml.m5.xlarge", count=2),
        ]
    )
    assert gpu_shares(instances) == {"ml.g5.12xlarge@us-east-1a": [(4, 5), (6, 7)]}
    assert [i.gpus for i in instances if i.instance_type == "ml.m5.xlarge"] == [(), ()]


@pytest.mark.parametrize(
    ("gpus", "says"),
    [
        ([0, 1, 2], "cannot be shared equally"),
        ([0, 0], "twice"),
        ([0, -1], "list of GPU indices"),
        ("0,1", "list of GPU indices"),
        ([True, 1], "list of GPU indices"),
    ],
)
def test_a_gpu_list_that_cannot_be_used_is_refused(gpus: object, says: str) -> None:
    with pytest.raises(FleetError, match=says):
        expand([group(count=2, gpus=gpus)])


def test_one_gpu_is_never_given_to_two_instances() -> None:
    instances = expand(
        [group(count=1, gpus=[0]), group(availability_zone="us-east-1b", count=1, gpus=[0])]
    )
    with pytest.raises(FleetError, match="GPU 0 is given to both"):
        gpu_shares(instances)
