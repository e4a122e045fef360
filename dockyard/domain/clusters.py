"""HyperPod clusters (spec §3.5): statuses, their transitions, and when a group's nodes run.

A cluster is instance groups; each group asks for a count of nodes of one instance
type, on demand or on a training plan bought for `hyperpod-cluster`. A node is a
long-lived instance: it runs the group's lifecycle `OnCreate` script once, then stays
up until it is deleted (or, on a plan, until its block has 1 hour left - HyperPod's
limit, not the 30 minutes of training jobs; it comes back in the plan's next block).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from enum import StrEnum

from dockyard.domain import plan_jobs
from dockyard.domain.plan_jobs import Block
from dockyard.domain.transitions import Transitions

# A plan's nodes are shut down with this much of their block left (spec §3.5).
CUTOFF = timedelta(hours=1)
# A node on demand holds its instance until it is deleted; the lease on the calendar
# runs this far ahead and is let go when the node goes.
ON_DEMAND_HOLD = timedelta(days=3650)
# How long a node's OnCreate script may run before the node is failed.
ON_CREATE_SECONDS = 3600


class ClusterStatus(StrEnum):
    CREATING = "Creating"
    IN_SERVICE = "InService"
    UPDATING = "Updating"
    DELETING = "Deleting"
    FAILED = "Failed"


CLUSTER_TRANSITIONS = Transitions(
    "cluster",
    {
        ClusterStatus.CREATING: frozenset(
            {ClusterStatus.IN_SERVICE, ClusterStatus.DELETING, ClusterStatus.FAILED}
        ),
        ClusterStatus.IN_SERVICE: frozenset({ClusterStatus.UPDATING, ClusterStatus.DELETING}),
        ClusterStatus.UPDATING: frozenset({ClusterStatus.IN_SERVICE, ClusterStatus.DELETING}),
        ClusterStatus.FAILED: frozenset({ClusterStatus.DELETING}),
    },
)


class NodeStatus(StrEnum):
    """ClusterInstanceStatus, as the API names a node's."""

    PENDING = "Pending"
    RUNNING = "Running"
    FAILURE = "Failure"
    SHUTTING_DOWN = "ShuttingDown"


NODE_TRANSITIONS = Transitions(
    "cluster node",
    {
        NodeStatus.PENDING: frozenset(
            {NodeStatus.RUNNING, NodeStatus.FAILURE, NodeStatus.SHUTTING_DOWN}
        ),
        NodeStatus.RUNNING: frozenset({NodeStatus.FAILURE, NodeStatus.SHUTTING_DOWN}),
        NodeStatus.FAILURE: frozenset({NodeStatus.SHUTTING_DOWN}),
    },
)


class GroupStatus(StrEnum):
    """InstanceGroupStatus."""

    CREATING = "Creating"
    IN_SERVICE = "InService"
    UPDATING = "Updating"
    DEGRADED = "Degraded"
    DELETING = "Deleting"


def work_ends(block: Block) -> datetime:
    return block.end - CUTOFF


def usable(block: Block, now: datetime) -> bool:
    """Whether a plan's nodes may run on `block` at `now`."""
    return plan_jobs.usable(block, now, CUTOFF)


def current_block(blocks: Sequence[Block], now: datetime) -> Block | None:
    return plan_jobs.current(blocks, now, CUTOFF)


def next_moment(blocks: Sequence[Block], now: datetime) -> datetime | None:
    """The next moment a plan's nodes come or go: a block's start or its cutoff."""
    moments = [m for b in blocks for m in (b.start, work_ends(b)) if m > now]
    return min(moments, default=None)


def plan_group_message(blocks: Sequence[Block], now: datetime) -> str | None:
    """Why a plan's group has no nodes now, or None while its block is usable."""
    if current_block(blocks, now) is not None:
        return None
    later = sorted(b.start for b in blocks if b.start > now)
    if later:
        return (
            "Waiting for the training plan's reserved capacity: the next block starts at "
            f"{later[0].isoformat()}"
        )
    return "The training plan has no more reserved capacity (its last block ended)"


def cluster_status(
    current: ClusterStatus, running: int, wanted: int, failed: bool
) -> ClusterStatus:
    """Where a live cluster goes from what its nodes do: a cluster being created fails if
    a node failed, and one being created or updated is InService once `running` reaches
    `wanted` (being created: every node of every group; updated: the nodes its groups
    want now - a plan's group outside a usable block wants none)."""
    if current == ClusterStatus.CREATING and failed:
        return ClusterStatus.FAILED
    if current in (ClusterStatus.CREATING, ClusterStatus.UPDATING) and running >= wanted:
        return ClusterStatus.IN_SERVICE
    return current


def group_status(cluster: ClusterStatus, nodes: Sequence[NodeStatus], wanted: int) -> GroupStatus:
    if cluster == ClusterStatus.DELETING:
        return GroupStatus.DELETING
    running = sum(1 for n in nodes if n == NodeStatus.RUNNING)
    if cluster == ClusterStatus.CREATING:
        return GroupStatus.CREATING
    if any(n == NodeStatus.FAILURE for n in nodes):
        return GroupStatus.DEGRADED
    if running < wanted:
        return GroupStatus.UPDATING
    return GroupStatus.IN_SERVICE
