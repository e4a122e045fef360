"""Decide whether an access key's policy lets it make this request (SPEC §5.8).

The request is described to the policy as IAM describes it: an action
(`sagemaker:CreateTrainingJob`), the ARN of the resource the request names ("*"
where it names none), and a few condition keys taken from the validated
parameters. A refusal reads like AWS's, naming the action, so a person can see
which permission their key lacks.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from dockyard.domain import arns
from dockyard.domain.policy import ContextValue, Policy, PolicyError, evaluate, parse_policy
from dockyard.services.errors import AccessDeniedException


@lru_cache(maxsize=256)
def _parsed(text: str) -> Policy | str:
    """The policy, or why it is invalid: parsed once per distinct text, not per request."""
    try:
        return parse_policy(text)
    except PolicyError as exc:
        return str(exc)


def resource_arn(service_prefix: str, region: str, account_id: str, params: dict[str, Any]) -> str:
    """The ARN of what the request acts on, as IAM would match it; "*" for none."""
    if service_prefix == "logs":
        group = params.get("logGroupName")
        if not isinstance(group, str):
            identifier = params.get("logGroupIdentifier")
            if isinstance(identifier, str) and identifier.startswith("arn:"):
                return identifier
            group = identifier
        if not isinstance(group, str):
            return "*"
        group_arn = f"arn:aws:logs:{region}:{account_id}:log-group:{group}"
        stream = params.get("logStreamName")
        return f"{group_arn}:log-stream:{stream}" if isinstance(stream, str) else group_arn
    for key in ("ResourceArn", "ReservedCapacityArn", "TrainingPlanArn"):
        if isinstance(params.get(key), str):
            return str(params[key])
    if isinstance(params.get("TrainingJobName"), str):
        return arns.training_job_arn(region, account_id, params["TrainingJobName"])
    if isinstance(params.get("TrainingPlanName"), str):
        return arns.training_plan_arn(region, account_id, params["TrainingPlanName"])
    return "*"


def request_context(region: str, params: dict[str, Any]) -> dict[str, ContextValue]:
    """The condition keys this request supplies; absent ones stay absent (IfExists)."""
    context: dict[str, ContextValue] = {"aws:RequestedRegion": region}
    resource_config = params.get("ResourceConfig")
    if isinstance(resource_config, dict):
        keep_alive = resource_config.get("KeepAlivePeriodInSeconds")
        if keep_alive is not None:
            context["sagemaker:KeepAlivePeriod"] = keep_alive
        instance_types = [resource_config.get("InstanceType")] + [
            group.get("InstanceType")
            for group in resource_config.get("InstanceGroups") or []
            if isinstance(group, dict)
        ]
        present = sorted({t for t in instance_types if isinstance(t, str)})
        if present:
            context["sagemaker:InstanceTypes"] = present
    return context


def authorise(
    policy_text: str | None,
    service_prefix: str,
    operation: str,
    region: str,
    account_id: str,
    params: dict[str, Any],
    access_key_id: str = "",
) -> None:
    """Raise AccessDeniedException unless the key's policy allows the request.

    `service_prefix` is the IAM service prefix, which is the botocore model's
    signing name (sagemaker, logs, servicequotas). A key without a policy may do
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
    resource = resource_arn(service_prefix, region, account_id, params)
    decision = evaluate(policy, action, resource, request_context(region, params))
    if decision.allowed:
        return
    why = (
        f"with an explicit deny in an identity-based policy (statement {decision.statement})"
        if decision.explicit_deny
        else f"because no identity-based policy allows the {action} action"
    )
    raise AccessDeniedException(
        f"User: {user} is not authorized to perform: {action} on resource: {resource} {why}"
    )
