"""The registry password: what GetAuthorizationToken issues, the registry's door accepts."""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from dockyard.domain.registry_tokens import (
    LIFETIME,
    authorization_token,
    issue,
    verify,
    verify_basic,
)

KEY = b"k" * 32
NOW = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)
ACCOUNT = "123456789012"
KEY_ID = "AKIAABCDEFGHIJKLMNOP"


def test_a_password_speaks_for_its_account_and_key_until_it_expires() -> None:
    password, expires_at = issue(KEY, ACCOUNT, KEY_ID, NOW)
    assert expires_at == NOW + LIFETIME
    grant = verify(KEY, "AWS", password, NOW + timedelta(hours=11, minutes=59))
    assert grant is not None
    assert (grant.account_id, grant.access_key_id, grant.expires_at) == (
        ACCOUNT,
        KEY_ID,
        expires_at,
    )
    assert verify(KEY, "AWS", password, expires_at) is None
    assert verify(KEY, "AWS", password, expires_at + timedelta(days=1)) is None


def test_another_data_dirs_key_or_user_is_refused() -> None:
    password, _ = issue(KEY, ACCOUNT, KEY_ID, NOW)
    assert verify(b"x" * 32, "AWS", password, NOW) is None
    assert verify(KEY, "root", password, NOW) is None


def test_an_edited_field_is_refused() -> None:
    password, _ = issue(KEY, ACCOUNT, KEY_ID, NOW)
    version, account, key_id, expires, mac = password.split(".")
    edits = [
        ".".join([version, "210987654321", key_id, expires, mac]),  # another account
        ".".join([version, account, "AKIAZZZZZZZZZZZZZZZZ", expires, mac]),  # another key
        ".".join([version, account, key_id, str(int(expires) + 86400), mac]),  # longer life
        ".".join(["dky2", account, key_id, expires, mac]),
        password + "A",
        "",
    ]
    for edited in edits:
        assert verify(KEY, "AWS", edited, NOW) is None, edited


def test_the_wire_form_is_awss_and_the_basic_header_verifies() -> None:
    password, _ = issue(KEY, ACCOUNT, KEY_ID, NOW)
    token = authorization_token(password)
    assert base64.b64decode(token).decode() == f"AWS:{password}"
    assert verify_basic(KEY, f"Basic {token}", NOW) is not None
    assert verify_basic(KEY, f"Bearer {token}", NOW) is None
    assert verify_basic(KEY, "Basic !!!not-base64", NOW) is None
    assert verify_basic(KEY, "Basic " + base64.b64encode(b"AWS").decode(), NOW) is None


@given(st.text(max_size=300))
def test_no_other_text_is_a_valid_password(text: str) -> None:
    assert verify(KEY, "AWS", text, NOW) is None
