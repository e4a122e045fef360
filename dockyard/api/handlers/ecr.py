"""ECR operations (`AmazonEC2ContainerRegistry_V20150921.*`): the caller's repositories and
logins to the embedded registry (docs/images.md). Image operations are not built yet and
answer the dispatcher's NotImplementedException."""

from __future__ import annotations

from typing import Any

from dockyard.api.context import Handler, RequestContext
from dockyard.domain.registry_tokens import REGISTRY_TOKEN_PURPOSE
from dockyard.services import repositories
from dockyard.services.repositories import Registry


def _registry(ctx: RequestContext) -> Registry:
    settings = ctx.state.settings
    return Registry.at(settings.registry_url, settings.host, settings.port)


def create_repository(ctx: RequestContext, params: dict[str, Any]) -> dict[str, Any]:
    with ctx.db.session() as session:
        return repositories.create(
            session, ctx.clock.now(), _registry(ctx), ctx.account_id, ctx.region, params
        )


def describe_repositories(ctx: RequestContext, params: dict[str, Any]) -> dict[str, Any]:
    with ctx.db.read_session() as session:
        return repositories.describe(session, _registry(ctx), ctx.account_id, ctx.region, params)


def delete_repository(ctx: RequestContext, params: dict[str, Any]) -> dict[str, Any]:
    with ctx.db.session() as session:
        return repositories.delete(session, _registry(ctx), ctx.account_id, ctx.region, params)


def get_authorization_token(ctx: RequestContext, params: dict[str, Any]) -> dict[str, Any]:
    return repositories.authorization_data(
        ctx.state.box.derive_key(REGISTRY_TOKEN_PURPOSE),
        _registry(ctx),
        ctx.account_id,
        ctx.access_key_id,
        ctx.clock.now(),
        params.get("registryIds"),
    )


def list_tags_for_resource(ctx: RequestContext, params: dict[str, Any]) -> dict[str, Any]:
    with ctx.db.read_session() as session:
        return repositories.list_tags(session, ctx.account_id, ctx.region, params["resourceArn"])


def tag_resource(ctx: RequestContext, params: dict[str, Any]) -> dict[str, Any]:
    with ctx.db.session() as session:
        return repositories.tag(
            session, ctx.account_id, ctx.region, params["resourceArn"], params["tags"]
        )


def untag_resource(ctx: RequestContext, params: dict[str, Any]) -> dict[str, Any]:
    with ctx.db.session() as session:
        return repositories.untag(
            session, ctx.account_id, ctx.region, params["resourceArn"], params["tagKeys"]
        )


HANDLERS: dict[str, Handler] = {
    "CreateRepository": create_repository,
    "DescribeRepositories": describe_repositories,
    "DeleteRepository": delete_repository,
    "GetAuthorizationToken": get_authorization_token,
    "ListTagsForResource": list_tags_for_resource,
    "TagResource": tag_resource,
    "UntagResource": untag_resource,
}
