"""Reading hostile input (dockyard.api.untrusted): an error to say, never an exception
the caller did not expect (issue 25)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dockyard.api.untrusted import BodyError, ascii_int, is_unicode, read_json, same_secret


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
        (b'{"a": "\\ud800"}', "not valid Unicode"),
        (b'{"\\uDFFF": 1}', "not valid Unicode"),
        (b'["\xed\xa0\x80"]', "not UTF-8"),  # an encoded surrogate
        ('{"a": 1}'.encode("utf-16"), "not UTF-8"),
        (b"{", "not valid JSON"),
        (b"NaN-ish", "not valid JSON"),
    ],
)
def test_a_body_no_reader_can_take_is_a_body_error(body: bytes, why: str) -> None:
    with pytest.raises(BodyError) as refused:
        read_json(body)
    assert why in refused.value.message


def test_what_a_body_may_hold() -> None:
    assert read_json(b"") == {} and read_json(b"  \n") == {}
    assert read_json(b'{"a": "\\ud83d\\ude00"}') == {"a": "😀"}  # a surrogate pair
    assert read_json(b'{"a": "\\\\ud800"}') == {"a": "\\ud800"}  # an escaped backslash
    # Left to the model's validation, which names the member (api.shapes).
    assert read_json(b'{"a": "\\ud800"}', check_strings=False) == {"a": "\ud800"}


@given(st.text())
def test_decoded_text_is_unicode(text: str) -> None:
    assert is_unicode(text) == all(not 0xD800 <= ord(c) <= 0xDFFF for c in text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("30", 30),
        ("65535", 65535),
        ("1", 1),
        ("0", None),
        ("65536", None),
        ("\u00b2", None),  # str.isdigit() says yes, int() says no
        ("\u0663", None),  # an Arabic-Indic 3: int() takes it
        ("9" * 5000, None),  # past int()'s 4,300 digits
        (" 30", None),
        ("+30", None),
        ("-1", None),
        ("", None),
    ],
)
def test_a_number_is_ascii_digits_in_range(text: str, expected: int | None) -> None:
    assert ascii_int(text, 1, 65535) == expected


def test_secrets_compare_whatever_was_presented() -> None:
    assert same_secret("s3cret", "s3cret")
    assert not same_secret("\xe9", "s3cret")  # hmac.compare_digest(str) raised TypeError
    assert not same_secret("\ud800", "s3cret")
    assert not same_secret("", "s3cret")
