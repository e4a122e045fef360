"""Random requests generated from the botocore shapes never get a 5xx.

Bodies are shape-guided junk or valid values, sent signed to random SageMaker
operations (implemented ones drawn more often) over one kept-alive connection.
"""

from __future__ import annotations

import datetime as dt
import http.client
import json
from collections.abc import Iterator
from typing import Any

import botocore.session
import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dockyard.api.targets import targets
from tests.harness import DockyardServer
from tests.strategies import random_body, valid_body

MODEL = botocore.session.get_session().get_service_model("sagemaker")
IMPLEMENTED = sorted(targets()["SageMaker"].handlers)
OPERATIONS = st.one_of(
    st.sampled_from(IMPLEMENTED), st.sampled_from(sorted(MODEL.operation_names))
)


class Sender:
    def __init__(self, server: DockyardServer) -> None:
        self.server = server
        self.credentials = Credentials(*server.credentials())
        self.connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)

    def send(
        self, target: str, body: bytes, service: str = "sagemaker"
    ) -> tuple[int, dict[str, Any]]:
        request = AWSRequest(
            method="POST",
            url=self.server.endpoint + "/",
            data=body,
            headers={"X-Amz-Target": target, "Content-Type": "application/x-amz-json-1.1"},
        )
        SigV4Auth(self.credentials, service, "us-east-1").add_auth(request)
        self.connection.request("POST", "/", body=body, headers=dict(request.prepare().headers))
        response = self.connection.getresponse()
        return response.status, json.loads(response.read() or b"{}")


@pytest.fixture(scope="module")
def sender(server: DockyardServer) -> Iterator[Sender]:
    instance = Sender(server)
    yield instance
    instance.connection.close()


def encode(value: Any) -> bytes:
    return json.dumps(value, default=str, allow_nan=True).encode()


def check(status: int, answer: dict[str, Any], target: str, body: bytes) -> None:
    assert status < 500, (target, body[:500], answer)
    if status >= 400:
        assert answer.get("__type") and answer.get("message"), answer


@given(data=st.data(), operation=OPERATIONS)
@settings(max_examples=250, deadline=None, suppress_health_check=list(HealthCheck))
def test_random_bodies_never_get_a_5xx(
    sender: Sender, data: st.DataObject, operation: str
) -> None:
    shape = MODEL.operation_model(operation).input_shape
    value = data.draw(random_body(shape), label="body")
    body = encode(value)
    check(*sender.send(f"SageMaker.{operation}", body), f"SageMaker.{operation}", body)


@given(data=st.data(), operation=OPERATIONS)
@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
def test_valid_bodies_get_an_answer_not_a_5xx(
    sender: Sender, data: st.DataObject, operation: str
) -> None:
    if operation == "CreateTrainingJob":
        return  # a valid body would really run its random entrypoint as a process
    strategy = valid_body(MODEL.operation_model(operation).input_shape)
    if strategy is None:
        return
    body = encode(data.draw(strategy, label="body"))
    status, answer = sender.send(f"SageMaker.{operation}", body)
    check(status, answer, f"SageMaker.{operation}", body)
    # A valid body is never refused for its shape.
    assert answer.get("__type") != "ValidationException" or operation in IMPLEMENTED, answer


# The other services served on the endpoint: (botocore name, target prefix, signing name).
OTHERS = [
    ("logs", "Logs_20140328", "logs"),
    ("service-quotas", "ServiceQuotasV20190624", "servicequotas"),
    ("ecr", "AmazonEC2ContainerRegistry_V20150921", "ecr"),
]


@pytest.mark.parametrize(("name", "prefix", "signing"), OTHERS)
def test_other_services_never_get_a_5xx(
    sender: Sender, name: str, prefix: str, signing: str
) -> None:
    model = botocore.session.get_session().get_service_model(name)
    operations = st.one_of(
        st.sampled_from(sorted(targets()[prefix].handlers)),
        st.sampled_from(sorted(model.operation_names)),
    )

    @given(data=st.data(), operation=operations, valid=st.booleans())
    @settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
    def run(data: st.DataObject, operation: str, valid: bool) -> None:
        shape = model.operation_model(operation).input_shape
        strategy = valid_body(shape) if valid else None
        value = data.draw(strategy if strategy is not None else random_body(shape), label="body")
        body = encode(value)
        target = f"{prefix}.{operation}"
        check(*sender.send(target, body, service=signing), target, body)

    run()


# Header values must be printable to be HTTP at all; anything else is the HTTP layer's 400.
PRINTABLE = st.characters(min_codepoint=32, max_codepoint=126)


@given(
    target=st.one_of(st.text(PRINTABLE, max_size=60), OPERATIONS.map("SageMaker.{}".format)),
    body=st.binary(max_size=200),
)
@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
def test_random_targets_and_bytes(sender: Sender, target: str, body: bytes) -> None:
    check(*sender.send(target.strip(), body), target, body)


def test_far_future_signature_is_refused_not_crashed(server: DockyardServer) -> None:
    from tests.harness import signed_post

    status, error = signed_post(
        server, "SageMaker.ListTrainingJobs", b"{}", signed_at=dt.datetime(2999, 1, 1)
    )
    assert status == 403 and error["__type"] == "InvalidSignatureException"
