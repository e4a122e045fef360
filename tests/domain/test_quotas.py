"""The quota catalog: AWS's names, stable codes, and the request status table."""

from __future__ import annotations

import re

import botocore.session
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dockyard import defaults
from dockyard.domain import quotas
from dockyard.domain.quotas import QuotaKind, RequestStatus
from dockyard.domain.transitions import IllegalTransition

_MODEL = botocore.session.get_session().get_service_model("service-quotas")
_CODE_PATTERN = re.compile(_MODEL.shape_for("QuotaCode").metadata["pattern"])


def test_names_are_the_ones_aws_shows() -> None:
    assert (
        quotas.quota_name(QuotaKind.WARM_POOL, "ml.m5.xlarge")
        == "ml.m5.xlarge for training warm pool usage"
    )
    assert (
        quotas.quota_name(QuotaKind.TRAINING_JOB, "ml.p5.48xlarge")
        == "ml.p5.48xlarge for training job usage"
    )
    assert (
        quotas.quota_name(QuotaKind.TRAINING_PLAN, "ml.p5.48xlarge")
        == "ml.p5.48xlarge for training plan usage"
    )


@given(st.text(min_size=1, max_size=80))
def test_codes_look_like_aws_codes_and_never_change(name: str) -> None:
    code = quotas.quota_code(name)
    assert re.fullmatch(r"L-[0-9A-F]{8}", code)
    assert _CODE_PATTERN.fullmatch(code)
    assert quotas.quota_code(name) == code


def test_a_known_code_stays_the_same_across_releases() -> None:
    # Codes are what users script against; changing the derivation would break them.
    assert quotas.quota_code("ml.m5.xlarge for training warm pool usage") == "L-BBEEA0AE"


def test_catalog_has_four_quotas_per_type_with_unique_codes() -> None:
    types = set(defaults.PRICES) | {"ml.m5.xlarge"}
    catalog = quotas.catalog([*types, "ml.m5.xlarge"])  # duplicates collapse
    assert len(catalog) == 4 * len(types)
    assert len({q.code for q in catalog}) == len(catalog)
    assert [q.name for q in catalog] == sorted(q.name for q in catalog)
    warm = quotas.by_code(catalog, quotas.quota_code("ml.g5.xlarge for training warm pool usage"))
    assert warm is not None
    assert (warm.kind, warm.instance_type, warm.unit, warm.adjustable, warm.global_quota) == (
        QuotaKind.WARM_POOL,
        "ml.g5.xlarge",
        "None",
        True,
        False,
    )
    assert len(warm.description) <= 350  # the model's limit on Description
    assert quotas.by_code(catalog, "L-00000000") is None


def test_quota_arn() -> None:
    assert (
        quotas.quota_arn("us-east-1", "111122223333", "L-BBEEA0AE")
        == "arn:aws:servicequotas:us-east-1:111122223333:sagemaker/L-BBEEA0AE"
    )


def test_request_statuses_are_the_models_words() -> None:
    assert [s.value for s in RequestStatus] == _MODEL.shape_for("RequestStatus").enum


@pytest.mark.parametrize("decision", [RequestStatus.APPROVED, RequestStatus.DENIED])
def test_a_pending_request_is_decided_once(decision: RequestStatus) -> None:
    table = quotas.REQUEST_TRANSITIONS
    assert table.check(RequestStatus.PENDING, decision) is decision
    for later in RequestStatus:
        if later is not decision:
            with pytest.raises(IllegalTransition):
                table.check(decision, later)
