"""The query protocol's form (dockyard.api.query): read in one pass, bounded (issue 25)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

import pytest
from botocore.serialize import create_serializer

from dockyard.api import query
from dockyard.api.targets import query_targets

SIMULATE = query_targets()["iam"].model.operation_model("SimulatePrincipalPolicy")


def form_of(params: dict[str, Any]) -> dict[str, str]:
    """The form botocore's own serialiser sends for these parameters."""
    body = create_serializer("query").serialize_to_request(params, SIMULATE)["body"]
    return query.form(urlencode(body).encode())


def test_the_form_botocore_sends_reads_back_as_it_was() -> None:
    params = {
        "PolicySourceArn": "arn:aws:iam::123456789012:user/x",
        "ActionNames": [f"sagemaker:Describe{i}" for i in range(12)],
        "ResourceArns": ["arn:aws:sagemaker:us-east-1:123456789012:training-job/a"],
        "ContextEntries": [
            {
                "ContextKeyName": "aws:x",
                "ContextKeyValues": ["1", "2"],
                "ContextKeyType": "string",
            },
            {"ContextKeyName": "aws:y", "ContextKeyValues": ["3"], "ContextKeyType": "string"},
        ],
        "MaxItems": 5,
        "Marker": "3",
    }
    assert query.decode(SIMULATE, form_of(params)) == params


def test_a_list_has_at_most_its_limit_of_members() -> None:
    members = "&".join(f"ActionNames.member.{i}=s:A" for i in range(1, 10_002))
    with pytest.raises(query.QueryError, match="more than 10000 members"):
        query.decode(SIMULATE, query.form(members.encode()))
    decoded = query.decode(SIMULATE, query.form(members.rpartition("&")[0].encode()))
    assert len(decoded["ActionNames"]) == 10_000


def test_what_no_member_names_is_ignored_and_too_much_is_refused() -> None:
    deep = "ActionNames.member.1" + ".x" * 50_000
    assert query.decode(SIMULATE, query.form(f"{deep}=1&ActionNames.member.1=y".encode())) == {
        "ActionNames": ["y"]
    }
    assert query.decode(SIMULATE, query.form(b"ActionNames=")) == {"ActionNames": []}
    with pytest.raises(query.QueryError, match="more than 50000 parameters"):
        query.form(b"a=1&" * 50_001)
    with pytest.raises(query.QueryError, match="whole number"):
        query.decode(SIMULATE, query.form(b"MaxItems=" + b"9" * 5000))
