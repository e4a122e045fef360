"""STS and IAM, as far as the SageMaker SDK asks them: who am I, and may this role act.

dockyard has accounts and access keys, not IAM users and roles. A key is presented
as the IAM user `arn:aws:iam::<account>:user/<access key id>`. Any role name of the
caller's account exists, trusting sagemaker.amazonaws.com (a job's RoleArn is
recorded, never assumed). SimulatePrincipalPolicy answers from the caller's key: a
key without a policy may do everything in its account, one with a policy what the
policy allows (the same evaluation every request gets).
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from dockyard.api.authorise import request_context
from dockyard.api.context import Handler, RequestContext
from dockyard.api.untrusted import ascii_int
from dockyard.domain.policy import PolicyError, evaluate, parse_policy
from dockyard.services.errors import ServiceError

TRUST_POLICY = {
    "Version": "2012-10-17",
    "Statement": [
        {
            "Effect": "Allow",
            "Principal": {"Service": "sagemaker.amazonaws.com"},
            "Action": "sts:AssumeRole",
        }
    ],
}
# When dockyard's roles were "made": one fixed instant, so GetRole is stable.
ROLES_CREATED = datetime(2026, 1, 1, tzinfo=UTC)


def user_arn(ctx: RequestContext) -> str:
    return f"arn:aws:iam::{ctx.account_id}:user/{ctx.access_key_id}"


def get_caller_identity(ctx: RequestContext, params: dict[str, Any]) -> dict[str, Any]:
    return {"UserId": ctx.access_key_id, "Account": ctx.account_id, "Arn": user_arn(ctx)}


def get_role(ctx: RequestContext, params: dict[str, Any]) -> dict[str, Any]:
    name = params["RoleName"]
    digest = hashlib.sha256(f"{ctx.account_id}/{name}".encode()).hexdigest().upper()
    return {
        "Role": {
            "Path": "/",
            "RoleName": name,
            "RoleId": "AROA" + digest[:17],
            "Arn": f"arn:aws:iam::{ctx.account_id}:role/{name}",
            "CreateDate": ROLES_CREATED,
            # IAM returns the document URL-encoded.
            "AssumeRolePolicyDocument": quote(json.dumps(TRUST_POLICY)),
            "MaxSessionDuration": 3600,
        }
    }


class InvalidInput(ServiceError):
    code = "InvalidInput"  # IAM's code for a request it cannot read


# IAM's page size when MaxItems is not given. A request names actions and resources as
# two lists, answered for each pair: without pages, a 4 MB body of a few thousand of
# each asks for millions of evaluations and results at once.
DEFAULT_MAX_ITEMS = 100


def simulate_principal_policy(ctx: RequestContext, params: dict[str, Any]) -> dict[str, Any]:
    policy = None
    if ctx.policy is not None:
        try:
            policy = parse_policy(ctx.policy)
        except PolicyError:
            policy = None  # an edited, invalid policy allows nothing
    context = request_context(ctx.region, {})
    actions = list(params["ActionNames"])
    resources = list(params.get("ResourceArns") or ["*"])
    total = len(actions) * len(resources)
    start = ascii_int(str(params.get("Marker") or "0"), 0, total)
    if start is None:  # not ASCII digits ("²" passes isdigit()), or past the end
        raise InvalidInput("Marker is not one this operation returned for these actions")
    stop = min(total, start + int(params.get("MaxItems") or DEFAULT_MAX_ITEMS))
    results = []
    for pair in range(start, stop):  # each (action, resource) pair, actions first
        action, resource = actions[pair // len(resources)], resources[pair % len(resources)]
        if ctx.policy is None:
            decision = "allowed"
        elif policy is None:
            decision = "implicitDeny"
        else:
            found = evaluate(policy, action, resource, context)
            decision = (
                "allowed"
                if found.allowed
                else "explicitDeny"
                if found.explicit_deny
                else "implicitDeny"
            )
        results.append(
            {"EvalActionName": action, "EvalResourceName": resource, "EvalDecision": decision}
        )
    page: dict[str, Any] = {"EvaluationResults": results, "IsTruncated": stop < total}
    if stop < total:
        page["Marker"] = str(stop)
    return page


STS_HANDLERS: dict[str, Handler] = {"GetCallerIdentity": get_caller_identity}
IAM_HANDLERS: dict[str, Handler] = {
    "GetRole": get_role,
    "SimulatePrincipalPolicy": simulate_principal_policy,
}
