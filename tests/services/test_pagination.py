"""Every field of a page token is checked (dockyard.services.pagination, services.logs):
the API seals tokens, and these decoders are the second line (issue 25)."""

from __future__ import annotations

import base64
import json

import pytest

from dockyard.services import logs
from dockyard.services.errors import ValidationException
from dockyard.services.log_streams import InvalidParameterException
from dockyard.services.pagination import MAX_OFFSET, decode_token, encode_token, page

QUERY = {"SortBy": "Name"}


def token_of(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def fingerprint() -> str:
    return str(json.loads(base64.urlsafe_b64decode(encode_token(0, QUERY) + "=="))["q"])


def test_a_token_returns_where_the_page_ended() -> None:
    rows, token = page(list(range(11)), 20, 10, QUERY)
    assert len(rows) == 10 and token is not None
    assert decode_token(token, QUERY) == 30
    assert decode_token(None, QUERY) == 0


@pytest.mark.parametrize(
    "offset",
    ["100000000000000000000", "1e300", "Infinity", "NaN", "-1", "true", "5.0", '"5"', "null"],
)
def test_an_offset_is_an_int_in_range(offset: str) -> None:
    forged = token_of(f'{{"o": {offset}, "q": "{fingerprint()}"}}')
    with pytest.raises(ValidationException):
        decode_token(forged, QUERY)
    with pytest.raises(ValidationException):
        decode_token(token_of(f'{{"o": {MAX_OFFSET}, "q": "{fingerprint()}"}}'), QUERY)


@pytest.mark.parametrize(
    "text",
    [
        "[" * 5000,
        "[]",
        '{"o": 1}',
        '{"o": 1, "q": 5}',
        f'{{"o": 1, "q": "{"x" * 16}", "extra": 1}}',
        "\xe9",
    ],
)
def test_a_token_of_another_shape_is_refused(text: str) -> None:
    with pytest.raises(ValidationException):
        decode_token(token_of(text), QUERY)


PARAMS = {"logGroupName": "/aws/sagemaker/TrainingJobs"}


def logs_token(value: str) -> dict[str, str]:
    query = token_of(f'{{"o": {value}, "q": "{logs._fingerprint(PARAMS)}"}}')
    return {**PARAMS, "nextToken": query}


@pytest.mark.parametrize("value", ["100000000000000000000", "1e300", "true", "-1", "[" * 5000])
def test_a_log_streams_offset_is_an_int_in_range(value: str) -> None:
    with pytest.raises(InvalidParameterException):
        logs._decode_offset(logs_token(value))


@pytest.mark.parametrize(
    "value",
    ['[1e300, "s", 0]', '[0, "s", 100000000000000000000]', f'[0, "{"s" * 600}", 0]', "[0, 1, 2]"],
)
def test_a_filter_position_is_checked_field_by_field(value: str) -> None:
    with pytest.raises(InvalidParameterException):
        logs._decode_key(logs_token(value))
    assert logs._decode_key(logs_token('[5, "s", 7]')) == (5, "s", 7)


@pytest.mark.parametrize("position", ["\u00b2", "9" * 5000, "-1", "1e3"])
def test_a_stream_position_is_ascii_digits(position: str) -> None:
    with pytest.raises(InvalidParameterException):
        logs._decode_stream_token("f/" + token_of(f"{position}:job/algo-1-1"), "job/algo-1-1", 10)
    assert logs._decode_stream_token("f/" + token_of("3:s"), "s", 10) == ("f", 3)
