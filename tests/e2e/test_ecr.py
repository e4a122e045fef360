"""ECR repositories on dockyard's endpoint: boto3 and the `aws` CLI against a live server."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from botocore.exceptions import ClientError

from dockyard.domain import registry_tokens
from dockyard.secretbox import SecretBox
from tests.harness import DockyardServer


def code(exc: pytest.ExceptionInfo[ClientError]) -> str:
    return str(exc.value.response["Error"]["Code"])


def aws(
    server: DockyardServer, key: tuple[str, str], *args: str, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """The real `aws` CLI, as the account with this key."""
    env = {**server.aws_env(), "AWS_ACCESS_KEY_ID": key[0], "AWS_SECRET_ACCESS_KEY": key[1]}
    result = subprocess.run(
        [str(Path(sys.executable).parent / "aws"), *args, "--endpoint-url", server.endpoint],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if check:
        assert result.returncode == 0, result.stderr
    return result


def test_create_describe_delete_a_repository(server: DockyardServer) -> None:
    account_id, key = server.new_account("ecr-basics")
    ecr = server.client("ecr", key=key)
    made = ecr.create_repository(
        repositoryName="team/trainer",
        imageTagMutability="IMMUTABLE",
        imageScanningConfiguration={"scanOnPush": True},
        tags=[{"Key": "team", "Value": "vision"}],
    )["repository"]
    host = server.endpoint.removeprefix("http://")
    assert made["repositoryName"] == "team/trainer"
    assert made["registryId"] == account_id
    assert made["repositoryArn"] == f"arn:aws:ecr:us-east-1:{account_id}:repository/team/trainer"
    # What `docker tag`/`podman push` will name: the registry's host, the account, the name.
    assert made["repositoryUri"] == f"{host}/{account_id}/team/trainer"
    assert made["imageTagMutability"] == "IMMUTABLE"
    assert made["imageScanningConfiguration"] == {"scanOnPush": True}
    assert made["encryptionConfiguration"] == {"encryptionType": "AES256"}
    assert abs((made["createdAt"] - datetime.now(UTC)).total_seconds()) < 120

    with pytest.raises(ClientError) as taken:
        ecr.create_repository(repositoryName="team/trainer")
    assert code(taken) == "RepositoryAlreadyExistsException"
    assert "already exists in the registry with id" in str(taken.value)

    described = ecr.describe_repositories(repositoryNames=["team/trainer"])["repositories"]
    assert described == [made]
    with pytest.raises(ClientError) as missing:
        ecr.describe_repositories(repositoryNames=["team/trainer", "nope"])
    assert code(missing) == "RepositoryNotFoundException"
    assert "'nope' does not exist" in str(missing.value)

    gone = ecr.delete_repository(repositoryName="team/trainer", force=True)["repository"]
    assert gone["repositoryArn"] == made["repositoryArn"]
    assert ecr.describe_repositories()["repositories"] == []
    with pytest.raises(ClientError) as again:
        ecr.delete_repository(repositoryName="team/trainer")
    assert code(again) == "RepositoryNotFoundException"


def test_describe_repositories_pages_and_refuses_a_forged_token(server: DockyardServer) -> None:
    _, key = server.new_account("ecr-pages")
    ecr = server.client("ecr", key=key)
    names = [f"repo-{i:02d}" for i in range(7)]
    for name in names:
        ecr.create_repository(repositoryName=name)
    pages = list(
        ecr.get_paginator("describe_repositories").paginate(PaginationConfig={"PageSize": 3})
    )
    assert [len(p["repositories"]) for p in pages] == [3, 3, 1]
    assert [r["repositoryName"] for p in pages for r in p["repositories"]] == names
    with pytest.raises(ClientError) as forged:
        ecr.describe_repositories(nextToken="Zm9yZ2Vk")
    assert code(forged) == "InvalidParameterException"
    with pytest.raises(ClientError) as mixed:
        ecr.describe_repositories(repositoryNames=["repo-00"], maxResults=1)
    assert code(mixed) == "InvalidParameterException"


def test_another_account_never_sees_nor_deletes_a_repository(server: DockyardServer) -> None:
    owner_id, owner = server.new_account("ecr-owner")
    _, other = server.new_account("ecr-other")
    mine, theirs = server.client("ecr", key=owner), server.client("ecr", key=other)
    arn = mine.create_repository(repositoryName="private")["repository"]["repositoryArn"]

    assert theirs.describe_repositories()["repositories"] == []
    for call in (
        lambda: theirs.describe_repositories(repositoryNames=["private"]),
        lambda: theirs.delete_repository(repositoryName="private"),
        lambda: theirs.list_tags_for_resource(resourceArn=arn),
        lambda: theirs.tag_resource(resourceArn=arn, tags=[{"Key": "k", "Value": "v"}]),
    ):
        with pytest.raises(ClientError) as refused:
            call()
        assert code(refused) == "RepositoryNotFoundException"
    for call in (
        lambda: theirs.describe_repositories(registryId=owner_id),
        lambda: theirs.delete_repository(registryId=owner_id, repositoryName="private"),
        lambda: theirs.get_authorization_token(registryIds=[owner_id]),
    ):
        with pytest.raises(ClientError) as foreign:
            call()
        assert code(foreign) == "InvalidParameterException"
    # Their own repository of the same name is theirs alone.
    theirs.create_repository(repositoryName="private")
    assert [r["repositoryArn"] for r in mine.describe_repositories()["repositories"]] == [arn]


def test_tags(server: DockyardServer) -> None:
    _, key = server.new_account("ecr-tags")
    ecr = server.client("ecr", key=key)
    arn = ecr.create_repository(repositoryName="tagged", tags=[{"Key": "a", "Value": "1"}])[
        "repository"
    ]["repositoryArn"]
    ecr.tag_resource(resourceArn=arn, tags=[{"Key": "a", "Value": "2"}, {"Key": "b", "Value": ""}])
    assert ecr.list_tags_for_resource(resourceArn=arn)["tags"] == [
        {"Key": "a", "Value": "2"},
        {"Key": "b", "Value": ""},
    ]
    ecr.untag_resource(resourceArn=arn, tagKeys=["a"])
    assert ecr.list_tags_for_resource(resourceArn=arn)["tags"] == [{"Key": "b", "Value": ""}]
    with pytest.raises(ClientError) as reserved:
        ecr.tag_resource(resourceArn=arn, tags=[{"Key": "aws:x", "Value": "1"}])
    assert code(reserved) == "InvalidTagParameterException"
    with pytest.raises(ClientError) as many:
        ecr.tag_resource(resourceArn=arn, tags=[{"Key": f"k{i}", "Value": "v"} for i in range(50)])
    assert code(many) == "TooManyTagsException"
    with pytest.raises(ClientError) as bad:
        ecr.list_tags_for_resource(resourceArn="arn:aws:sagemaker:us-east-1:1:training-job/x")
    assert code(bad) == "InvalidParameterException"


def test_requests_are_validated_against_the_model(server: DockyardServer) -> None:
    ecr = server.client("ecr")
    with pytest.raises(ClientError) as upper:
        ecr.create_repository(repositoryName="Not_Lower")
    assert code(upper) == "InvalidParameterException"
    assert "repositoryName" in str(upper.value)
    with pytest.raises(ClientError) as kms:
        ecr.create_repository(
            repositoryName="kms", encryptionConfiguration={"encryptionType": "KMS"}
        )
    assert code(kms) == "InvalidParameterException"


def test_image_operations_are_not_implemented_yet(server: DockyardServer) -> None:
    ecr = server.client("ecr")
    ecr.create_repository(repositoryName="no-images-yet")
    with pytest.raises(ClientError) as later:
        ecr.list_images(repositoryName="no-images-yet")
    assert code(later) == "NotImplementedException"
    assert "CreateRepository" in str(later.value)


def test_get_authorization_token_is_a_login_the_registry_can_verify(
    server: DockyardServer,
) -> None:
    account_id, key = server.new_account("ecr-login")
    data = server.client("ecr", key=key).get_authorization_token()["authorizationData"]
    assert len(data) == 1
    login = data[0]
    assert login["proxyEndpoint"] == server.endpoint
    user, _, password = base64.b64decode(login["authorizationToken"]).decode().partition(":")
    assert user == "AWS"
    lifetime = login["expiresAt"] - datetime.now(UTC)
    assert 11 * 3600 < lifetime.total_seconds() <= 12 * 3600

    # The future registry's front door checks it with the data dir's key alone.
    token_key = SecretBox.for_data_dir(server.data_dir).derive_key(
        registry_tokens.REGISTRY_TOKEN_PURPOSE
    )
    grant = registry_tokens.verify(token_key, user, password, datetime.now(UTC))
    assert grant is not None
    assert (grant.account_id, grant.access_key_id) == (account_id, key[0])
    assert grant.expires_at == login["expiresAt"]
    assert registry_tokens.verify(token_key, user, password, login["expiresAt"]) is None


def test_key_policies_govern_ecr_actions(server: DockyardServer) -> None:
    account_id, _ = server.new_account("ecr-policy")
    policy = {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Action": "ecr:*", "Resource": "*"},
            {
                "Effect": "Deny",
                "Action": "ecr:DeleteRepository",
                "Resource": f"arn:aws:ecr:us-east-1:{account_id}:repository/keep/*",
            },
        ],
    }
    ecr = server.client("ecr", key=server.new_key(account_id, json.dumps(policy)))
    ecr.create_repository(repositoryName="keep/this")
    ecr.create_repository(repositoryName="scratch")
    ecr.delete_repository(repositoryName="scratch")
    with pytest.raises(ClientError) as denied:
        ecr.delete_repository(repositoryName="keep/this")
    assert code(denied) == "AccessDeniedException"
    assert "repository/keep/this" in str(denied.value)

    sagemaker_only = server.new_key(
        account_id,
        '{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"sagemaker:*",'
        '"Resource":"*"}]}',
    )
    with pytest.raises(ClientError) as no_login:
        server.client("ecr", key=sagemaker_only).get_authorization_token()
    assert code(no_login) == "AccessDeniedException"


def test_the_aws_cli(server: DockyardServer) -> None:
    account_id, key = server.new_account("ecr-cli")
    made = json.loads(
        aws(server, key, "ecr", "create-repository", "--repository-name", "cli").stdout
    )
    assert made["repository"]["repositoryUri"].endswith(f"/{account_id}/cli")
    listed = json.loads(aws(server, key, "ecr", "describe-repositories").stdout)
    assert [r["repositoryName"] for r in listed["repositories"]] == ["cli"]
    # What `aws ecr get-login-password | podman login --username AWS --password-stdin` uses.
    password = aws(server, key, "ecr", "get-login-password").stdout.strip()
    token_key = SecretBox.for_data_dir(server.data_dir).derive_key(
        registry_tokens.REGISTRY_TOKEN_PURPOSE
    )
    assert registry_tokens.verify(token_key, "AWS", password, datetime.now(UTC)) is not None
    aws(server, key, "ecr", "delete-repository", "--repository-name", "cli")
    missing = aws(
        server, key, "ecr", "describe-repositories", "--repository-names", "cli", check=False
    )
    assert missing.returncode != 0
    assert "RepositoryNotFoundException" in missing.stderr
