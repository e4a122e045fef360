"""Decide whether an access key's policy lets it make this request (spec §5.8).

The request is described to the policy as IAM describes it: an action
(`sagemaker:CreateTrainingJob`), the ARN of every resource the request names ("*"
where it names none), and a few condition keys taken from the validated parameters.
Every resource is checked, whichever form of the request names it - a log group by name
or by ARN (`logGroupIdentifier`), a cluster by name (its ARN is looked up: it holds the
cluster's id, not its name) or by ARN, each named log stream - and the request is
allowed only if every one is (issue 25: a stream-level Deny held for `logGroupName` and
not for `logGroupIdentifier`, and a Deny on `cluster/*` did nothing, cluster operations
being checked against "*"). `sagemaker:InstanceTypes` holds every instance type the
request names, wherever it names one (a job's ResourceConfig, a cluster's instance
groups, an offering search, the offering a plan is bought from). A refusal reads like
AWS's, naming the action and the resource, so a person can see which permission their
key lacks.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from functools import lru_cache
from typing import Any, Protocol

from dockyard.domain import arns
from dockyard.domain.policy import ContextValue, Policy, PolicyError, evaluate, parse_policy
from dockyard.services.errors import AccessDeniedException

# How deep `_named_instance_types` looks into a request (the models' shapes nest a few
# levels; the validated request is bounded by them anyway).
_MAX_DEPTH = 12


class Lookup(Protocol):
    """What describing a request needs from the database: asked only for a key with a
    policy, and only for what the request names."""

    def cluster_arn(self, name: str) -> str | None:
        """The ARN of the caller's cluster of that name, None if it has none."""

    def offering_instance_types(self, offering_id: str) -> list[str]:
        """The instance types of the caller's offering of that id ([] if none)."""


@lru_cache(maxsize=256)
def _parsed(text: str) -> Policy | str:
    """The policy, or why it is invalid: parsed once per distinct text, not per request."""
    try:
        return parse_policy(text)
    except PolicyError as exc:
        return str(exc)


def log_group_arn(region: str, account_id: str, params: dict[str, Any]) -> str | None:
    """The ARN of the log group a Logs request names, by name or by ARN (as the service
    reads `logGroupIdentifier`: an ARN, optionally ending `:*`, or a name)."""
    group = params.get("logGroupName")
    if not isinstance(group, str):
        group = params.get("logGroupIdentifier")
    if not isinstance(group, str):
        return None
    if group.startswith("arn:"):
        return group.removesuffix(":*")
    return f"arn:aws:logs:{region}:{account_id}:log-group:{group}"


def log_stream_arn(group_arn: str, stream: str) -> str:
    return f"{group_arn}:log-stream:{stream}"


def _logs_arns(region: str, account_id: str, params: dict[str, Any]) -> list[str]:
    group = log_group_arn(region, account_id, params)
    if group is None:
        return []
    stream = params.get("logStreamName")
    if isinstance(stream, str):
        # GetLogEvents acts on the stream (IAM's resource for it is the log stream).
        return [log_stream_arn(group, stream)]
    streams = params.get("logStreamNames")
    named = [s for s in streams if isinstance(s, str)] if isinstance(streams, list) else []
    return [group] + [log_stream_arn(group, name) for name in dict.fromkeys(named)]


def _sagemaker_arns(
    region: str, account_id: str, params: dict[str, Any], lookup: Lookup | None
) -> list[str]:
    found: list[str] = []
    for key in ("ResourceArn", "ReservedCapacityArn", "TrainingPlanArn"):
        if isinstance(params.get(key), str):
            found.append(str(params[key]))
    if isinstance(params.get("TrainingJobName"), str):
        found.append(arns.training_job_arn(region, account_id, params["TrainingJobName"]))
    if isinstance(params.get("TrainingPlanName"), str):
        found.append(arns.training_plan_arn(region, account_id, params["TrainingPlanName"]))
    cluster = params.get("ClusterName")
    if isinstance(cluster, str):
        if cluster.startswith("arn:"):
            found.append(cluster)
        else:
            # A cluster's ARN holds its id: looked up. One the account does not have (yet:
            # CreateCluster) is any cluster of the account's.
            known = lookup.cluster_arn(cluster) if lookup is not None else None
            found.append(known or arns.arn(region, account_id, "cluster", "*"))
    # The plans a job or an instance group is to run on.
    resource_config = params.get("ResourceConfig")
    if isinstance(resource_config, dict) and isinstance(
        resource_config.get("TrainingPlanArn"), str
    ):
        found.append(resource_config["TrainingPlanArn"])
    for group in _dicts(params.get("InstanceGroups")) + _dicts(
        params.get("RestrictedInstanceGroups")
    ):
        if isinstance(group.get("TrainingPlanArn"), str):
            found.append(group["TrainingPlanArn"])
    return found


