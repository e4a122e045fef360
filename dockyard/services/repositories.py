"""ECR repositories: per account and region, the names the embedded registry serves.

This is the first step of issue 27 (docs/images.md): repositories exist and are
described as ECR describes them, with the URI the registry will serve them at, but
no image can be pushed to one yet. So a repository is never "not empty" and
DeleteRepository needs no `force` (RepositoryNotEmptyException cannot arise yet).

ECR's registry id is the account id. dockyard serves each account its own registry
only (no repository policies yet), so a request naming another account's registry is
refused as such, before anything is looked up, rather than found or not found.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from dockyard.domain import arns, registry_tokens
from dockyard.domain import tags as tag_rules
from dockyard.services.errors import (
    InvalidParameterException,
    InvalidTagParameterException,
    RepositoryAlreadyExistsException,
    RepositoryNotFoundException,
    TooManyTagsException,
    ValidationException,
)
from dockyard.services.pagination import decode_token, page
from dockyard.store.scoped import owned
from dockyard.store.tables import Repository

# ECR's default page of DescribeRepositories, and its per-resource tag limit.
DEFAULT_MAX_RESULTS = 100
MAX_TAGS = tag_rules.MAX_TAGS
_MAX_TAG_KEY = 128
_MAX_TAG_VALUE = 256
# What ECR answers when a request leaves them out.
_DEFAULT_MUTABILITY = "MUTABLE"
_DEFAULT_ENCRYPTION = {"encryptionType": "AES256"}
_WILDCARD_HOSTS = ("", "0.0.0.0", "::")


@dataclass(frozen=True)
class Registry:
    """The registry's address as clients reach it: `url` (proxyEndpoint) and `host`
    (`host:port`, the first part of every repository URI)."""

    url: str
    host: str

    @classmethod
    def at(cls, registry_url: str, bind_host: str, port: int) -> Registry:
        """From the `registry_url` setting, or else the address the API listens on
        (loopback where it listens on every address: the one address sure to work)."""
        if not registry_url:
            host = "127.0.0.1" if bind_host in _WILDCARD_HOSTS else bind_host
            if ":" in host:  # an IPv6 literal
                host = f"[{host}]"
            registry_url = f"http://{host}:{port}"
        url = registry_url.rstrip("/")
        return cls(url, urlsplit(url).netloc)

    def uri(self, account_id: str, name: str) -> str:
        # The account is the first path component, so one registry host serves every
        # account's repositories without collisions (docs/images.md).
        return f"{self.host}/{account_id}/{name}"


def _own_registry(account_id: str, registry_id: str | None) -> None:
    if registry_id is not None and registry_id != account_id:
        raise InvalidParameterException(
            f"dockyard serves each account its own registry only: registryId {registry_id} "
            f"is not the caller's account {account_id}; leave registryId out"
        )


def _not_found(account_id: str, name: str) -> RepositoryNotFoundException:
    return RepositoryNotFoundException(
        f"The repository with name '{name}' does not exist in the registry with id '{account_id}'"
    )


def _describe(row: Repository, registry: Registry) -> dict[str, Any]:
    described: dict[str, Any] = {
        "repositoryArn": row.arn,
        "registryId": row.account_id,
        "repositoryName": row.name,
        "repositoryUri": registry.uri(row.account_id, row.name),
        "createdAt": row.created_at,
        "imageTagMutability": row.image_tag_mutability,
        "imageScanningConfiguration": {"scanOnPush": row.scan_on_push},
        "encryptionConfiguration": row.spec.get("encryptionConfiguration", _DEFAULT_ENCRYPTION),
    }
    filters = row.spec.get("imageTagMutabilityExclusionFilters")
    if filters:
        described["imageTagMutabilityExclusionFilters"] = filters
    return described


def _checked_tags(tags: Sequence[Mapping[str, str]]) -> list[dict[str, str]]:
    checked: dict[str, str] = {}
    for tag in tags:
        key, value = tag["Key"], tag["Value"]
        if not 1 <= len(key) <= _MAX_TAG_KEY or len(value) > _MAX_TAG_VALUE:
            raise InvalidTagParameterException(
                f"A tag key must be 1-{_MAX_TAG_KEY} characters and a value at most "
                f"{_MAX_TAG_VALUE} (got key {key[:_MAX_TAG_KEY]!r})"
            )
        if key.lower().startswith("aws:"):
            raise InvalidTagParameterException(
                f"Tag keys starting with 'aws:' are reserved (got {key!r})"
            )
        checked[key] = value
    return [{"Key": k, "Value": v} for k, v in checked.items()]


def _at_most(tags: list[dict[str, str]]) -> list[dict[str, str]]:
    if len(tags) > MAX_TAGS:
        raise TooManyTagsException(
            f"A repository can have at most {MAX_TAGS} tags (this would give it {len(tags)})"
        )
    return tags


def _encryption(params: Mapping[str, Any]) -> dict[str, Any]:
    encryption = params.get("encryptionConfiguration") or _DEFAULT_ENCRYPTION
    if encryption["encryptionType"] != "AES256":
        raise InvalidParameterException(
            "dockyard has no KMS: encryptionConfiguration.encryptionType must be AES256 "
            f"(got {encryption['encryptionType']}); leave encryptionConfiguration out"
        )
    return {"encryptionType": "AES256"}


def create(
    session: Session,
    now: datetime,
    registry: Registry,
    account_id: str,
    region: str,
    params: Mapping[str, Any],
) -> dict[str, Any]:
    _own_registry(account_id, params.get("registryId"))
    name = params["repositoryName"]
    exists = RepositoryAlreadyExistsException(
        f"The repository with name '{name}' already exists in the registry with id '{account_id}'"
    )
    if _find(session, account_id, region, name) is not None:
        raise exists
    spec: dict[str, Any] = {"encryptionConfiguration": _encryption(params)}
    if params.get("imageTagMutabilityExclusionFilters"):
        spec["imageTagMutabilityExclusionFilters"] = params["imageTagMutabilityExclusionFilters"]
    scanning = params.get("imageScanningConfiguration") or {}
    row = Repository(
        account_id=account_id,
        region=region,
        name=name,
        arn=arns.repository_arn(region, account_id, name),
        image_tag_mutability=params.get("imageTagMutability") or _DEFAULT_MUTABILITY,
        scan_on_push=bool(scanning.get("scanOnPush", False)),
        spec=spec,
        tags={"Tags": _at_most(_checked_tags(params.get("tags") or []))},
        created_at=now,
    )
    session.add(row)
    try:
        session.flush()
    except IntegrityError as exc:  # created at the same moment by another request
        raise exists from exc
    return {"repository": _describe(row, registry)}


def _find(session: Session, account_id: str, region: str, name: str) -> Repository | None:
    return session.scalar(owned(Repository, account_id, region).where(Repository.name == name))


def describe(
    session: Session, registry: Registry, account_id: str, region: str, params: Mapping[str, Any]
) -> dict[str, Any]:
    _own_registry(account_id, params.get("registryId"))
    names = params.get("repositoryNames")
    if names:
        # As ECR: named repositories are answered whole (no pages), and one missing
        # fails the call, naming it.
        if params.get("maxResults") is not None or params.get("nextToken"):
            raise InvalidParameterException(
                "maxResults and nextToken cannot be used with repositoryNames"
            )
        named = []
        for name in dict.fromkeys(names):
            row = _find(session, account_id, region, name)
            if row is None:
                raise _not_found(account_id, name)
            named.append(row)
        return {"repositories": [_describe(r, registry) for r in named]}
    max_results = params.get("maxResults") or DEFAULT_MAX_RESULTS
    query = {"registryId": account_id}
    try:
        offset = decode_token(params.get("nextToken"), query)
    except ValidationException as exc:
        raise InvalidParameterException(exc.message) from exc
    found = session.scalars(
        owned(Repository, account_id, region)
        .order_by(Repository.name)
        .offset(offset)
        .limit(max_results + 1)
    ).all()
    rows, token = page(found, offset, max_results, query)
    result: dict[str, Any] = {"repositories": [_describe(r, registry) for r in rows]}
    if token:
        result["nextToken"] = token
    return result


def delete(
    session: Session, registry: Registry, account_id: str, region: str, params: Mapping[str, Any]
) -> dict[str, Any]:
    _own_registry(account_id, params.get("registryId"))
    name = params["repositoryName"]
    row = _find(session, account_id, region, name)
    if row is None:
        raise _not_found(account_id, name)
    # When images can be pushed, a repository holding any is refused here without
    # `force` (RepositoryNotEmptyException); none can be yet.
    described = _describe(row, registry)
    session.delete(row)
    session.flush()
    return {"repository": described}


def _by_arn(session: Session, account_id: str, region: str, arn: str) -> Repository:
    prefix = f"arn:aws:ecr:{region}:{account_id}:repository/"
    if not arn.startswith("arn:aws:ecr:") or ":repository/" not in arn:
        raise InvalidParameterException(
            f"Invalid parameter at 'resourceArn' failed to satisfy constraint: 'Invalid ARN' "
            f"(an ECR repository's ARN is arn:aws:ecr:<region>:<account>:repository/<name>; "
            f"got {arn[:300]!r})"
        )
    name = arn.split(":repository/", 1)[1]
    # Another account's or region's ARN is not found, exactly as a missing one.
    row = _find(session, account_id, region, name) if arn.startswith(prefix) else None
    if row is None:
        raise _not_found(arn.split(":")[4] or account_id, name)
    return row


def list_tags(session: Session, account_id: str, region: str, arn: str) -> dict[str, Any]:
    return {"tags": list(_by_arn(session, account_id, region, arn).tags.get("Tags", []))}


def tag(
    session: Session, account_id: str, region: str, arn: str, tags: Sequence[Mapping[str, str]]
) -> dict[str, Any]:
    row = _by_arn(session, account_id, region, arn)
    # JSON columns are replaced whole so the ORM sees the change.
    row.tags = {"Tags": _at_most(tag_rules.merged(row.tags.get("Tags", []), _checked_tags(tags)))}
    session.flush()
    return {}


def untag(
    session: Session, account_id: str, region: str, arn: str, keys: Sequence[str]
) -> dict[str, Any]:
    row = _by_arn(session, account_id, region, arn)
    row.tags = {"Tags": tag_rules.without(row.tags.get("Tags", []), keys)}
    session.flush()
    return {}


def authorization_data(
    token_key: bytes,
    registry: Registry,
    account_id: str,
    access_key_id: str,
    now: datetime,
    registry_ids: Sequence[str] | None,
) -> dict[str, Any]:
    """GetAuthorizationToken: one login for the caller's own registry (one entry per
    registry id named, as ECR answers; each must be the caller's)."""
    for registry_id in registry_ids or ():
        _own_registry(account_id, registry_id)
    password, expires_at = registry_tokens.issue(token_key, account_id, access_key_id, now)
    data = {
        "authorizationToken": registry_tokens.authorization_token(password),
        "expiresAt": expires_at,
        "proxyEndpoint": registry.url,
    }
    return {"authorizationData": [dict(data) for _ in (registry_ids or [account_id])]}
