"""SageMaker HyperPod cluster operations: clusters, their instance groups and nodes."""

from __future__ import annotations

from typing import Any

from dockyard.api.context import Handler, RequestContext
from dockyard.services import cluster_nodes, clusters


def create_cluster(ctx: RequestContext, params: dict[str, Any]) -> dict[str, Any]:
    with ctx.db.session() as session:
        result = clusters.create(
            session,
            ctx.clock.now(),
            ctx.account_id,
            ctx.region,
            params,
            ctx.state.s3_store,
            ctx.state.plans,
        )
    ctx.state.control.nudge(first="clusters")  # its nodes are the reconciler's work
    return result


def describe_cluster(ctx: RequestContext, params: dict[str, Any]) -> dict[str, Any]:
    with ctx.db.read_session() as session:
        return clusters.describe(
            session, ctx.clock.now(), ctx.account_id, ctx.region, params["ClusterName"]
        )


def list_clusters(ctx: RequestContext, params: dict[str, Any]) -> dict[str, Any]:
    with ctx.db.read_session() as session:
        return clusters.list_clusters(session, ctx.account_id, ctx.region, params)


def update_cluster(ctx: RequestContext, params: dict[str, Any]) -> dict[str, Any]:
    with ctx.db.session() as session:
        result = clusters.update(
            session,
            ctx.clock.now(),
            ctx.account_id,
            ctx.region,
            params,
            ctx.state.s3_store,
            ctx.state.plans,
        )
    ctx.state.control.nudge(first="clusters")
    return result


def delete_cluster(ctx: RequestContext, params: dict[str, Any]) -> dict[str, Any]:
    with ctx.db.session() as session:
        result = clusters.delete(
            session, ctx.clock.now(), ctx.account_id, ctx.region, params["ClusterName"]
        )
    ctx.state.control.nudge(first="clusters")
    return result


def list_cluster_nodes(ctx: RequestContext, params: dict[str, Any]) -> dict[str, Any]:
    with ctx.db.read_session() as session:
        return cluster_nodes.list_nodes(session, ctx.account_id, ctx.region, params)


def describe_cluster_node(ctx: RequestContext, params: dict[str, Any]) -> dict[str, Any]:
    with ctx.db.read_session() as session:
        return cluster_nodes.describe_node(session, ctx.account_id, ctx.region, params)


def batch_delete_cluster_nodes(ctx: RequestContext, params: dict[str, Any]) -> dict[str, Any]:
    with ctx.db.session() as session:
        result = cluster_nodes.batch_delete_nodes(session, ctx.account_id, ctx.region, params)
    ctx.state.control.nudge(first="clusters")
    return result


HANDLERS: dict[str, Handler] = {
    "CreateCluster": create_cluster,
    "DescribeCluster": describe_cluster,
    "ListClusters": list_clusters,
    "UpdateCluster": update_cluster,
    "DeleteCluster": delete_cluster,
    "ListClusterNodes": list_cluster_nodes,
    "DescribeClusterNode": describe_cluster_node,
    "BatchDeleteClusterNodes": batch_delete_cluster_nodes,
}
