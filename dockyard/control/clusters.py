"""The clusters reconciler: gives each instance group the nodes it should have now,
launches them, reads what they say, and lets go of the nodes that are to go.

A pass steps each cluster on its own (`control.pattern`): claim the cluster (a whole
cluster, not node by node: one decision counts its groups' nodes and sets its status),
decide (one transaction: which nodes go - deleted, their plan's block 1 hour from its
end, their group gone or shrunk, failed and recovered automatically - and which new
ones are placed, behind the capacity lock only when some are), act (no session open:
launch what should run, stop what should go, read each node's agent), record (one
transaction: node statuses, gone nodes' rows and leases removed, the cluster's
status). Launching and stopping are safe to repeat, so a server killed at any point
picks up where the rows and the agents' files say things are.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from dockyard.clock import Clock
from dockyard.compute.backends.protocol import Backend
from dockyard.compute.wire.spec import JobSpec
from dockyard.compute.wire.state import InstanceState
from dockyard.config import Settings
from dockyard.control.jobs.specs import HostSpecs
from dockyard.control.loop import seconds_until
from dockyard.control.pattern import Retries, Skipped, Steps
from dockyard.domain import clusters as rules
from dockyard.domain.clusters import ClusterStatus, NodeStatus
from dockyard.secretbox import SecretBox
from dockyard.services import capacity, cluster_nodes
from dockyard.services import clusters as service
from dockyard.store import claims
from dockyard.store.db import Database
from dockyard.store.tables import Cluster, ClusterNode

log = logging.getLogger("dockyard.control.clusters")

# How often nodes are looked at though no agent woke the control plane (an agent that
# died says nothing).
LOOK_SECONDS = 5.0
# How soon a pass comes again while nodes are coming up or going.
BUSY_SECONDS = 0.5
LIVE = (NodeStatus.PENDING.value, NodeStatus.RUNNING.value)
FAILURE = NodeStatus.FAILURE.value


@dataclass
class Work:
    """One node as the deciding step left it, for the acting step."""

    instance_id: str
    key: str  # the backend's name for the node's instance
    spec: JobSpec | None  # what it runs; None for a node that is to go
    handle: str | None = None


class ClustersReconciler:
    def __init__(
        self, db: Database, clock: Clock, backend: Backend, settings: Settings, box: SecretBox
    ) -> None:
        self.db = db
        self.box = box  # the nodes' own access keys' secrets go into their specs
        self.clock = clock
        self.backend = backend
        self.specs = HostSpecs(settings)
        self.steps = Steps(db, Cluster, claims.Claimant())
        self.retries = Retries("cluster")
        self._due: float | None = None
        self._next: datetime | None = None

    def __call__(self) -> None:
        with self.db.read_session() as session:
            ids = list(session.scalars(select(Cluster.id).order_by(Cluster.id)))
        busy = False
        moments: list[datetime] = []
        for cluster_id in ids:
            if not self.retries.ready(cluster_id):
                continue
            try:
                outcome = self.step(cluster_id)
            except Exception as exc:
                # One cluster's fault (a backend error, a database hiccup) must not stop
                # the others; it is tried again after a backoff.
                self.retries.failed(cluster_id, exc, self.give_up)
                continue
            self.retries.succeeded(cluster_id)
            if outcome is not None:
                busy = busy or outcome[0]
                if outcome[1] is not None:
                    moments.append(outcome[1])
        self.retries.keep(ids)
        self._next = min(moments, default=None)
        self._due = BUSY_SECONDS if busy else (LOOK_SECONDS if ids else None)

    def due(self) -> float | None:
        wanted = [self._due, seconds_until(self.clock, [self._next]), self.retries.due()]
        return min((s for s in wanted if s is not None), default=None)

    # ------------------------------------------------------------------ one cluster

    def step(self, cluster_id: int) -> tuple[bool, datetime | None] | None:
        """Move one cluster on; answers whether it is busy (nodes coming or going) and
        the next moment its plans' nodes come or go. None: the cluster is gone, or
        another server is stepping it."""
        now = self.clock.now()
        outcome = self.steps.step(
            cluster_id,
            lambda session, cluster: self._decide(session, cluster, now),
            self._act,
            lambda session, cluster, _, seen: self._record(session, cluster, seen, now),
        )
        return None if isinstance(outcome, Skipped) else outcome

    def give_up(self, cluster_id: int, reason: str) -> None:
        """A cluster whose step will never work: Failed where its status allows (while
        it is being created), its failure message saying why in any case."""
        with self.db.session() as session:
            cluster = session.get(Cluster, cluster_id)
            if cluster is None:
                return
            cluster.failure_message = reason[:1024]
            if ClusterStatus(cluster.status) == ClusterStatus.CREATING:
                service.set_status(cluster, ClusterStatus.FAILED, self.clock.now())

    def _act(self, work: list[Work]) -> dict[str, tuple[InstanceState, bool]]:
        """Launch what should run, stop what should go, read each node's agent (no
        session open)."""
        seen: dict[str, tuple[InstanceState, bool]] = {}
        for item in work:
            if item.spec is not None:
                item.handle = self.backend.launch(item.key, [item.spec])[0]
            else:
                item.handle = self.backend.handle(item.key, item.instance_id)
            alive = self.backend.alive(item.handle)
            if item.spec is None and alive:
                self.backend.stop(item.handle)
            seen[item.instance_id] = (self.backend.poll(item.handle), alive)
        return seen

    def _decide(self, session: Session, cluster: Cluster, now: datetime) -> list[Work]:
        """Which nodes go and which new ones are placed; what each is to run."""
        status = ClusterStatus(cluster.status)
        nodes = service.nodes_of(session, cluster)
        recovery = cluster.spec.get("NodeRecovery", "Automatic") == "Automatic"
        failed = cluster_nodes.failed_instances(session, nodes)
        for node in nodes:
            if node.fleet_instance_id in failed and node.status in LIVE:
                cluster_nodes.set_node_status(
                    node,
                    NodeStatus.FAILURE,
                    f"The node's instance {node.fleet_instance_id} failed its health checks",
                )
        for node in nodes:
            group = service.group_spec(cluster, node.instance_group)
            if status in (ClusterStatus.DELETING, ClusterStatus.FAILED) or group is None:
                self._let_go(node, None)
            elif node.block_id is not None and not self._block_usable(session, group, node, now):
                self._let_go(node, "The training plan's reserved capacity ends in 1 hour")
            elif (
                node.status == NodeStatus.FAILURE.value
                and recovery
                and (status != ClusterStatus.CREATING)
            ):
                self._let_go(node, None)  # replaced: its group lacks a node from here
        if status not in (ClusterStatus.DELETING, ClusterStatus.FAILED):
            for group in cluster.spec.get("InstanceGroups", []):
                self._fill(session, cluster, group, nodes, now)
        work = []
        for node in service.nodes_of(session, cluster):
            group = service.group_spec(cluster, node.instance_group)
            # A failed node runs nothing (NodeRecovery None keeps it, failed).
            spec = None
            if not (node.shutdown_requested or group is None or node.status == FAILURE):
                credentials = (
                    cluster_nodes.node_credentials(session, self.box, node, now)
                    if self.specs.nodes_reach_s3
                    else None
                )
                spec = self.specs.for_node(cluster, group, node, credentials)
            work.append(Work(node.instance_id, service.node_key(cluster, node), spec))
        return work

    @staticmethod
    def _let_go(node: ClusterNode, message: str | None) -> None:
        if not node.shutdown_requested:
            node.shutdown_requested = True
            cluster_nodes.set_node_status(node, NodeStatus.SHUTTING_DOWN, message)

    @staticmethod
    def _block_usable(
        session: Session, group: dict[str, Any], node: ClusterNode, now: datetime
    ) -> bool:
        blocks = service.plan_blocks(session, str(group.get("TrainingPlanArn") or ""))
        block = next((b for b, _ in blocks if b.id == node.block_id), None)
        return block is not None and rules.usable(block, now)

    def _fill(
        self,
        session: Session,
        cluster: Cluster,
        group: dict[str, Any],
        nodes: list[ClusterNode],
        now: datetime,
    ) -> None:
        """Place the nodes the group lacks now; let go of the ones it has too many of
        (the newest first)."""
        name = group["InstanceGroupName"]
        staying = [n for n in nodes if n.instance_group == name and not n.shutdown_requested]
        wanted = service.wanted_now(session, group, now)
        for node in sorted(staying, key=lambda n: n.launch_time, reverse=True)[
            : max(0, len(staying) - wanted)
        ]:
            self._let_go(node, "The instance group's count was lowered")
        if wanted > len(staying):
            # Placing books capacity (a lease, or a place in a plan's block that jobs
            # count too): behind the capacity lock, as every booking.
            capacity.lock(session)
        for _ in range(wanted - len(staying)):
            placed = cluster_nodes.place_node(session, cluster, group, now)
            if isinstance(placed, str):
                log.info("cluster %s group %s waits: %s", cluster.name, name, placed)
                return
            session.add(placed)
            session.flush()
            log.info("cluster %s: node %s placed (%s)", cluster.name, placed.instance_id, name)

    def _record(
        self,
        session: Session,
        cluster: Cluster,
        seen: dict[str, tuple[InstanceState, bool]],
        now: datetime,
    ) -> tuple[bool, datetime | None] | None:
        """What the nodes' agents said: node statuses, gone nodes' rows and leases
        removed (the capacity lock taken by the release where a node had a lease), the
        cluster's status."""
        busy = False
        for node in service.nodes_of(session, cluster):
            state, alive = seen.get(node.instance_id, ({}, True))
            phase = state.get("phase", "launching")
            if node.shutdown_requested:
                if alive:
                    busy = True
                    continue
                # Gone: its row, its access key, and on demand its lease, go too.
                capacity.release(session, service.node_holder(cluster, node.instance_id))
                cluster_nodes.forget_credentials(session, node)
                session.delete(node)
                continue
            if node.status == FAILURE:
                continue  # failed stays failed, whatever its agent says as it goes
            new, message = _node_status(phase, alive, state)
            if new is not None and new.value != node.status:
                cluster_nodes.set_node_status(node, new, message)
            if NodeStatus(node.status) == NodeStatus.PENDING:
                busy = True
        session.flush()
        nodes = service.nodes_of(session, cluster)
        status = ClusterStatus(cluster.status)
        groups = cluster.spec.get("InstanceGroups", [])
        if status == ClusterStatus.DELETING:
            if not nodes:
                session.delete(cluster)
                log.info("cluster %s deleted", cluster.name)
                return None
            return True, None
        failed = next((n for n in nodes if n.status == NodeStatus.FAILURE.value), None)
        running = sum(1 for n in nodes if n.status == NodeStatus.RUNNING.value)
        if status in (ClusterStatus.CREATING, ClusterStatus.UPDATING):
            wanted = sum(
                int(g["InstanceCount"])
                if status == ClusterStatus.CREATING
                else service.wanted_now(session, g, now)
                for g in groups
            )
            new_status = rules.cluster_status(status, running, wanted, failed is not None)
            if new_status == ClusterStatus.FAILED and failed is not None:
                cluster.failure_message = f"Node {failed.instance_id}: {failed.message}"[:1024]
                busy = True  # its nodes are let go next
            service.set_status(cluster, new_status, now)
        moments = []
        for group in groups:
            if group.get("TrainingPlanArn"):
                blocks = [
                    b for b, _ in service.plan_blocks(session, str(group["TrainingPlanArn"]))
                ]
                moment = rules.next_moment(blocks, now)
                if moment is not None:
                    moments.append(moment)
        return busy, min(moments, default=None)


def _node_status(
    phase: str, alive: bool, state: InstanceState
) -> tuple[NodeStatus | None, str | None]:
    """A live node's status from its agent: Pending until OnCreate succeeded, Running
    while up, Failure when OnCreate failed or the instance died."""
    if phase == "running":
        if alive:
            return NodeStatus.RUNNING, "The node is running"
        return NodeStatus.FAILURE, "The node's instance stopped unexpectedly"
    if phase == "failed":
        return NodeStatus.FAILURE, str(state.get("failure_reason") or "The node failed")
    if phase in ("stopped", "completed"):
        return NodeStatus.FAILURE, "The node's instance stopped unexpectedly"
    if not alive:
        return NodeStatus.FAILURE, "The node's instance died while it was being provisioned"
    if phase == "training":
        return NodeStatus.PENDING, "Running the lifecycle script (OnCreate)"
    return None, None
