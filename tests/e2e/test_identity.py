"""STS and IAM on dockyard's endpoint (the query protocol), as the SageMaker SDK calls
them: who the caller is, a role of its account, what its key may do."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from botocore.exceptions import ClientError

from tests.harness import DockyardServer


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DockyardServer]:
    running = DockyardServer(tmp_path_factory.mktemp("identity") / "data").start()
    yield running
    running.stop()


def test_get_caller_identity_names_the_keys_account(server: DockyardServer) -> None:
    account_id, key = server.new_account("identity-a")
    found = server.client("sts", key=key).get_caller_identity()
    assert found["Account"] == account_id
    assert found["UserId"] == key[0]
    assert found["Arn"] == f"arn:aws:iam::{account_id}:user/{key[0]}"
    # The aws CLI, with the files `make run` writes.
    env = {**server.aws_env(), "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    result = subprocess.run(
        ["aws", "sts", "get-caller-identity", "--endpoint-url", server.endpoint],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["Account"] != account_id  # the development account's


def test_a_role_of_the_account_trusts_sagemaker(server: DockyardServer) -> None:
    account_id, key = server.new_account("identity-b")
    role = server.client("iam", key=key).get_role(RoleName="SageMakerExecution")["Role"]
    assert role["Arn"] == f"arn:aws:iam::{account_id}:role/SageMakerExecution"
    trusted = role["AssumeRolePolicyDocument"]["Statement"][0]["Principal"]["Service"]
    assert trusted == "sagemaker.amazonaws.com"
    with pytest.raises(ClientError) as error:
        server.client("iam", key=key).get_role(RoleName="no spaces allowed")
    assert error.value.response["Error"]["Code"] == "ValidationError"
    with pytest.raises(ClientError) as error:
        server.client("iam", key=key).list_users()
    assert error.value.response["Error"]["Code"] == "NotImplemented"


def test_simulation_answers_from_the_keys_policy(server: DockyardServer) -> None:
    account_id, key = server.new_account("identity-c")
    iam = server.client("iam", key=key)
    actions = ["sagemaker:CreateTrainingJob", "sagemaker:DeleteTrainingJob", "s3:GetObject"]
    free = iam.simulate_principal_policy(
        PolicySourceArn=f"arn:aws:iam::{account_id}:role/x", ActionNames=actions
    )
    assert {r["EvalDecision"] for r in free["EvaluationResults"]} == {"allowed"}
    limited = server.new_key(
        account_id,
        json.dumps(
            {
                "Version": "2012-10-17",
                "Statement": [
                    {"Effect": "Allow", "Action": ["sagemaker:*", "iam:*"], "Resource": "*"},
                    {"Effect": "Deny", "Action": "sagemaker:DeleteTrainingJob", "Resource": "*"},
                ],
            }
        ),
    )
    results = server.client("iam", key=limited).simulate_principal_policy(
        PolicySourceArn=f"arn:aws:iam::{account_id}:role/x", ActionNames=actions
    )["EvaluationResults"]
    assert {r["EvalActionName"]: r["EvalDecision"] for r in results} == {
        "sagemaker:CreateTrainingJob": "allowed",
        "sagemaker:DeleteTrainingJob": "explicitDeny",
        "s3:GetObject": "implicitDeny",
    }
    # GetCallerIdentity needs no permission, as on AWS; other IAM calls obey the key.
    narrow = server.new_key(
        account_id,
        json.dumps(
            {
                "Version": "2012-10-17",
                "Statement": [{"Effect": "Allow", "Action": "sagemaker:*", "Resource": "*"}],
            }
        ),
    )
    assert server.client("sts", key=narrow).get_caller_identity()["Account"] == account_id
    with pytest.raises(ClientError) as error:
        server.client("iam", key=narrow).get_role(RoleName="x")
    assert error.value.response["Error"]["Code"] == "AccessDeniedException"


def test_a_bad_signature_is_refused_in_the_query_protocols_words(server: DockyardServer) -> None:
    wrong = server.client("sts", key=(server.credentials()[0], "x" * 40))
    with pytest.raises(ClientError) as error:
        wrong.get_caller_identity()
    assert error.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    assert error.value.response["Error"]["Code"] == "SignatureDoesNotMatch"