def _ecr_arns(region: str, account_id: str, operation: str, params: dict[str, Any]) -> list[str]:
    """A repository by name, each of the names, or by ARN (the tag operations). A listing
    of every repository acts on all of the account's (`repository/*`); a login
    (GetAuthorizationToken) on none ("*"), as IAM documents it."""
    if isinstance(params.get("resourceArn"), str):
        return [params["resourceArn"]]
    names = params.get("repositoryNames")
    named = [n for n in names if isinstance(n, str)] if isinstance(names, list) else []
    if isinstance(params.get("repositoryName"), str):
        named.append(params["repositoryName"])
    if not named and operation == "DescribeRepositories":
        named = ["*"]
    return [arns.repository_arn(region, account_id, name) for name in named]


def _dicts(value: Any) -> list[dict[str, Any]]:
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def resource_arns(
    service_prefix: str,
    region: str,
    account_id: str,
    params: dict[str, Any],
    lookup: Lookup | None = None,
    operation: str = "",
) -> list[str]:
    """The ARN of every resource the request acts on, as IAM would match them; ["*"]
    for none."""
    if service_prefix == "logs":
        found = _logs_arns(region, account_id, params)
    elif service_prefix == "ecr":
        found = _ecr_arns(region, account_id, operation, params)
    else:
        found = _sagemaker_arns(region, account_id, params, lookup)
    return list(dict.fromkeys(found)) or ["*"]


def _named_instance_types(value: Any, depth: int = 0) -> Iterator[str]:
    """Every `InstanceType` (and `InstanceTypes` list) anywhere in a request."""
    if depth > _MAX_DEPTH:
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "InstanceType" and isinstance(item, str):
                yield item
            elif key == "InstanceTypes" and isinstance(item, list):
                yield from (t for t in item if isinstance(t, str))
            else:
                yield from _named_instance_types(item, depth + 1)
    elif isinstance(value, list):
        for item in value:
            yield from _named_instance_types(item, depth + 1)


def request_context(
    region: str, params: dict[str, Any], operation: str = "", lookup: Lookup | None = None
) -> dict[str, ContextValue]:
    """The condition keys this request supplies; absent ones stay absent (IfExists)."""
    context: dict[str, ContextValue] = {"aws:RequestedRegion": region}
    resource_config = params.get("ResourceConfig")
    if isinstance(resource_config, dict):
        keep_alive = resource_config.get("KeepAlivePeriodInSeconds")
        if keep_alive is not None:
            context["sagemaker:KeepAlivePeriod"] = keep_alive
    instance_types = set(_named_instance_types(params))
    offering = params.get("TrainingPlanOfferingId")
    if operation == "CreateTrainingPlan" and isinstance(offering, str) and lookup is not None:
        # What the plan reserves is the offering's: the request names it by id only.
        instance_types.update(lookup.offering_instance_types(offering))
    if instance_types:
        context["sagemaker:InstanceTypes"] = sorted(instance_types)
    return context


def authorise(
    policy_text: str | None,
    service_prefix: str,
    operation: str,
    region: str,
    account_id: str,
    params: dict[str, Any],
    access_key_id: str = "",
    lookup: Lookup | None = None,
    resources: Sequence[str] | None = None,
) -> None:
    """Raise AccessDeniedException unless the key's policy allows the request on every
    resource it names (`resources`, when given, instead of those its parameters name).

    `service_prefix` is the IAM service prefix, which is the botocore model's
    signing name (sagemaker, logs, servicequotas, ecr). A key without a policy may do
    everything in its account.
    """
    if policy_text is None:
        return
    action = f"{service_prefix}:{operation}"
    user = f"arn:aws:iam::{account_id}:user/{access_key_id or 'unknown'}"
    policy = _parsed(policy_text)
    if isinstance(policy, str):
        # Keys are validated when created, so this means the stored text was edited.
        raise AccessDeniedException(
            f"User: {user} is not authorized to perform: {action} because the access key's "
            f"policy is invalid ({policy}); create a new key with a valid policy"
        )
    context = request_context(region, params, operation, lookup)
    named = (
        list(resources or ["*"])
        if resources is not None
        else resource_arns(service_prefix, region, account_id, params, lookup, operation)
    )
    for resource in named:
        decision = evaluate(policy, action, resource, context)
        if decision.allowed:
            continue
        why = (
            f"with an explicit deny in an identity-based policy (statement {decision.statement})"
            if decision.explicit_deny
            else f"because no identity-based policy allows the {action} action"
        )
        raise AccessDeniedException(
            f"User: {user} is not authorized to perform: {action} on resource: {resource} {why}"
        )
