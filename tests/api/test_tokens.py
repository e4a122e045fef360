"""Page tokens sealed at the API's edge (dockyard.api.tokens)."""

from __future__ import annotations

import base64
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dockyard.api.tokens import BadToken, TokenSeal

SEAL = TokenSeal(b"k" * 32)
ACCOUNT, OPERATION = "123456789012", "sagemaker.ListTrainingJobs"
# Service Quotas' NextToken pattern, the strictest of the models'.
QUOTAS_PATTERN = re.compile(r"[a-zA-Z0-9/+]*={0,2}")


@given(st.text(min_size=1))
def test_a_token_opens_where_it_was_sealed_and_only_there(token: str) -> None:
    sealed = SEAL.seal(ACCOUNT, OPERATION, token)
    assert QUOTAS_PATTERN.fullmatch(sealed)
    assert SEAL.seal(ACCOUNT, OPERATION, token) == sealed  # GetLogEvents readers compare
    assert SEAL.open(ACCOUNT, OPERATION, sealed) == token
    assert SEAL.open("999999999999", OPERATION, sealed) is None
    assert SEAL.open(ACCOUNT, "sagemaker.ListClusters", sealed) is None
    assert TokenSeal(b"x" * 32).open(ACCOUNT, OPERATION, sealed) is None


def test_an_edited_or_made_up_token_does_not_open() -> None:
    sealed = base64.b64decode(SEAL.seal(ACCOUNT, OPERATION, '{"o": 100, "q": "x"}'))
    edited = base64.b64encode(sealed.replace(b"100", b"900")).decode()
    for token in (edited, "", "garbage!", "\xe9", "\ud800", "eyJvIjogNX0=", "=" * 8):
        assert SEAL.open(ACCOUNT, OPERATION, token) is None


def test_a_request_is_refused_in_its_services_words() -> None:
    with pytest.raises(BadToken) as refused:
        SEAL.open_request("servicequotas", ACCOUNT, OPERATION, {"NextToken": "bm90LW91cnM="})
    assert refused.value.code == "InvalidPaginationTokenException"
    with pytest.raises(BadToken) as refused:
        SEAL.open_request("logs", ACCOUNT, OPERATION, {"nextToken": "f/x"})
    assert refused.value.code == "InvalidParameterException"
    answer = SEAL.seal_response(ACCOUNT, OPERATION, {"NextToken": "t", "Items": [], "X": None})
    assert answer["Items"] == [] and answer["NextToken"] != "t"
    opened = SEAL.open_request("sagemaker", ACCOUNT, OPERATION, {"NextToken": answer["NextToken"]})
    assert opened == {"NextToken": "t"}
    assert SEAL.seal_response(ACCOUNT, OPERATION, {"NextToken": None}) == {"NextToken": None}
