"""SigV4 verification against botocore's own signer."""

from __future__ import annotations

import datetime as dt
from unittest import mock

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from hypothesis import given, settings
from hypothesis import strategies as st

from dockyard.api import sigv4

SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
NOW = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.UTC)


def sign(body: bytes, path: str = "/", query: str = "", headers: dict | None = None, when=NOW):
    url = f"http://127.0.0.1:8080{path}" + (f"?{query}" if query else "")
    request = AWSRequest(method="POST", url=url, data=body, headers=headers or {})
    with mock.patch("botocore.auth.get_current_datetime", return_value=when.replace(tzinfo=None)):
        SigV4Auth(Credentials("AKIDEXAMPLE", SECRET), "sagemaker", "eu-west-1").add_auth(request)
    prepared = request.prepare()
    return [*prepared.headers.items(), ("Host", "127.0.0.1:8080")]


def check(headers, body: bytes, path: str = "/", query: str = "", now=NOW, secret=SECRET):
    return sigv4.verify(
        method="POST",
        raw_path=path,
        query_string=query,
        headers=headers,
        body=body,
        secret_for=lambda key: secret if key == "AKIDEXAMPLE" else None,
        now=now,
    )


@given(
    body=st.binary(max_size=300),
    target=st.text(st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=40),
    path=st.sampled_from(["/", "/a/b", "/with%20space", "/x~y"]),
    query=st.sampled_from(["", "a=1", "b=2&a=1", "k=v%20w"]),
)
@settings(max_examples=200, deadline=None)
def test_whatever_botocore_signs_verifies(body: bytes, target: str, path: str, query: str) -> None:
    headers = sign(body, path, query, {"X-Amz-Target": target, "X-Extra": "  two   spaces "})
    signed = check(headers, body, path, query)
    assert (signed.region, signed.service) == ("eu-west-1", "sagemaker")


def test_rejections() -> None:
    headers = sign(b"{}")
    with pytest.raises(sigv4.AuthError) as exc:
        check(headers, b"{ }")
    assert exc.value.code == "InvalidSignatureException"
    with pytest.raises(sigv4.AuthError) as exc:
        check(headers, b"{}", secret="wrong")
    assert exc.value.code == "InvalidSignatureException"
    with pytest.raises(sigv4.AuthError) as exc:
        check(headers, b"{}", now=NOW + dt.timedelta(minutes=16))
    assert "Signature expired" in exc.value.message
    with pytest.raises(sigv4.AuthError) as exc:
        check([h for h in headers if h[0] != "Authorization"], b"{}")
    assert exc.value.code == "MissingAuthenticationTokenException"
    garbled = [
        (k, "AWS4-HMAC-SHA256 Signature=abc") if k == "Authorization" else (k, v)
        for k, v in headers
    ]
    with pytest.raises(sigv4.AuthError) as exc:
        check(garbled, b"{}")
    assert exc.value.code == "IncompleteSignatureException"
    assert check(headers, b"{}", now=NOW + dt.timedelta(minutes=14)).access_key_id == "AKIDEXAMPLE"


def test_headers_that_choose_the_operation_must_be_signed() -> None:
    headers = sign(b"{}", headers={"X-Amz-Target": "SageMaker.DescribeTrainingJob"})
    assert check(headers, b"{}").access_key_id == "AKIDEXAMPLE"
    for extra in (("X-Amz-Target", "SageMaker.DeleteTrainingJob"), ("Content-Type", "text/xml")):
        unsigned = sign(b"{}")
        with pytest.raises(sigv4.AuthError) as exc:
            check([*unsigned, extra], b"{}")
        assert exc.value.code == "IncompleteSignatureException"
        assert extra[0].lower() in exc.value.message


@pytest.mark.parametrize(
    ("header", "scope"),
    [
        (
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20260101/us-east-1/s3/aws4_request, "
            "SignedHeaders=host, Signature=abc",
            ("AKIDEXAMPLE", "s3"),
        ),
        ("AWS4-HMAC-SHA256 Credential=AKID/20260101/us-east-1/iam/aws4_request", ("AKID", "iam")),
        ("AWS4-HMAC-SHA256 Credential=AKID/20260101/us-east-1/s3", None),
        ("AWS4-HMAC-SHA256 Credential=/20260101/us-east-1/s3/aws4_request", None),
        ("AWS4-HMAC-SHA256 Credential=AKID/20260101/us-east-1//aws4_request", None),
        ("", None),
        # Read before anything is verified, so linear on what anyone sends.
        ("AWS4-HMAC-SHA256 " + "Credential=" * 100_000, None),
    ],
)
def test_the_credential_scope_is_read_in_one_pass(header: str, scope: object) -> None:
    assert sigv4.credential_scope(header) == scope
