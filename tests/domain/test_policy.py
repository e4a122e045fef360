"""Access-key policies: IAM's grammar refused clearly when wrong, and IAM's evaluation."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dockyard.domain.policy import (
    ContextValue,
    Decision,
    PolicyError,
    evaluate,
    parse_policy,
)

SEED = (
    '{"Version":"2012-10-17","Statement":[{"Sid":"EnforceKeepAlivePeriodLimit",'
    '"Effect":"Allow","Action":["sagemaker:CreateTrainingJob"],"Resource":"*",'
    '"Condition":{"NumericLessThanIfExists":{"sagemaker:KeepAlivePeriod":1800}}}]}'
)
JOB = "arn:aws:sagemaker:us-east-1:123456789012:training-job/job-1"
CREATE = "sagemaker:CreateTrainingJob"


def policy(*statements: dict[str, Any], version: str = "2012-10-17") -> str:
    return json.dumps({"Version": version, "Statement": list(statements)})


def allow(**extra: Any) -> dict[str, Any]:
    return {"Effect": "Allow", "Action": "*", "Resource": "*", **extra}


def decide(
    text: str,
    action: str = CREATE,
    resource: str = JOB,
    context: dict[str, ContextValue] | None = None,
) -> Decision:
    return evaluate(parse_policy(text), action, resource, context or {})


def condition_holds(operator: str, key: str, value: Any, context: dict[str, ContextValue]) -> bool:
    text = policy(allow(Condition={operator: {key: value}}))
    return decide(text, context=context).allowed


# --- the seed's example --------------------------------------------------------------


@pytest.mark.parametrize(
    ("context", "allowed"),
    [
        ({"sagemaker:KeepAlivePeriod": 3600}, False),
        ({"sagemaker:KeepAlivePeriod": 1800}, False),
        ({"sagemaker:KeepAlivePeriod": 1200}, True),
        ({}, True),
    ],
)
def test_seed_policy_limits_keep_alive(context: dict[str, ContextValue], allowed: bool) -> None:
    assert decide(SEED, context=context).allowed is allowed


def test_seed_policy_allows_nothing_else() -> None:
    decision = decide(SEED, action="sagemaker:ListTrainingJobs", resource="*")
    assert decision == Decision(False, "no statement allows it")


def test_allow_names_its_statement() -> None:
    decision = decide(SEED)
    assert decision.allowed and decision.statement == "EnforceKeepAlivePeriodLimit"


def test_normalised_text_is_compact_and_round_trips() -> None:
    spaced = json.dumps(json.loads(SEED), indent=4)
    parsed = parse_policy(spaced)
    assert parsed.text == SEED
    assert parse_policy(parsed.text).text == SEED


# --- parse errors: one per kind ----------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", "not valid JSON"),
        ('["Version"]', "must be a JSON object"),
        ('{"Statement": []}', "no Version"),
        ('{"Version": "2020-01-01", "Statement": []}', 'Version must be "2012-10-17"'),
        ('{"Version": "2012-10-17"}', "no Statement"),
        ('{"Version": "2012-10-17", "Statement": "x"}', "Statement must be an object"),
        ('{"Version": "2012-10-17", "Statement": []}', "at least one statement"),
        ('{"Version": "2012-10-17", "Statement": [1]}', "statement 1 must be an object"),
        ('{"Version": "2012-10-17", "Statement": [], "Extra": 1}', "unknown top-level"),
        (policy({"Action": "*", "Resource": "*"}), 'Effect must be "Allow" or "Deny"'),
        (policy(allow(Effect="allow")), 'Effect must be "Allow" or "Deny" (got "allow")'),
        (policy({"Effect": "Allow", "Resource": "*"}), "exactly one of Action or NotAction"),
        (policy(allow(NotAction="s3:*")), "it has both"),
        (policy({"Effect": "Allow", "Action": "*"}), "exactly one of Resource or NotResource"),
        (policy(allow(Action="CreateTrainingJob")), "not of the form service:Operation"),
        (policy(allow(Action=[])), "non-empty list"),
        (policy(allow(Action=["sagemaker:*", 3])), "non-empty string"),
        (policy(allow(Resource="training-job/x")), 'must be "*" or an ARN'),
        (policy(allow(Principal="*")), "Principal is not allowed"),
        (policy(allow(Sid="has space")), "Sid must contain only letters and digits"),
        (policy(allow(Sid="A"), allow(Sid="A")), "'A' is repeated"),
        (policy(allow(Condition=[])), "Condition must be an object"),
        (policy(allow(Condition={"DateLessThan": {"a": "1"}})), "'DateLessThan'"),
        (policy(allow(Condition={"NullIfExists": {"a": "true"}})), "Null takes neither"),
        (policy(allow(Condition={"Sometimes:StringLike": {"a": "x"}})), "qualifier 'Sometimes'"),
        (policy(allow(Condition={"StringEquals": "x"})), "must map condition keys"),
        (policy(allow(Condition={"StringEquals": {"a": []}})), "at least one value for a"),
        (policy(allow(Condition={"StringEquals": {"a": None}})), "must be a string"),
        (policy(allow(Condition={"NumericLessThan": {"a": "ten"}})), "must be a number"),
        (policy(allow(Condition={"NumericLessThan": {"a": True}})), "must be a number"),
        (policy(allow(Condition={"Bool": {"a": "yes"}})), "must be true or false"),
        (policy(allow(Unknown=1)), "unknown element 'Unknown'"),
    ],
)
def test_parse_errors_say_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(PolicyError) as caught:
        parse_policy(text)
    assert message in str(caught.value)


def test_error_names_the_statement_by_sid() -> None:
    with pytest.raises(PolicyError, match=r"statement 2 \(Second\): Effect"):
        parse_policy(policy(allow(), {"Sid": "Second", "Action": "*", "Resource": "*"}))


def test_both_versions_and_a_single_statement_object_are_accepted() -> None:
    for version in ("2012-10-17", "2008-10-17"):
        text = json.dumps({"Version": version, "Statement": allow()})
        assert decide(text).allowed


# --- actions and resources ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "action", "matches"),
    [
        ("*", CREATE, True),
        ("sagemaker:*", CREATE, True),
        ("sagemaker:Create*", CREATE, True),
        ("SageMaker:createtrainingjob", CREATE, True),
        ("sagemaker:Create?rainingJob", CREATE, True),
        ("sagemaker:Create?Job", CREATE, False),
        ("sagemaker:Describe*", CREATE, False),
        ("logs:*", CREATE, False),
        ("*:CreateTrainingJob", CREATE, True),
    ],
)
def test_action_wildcards_match_case_insensitively(
    pattern: str, action: str, matches: bool
) -> None:
    assert decide(policy(allow(Action=pattern)), action=action).allowed is matches


@pytest.mark.parametrize(
    ("pattern", "matches"),
    [
        ("*", True),
        ("arn:aws:sagemaker:*:*:training-job/*", True),
        ("arn:aws:sagemaker:us-east-1:123456789012:training-job/job-?", True),
        ("arn:aws:sagemaker:us-east-1:123456789012:training-job/JOB-1", False),
        ("arn:aws:sagemaker:*:*:training-plan/*", False),
    ],
)
def test_resource_wildcards_match_case_sensitively(pattern: str, matches: bool) -> None:
    assert decide(policy(allow(Resource=pattern))).allowed is matches


def test_not_action_allows_everything_but_the_listed_actions() -> None:
    text = policy({"Effect": "Allow", "NotAction": "sagemaker:Delete*", "Resource": "*"})
    assert decide(text).allowed
    assert not decide(text, action="sagemaker:DeleteTrainingJob").allowed


def test_not_resource_applies_everywhere_but_the_listed_resources() -> None:
    text = policy({"Effect": "Allow", "Action": "*", "NotResource": "arn:*:*:*:*:training-job/j*"})
    assert decide(text, resource="*").allowed
    assert not decide(text).allowed


def test_explicit_deny_beats_allow() -> None:
    text = policy(
        allow(), {"Sid": "NoDeletes", "Effect": "Deny", "Action": "*:Delete*", "Resource": "*"}
    )
    assert decide(text).allowed
    decision = decide(text, action="sagemaker:DeleteTrainingJob")
    assert decision == Decision(
        False, "explicitly denied by statement NoDeletes", True, "NoDeletes"
    )


def test_unnamed_statements_are_numbered() -> None:
    text = policy(allow(), {"Effect": "Deny", "Action": "*", "Resource": "*"})
    assert decide(text).reason == "explicitly denied by statement #2"


def test_deny_that_does_not_match_leaves_the_allow() -> None:
    text = policy(allow(), {"Effect": "Deny", "Action": "logs:*", "Resource": "*"})
    assert decide(text).allowed


def test_implicit_deny_when_no_allow_matches() -> None:
    text = policy(allow(Action="logs:*"))
    assert decide(text) == Decision(False, "no statement allows it")


# --- condition operators --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("operator", "value", "context_value", "holds"),
    [
        ("NumericEquals", 5, 5, True),
        ("NumericEquals", "5.0", 5, True),
        ("NumericEquals", 5, 6, False),
        ("NumericNotEquals", 5, 6, True),
        ("NumericNotEquals", 5, 5, False),
        ("NumericLessThan", 10, 9, True),
        ("NumericLessThan", 10, 10, False),
        ("NumericLessThanEquals", 10, 10, True),
        ("NumericLessThanEquals", 10, 11, False),
        ("NumericGreaterThan", 10, 11, True),
        ("NumericGreaterThan", 10, 10, False),
        ("NumericGreaterThanEquals", 10, 10, True),
        ("NumericGreaterThanEquals", 10, 9, False),
        ("NumericLessThan", 10, "9", True),
        ("NumericLessThan", 10, "nine", False),
        ("NumericNotEquals", 10, "nine", False),
        ("NumericLessThan", 10, True, False),
        ("NumericEquals", [1, 2, 3], 2, True),
        ("NumericNotEquals", [1, 2, 3], 2, False),
        ("StringEquals", "us-east-1", "us-east-1", True),
        ("StringEquals", "us-east-1", "US-EAST-1", False),
        ("StringEquals", ["eu-west-1", "us-east-1"], "us-east-1", True),
        ("StringEquals", 1800, 1800, True),
        ("StringNotEquals", "us-east-1", "us-west-2", True),
        ("StringNotEquals", ["us-east-1", "us-west-2"], "us-west-2", False),
        ("StringEqualsIgnoreCase", "us-east-1", "US-EAST-1", True),
        ("StringEqualsIgnoreCase", "us-east-1", "us-west-2", False),
        ("StringNotEqualsIgnoreCase", "us-east-1", "US-EAST-1", False),
        ("StringLike", "us-*", "us-east-1", True),
        ("StringLike", "us-????-1", "us-east-1", True),
        ("StringLike", "US-*", "us-east-1", False),
        ("StringNotLike", "eu-*", "us-east-1", True),
        ("StringNotLike", ["eu-*", "us-*"], "us-east-1", False),
        ("Bool", "true", True, True),
        ("Bool", True, "TRUE", True),
        ("Bool", "false", True, False),
        ("Bool", "true", "maybe", False),
    ],
)
def test_operators(operator: str, value: Any, context_value: ContextValue, holds: bool) -> None:
    assert condition_holds(operator, "test:Key", value, {"test:Key": context_value}) is holds


@pytest.mark.parametrize(
    ("operator", "holds"),
    [
        ("NumericEquals", False),
        ("NumericLessThan", False),
        ("NumericGreaterThanEquals", False),
        ("StringEquals", False),
        ("StringLike", False),
        ("StringEqualsIgnoreCase", False),
        ("Bool", False),
        # AWS: a condition that requires the key *not* to match holds when it is absent.
        ("StringNotEquals", True),
        ("StringNotLike", True),
        ("StringNotEqualsIgnoreCase", True),
        ("NumericNotEquals", True),
    ],
)
def test_missing_key_plain_forms(operator: str, holds: bool) -> None:
    value = "true" if operator == "Bool" else "1"
    assert condition_holds(operator, "test:Key", value, {}) is holds


@pytest.mark.parametrize(
    "operator", ["NumericLessThanIfExists", "StringEqualsIfExists", "BoolIfExists"]
)
def test_missing_key_if_exists_forms_hold(operator: str) -> None:
    value = "true" if operator.startswith("Bool") else "1"
    assert condition_holds(operator, "test:Key", value, {})


def test_if_exists_forms_still_test_a_present_key() -> None:
    assert not condition_holds("NumericLessThanIfExists", "k:K", 10, {"k:K": 20})
    assert condition_holds("NumericLessThanIfExists", "k:K", 10, {"k:K": 5})
    assert not condition_holds("StringEqualsIfExists", "k:K", "a", {"k:K": "b"})


@pytest.mark.parametrize(
    ("value", "context", "holds"),
    [
        ("true", {}, True),
        ("true", {"k:K": "x"}, False),
        ("false", {"k:K": "x"}, True),
        (False, {}, False),
    ],
)
def test_null_tests_presence(value: Any, context: dict[str, ContextValue], holds: bool) -> None:
    assert condition_holds("Null", "k:K", value, context) is holds


def test_condition_keys_are_case_insensitive() -> None:
    assert condition_holds(
        "StringEquals", "AWS:RequestedRegion", "x", {"aws:requestedregion": "x"}
    )
    assert condition_holds(
        "StringEquals", "aws:requestedregion", "x", {"AWS:RequestedRegion": "x"}
    )


def test_all_conditions_must_hold() -> None:
    text = policy(
        allow(
            Condition={
                "StringEquals": {"aws:RequestedRegion": "us-east-1", "k:Team": "ml"},
                "NumericLessThan": {"sagemaker:KeepAlivePeriod": 600},
            }
        )
    )
    good: dict[str, ContextValue] = {
        "aws:RequestedRegion": "us-east-1",
        "k:Team": "ml",
        "sagemaker:KeepAlivePeriod": 60,
    }
    assert decide(text, context=good).allowed
    for key, bad in [
        ("aws:RequestedRegion", "eu-west-1"),
        ("k:Team", "x"),
        ("sagemaker:KeepAlivePeriod", 900),
    ]:
        assert not decide(text, context={**good, key: bad}).allowed


@pytest.mark.parametrize(
    ("operator", "types", "holds"),
    [
        ("StringLike", ["ml.m5.xlarge", "ml.p4d.24xlarge"], True),  # any value matches
        ("StringNotLike", ["ml.m5.xlarge", "ml.p4d.24xlarge"], False),  # one of them is ml.p*
        ("StringNotLike", ["ml.m5.xlarge"], True),
        ("ForAllValues:StringLike", ["ml.p4d.24xlarge", "ml.p5.48xlarge"], True),
        ("ForAllValues:StringLike", ["ml.p4d.24xlarge", "ml.m5.xlarge"], False),
        ("ForAllValues:StringLike", [], True),
        ("ForAnyValue:StringLike", ["ml.m5.xlarge", "ml.p5.48xlarge"], True),
        ("ForAnyValue:StringLike", ["ml.m5.xlarge"], False),
        ("ForAnyValue:StringLike", [], False),
    ],
)
def test_multi_valued_keys(operator: str, types: list[str], holds: bool) -> None:
    context: dict[str, ContextValue] = {"sagemaker:InstanceTypes": types} if types else {}
    assert condition_holds(operator, "sagemaker:InstanceTypes", "ml.p*", context) is holds


def test_deny_with_a_condition_only_denies_when_it_holds() -> None:
    text = policy(
        allow(),
        {
            "Sid": "ShortKeepAlive",
            "Effect": "Deny",
            "Action": "sagemaker:Create*",
            "Resource": "*",
            "Condition": {"NumericGreaterThan": {"sagemaker:KeepAlivePeriod": 600}},
        },
    )
    assert not decide(text, context={"sagemaker:KeepAlivePeriod": 601}).allowed
    assert decide(text, context={"sagemaker:KeepAlivePeriod": 600}).allowed
    assert decide(text).allowed  # plain NumericGreaterThan on an absent key does not hold


# --- properties -------------------------------------------------------------------------------

names = st.text(alphabet="abcXYZ09-*?", min_size=1, max_size=12)


@given(
    service=st.sampled_from(["sagemaker", "logs", "servicequotas"]),
    operation=st.from_regex(r"[A-Z][A-Za-z]{0,20}", fullmatch=True),
    resource=st.one_of(st.just("*"), names.map(lambda n: f"arn:aws:sagemaker:r:1:x/{n}")),
    allowed_too=st.lists(st.sampled_from(["*", "sagemaker:*", "logs:Get*"]), max_size=3),
)
def test_deny_everything_always_denies(
    service: str, operation: str, resource: str, allowed_too: list[str]
) -> None:
    statements = [allow(Action=a) for a in allowed_too]
    statements.append({"Effect": "Deny", "Action": "*", "Resource": "*"})
    decision = decide(policy(*statements), action=f"{service}:{operation}", resource=resource)
    assert not decision.allowed and decision.explicit_deny


@given(x=st.integers(-(10**12), 10**12), v=st.integers(-(10**12), 10**12))
def test_numeric_operators_agree_with_python(x: int, v: int) -> None:
    context: dict[str, ContextValue] = {"k:N": x}
    assert condition_holds("NumericLessThan", "k:N", v, context) is (x < v)
    assert condition_holds("NumericGreaterThanEquals", "k:N", str(v), context) is (x >= v)
    assert condition_holds("NumericNotEquals", "k:N", v, context) is (x != v)


@given(text=st.text(alphabet="ab", max_size=10), pattern=st.text(alphabet="ab*?", max_size=8))
def test_string_like_agrees_with_fnmatch(text: str, pattern: str) -> None:
    import fnmatch

    expected = fnmatch.fnmatchcase(text, pattern)
    assert condition_holds("StringLike", "k:S", pattern, {"k:S": text}) is expected


@given(st.text(max_size=200))
def test_any_text_either_parses_or_raises_policy_error(text: str) -> None:
    try:
        parse_policy(text)
    except PolicyError:
        pass
