"""The explicit table of what dockyard answers: X-Amz-Target prefix -> service -> handlers.

Services are described by botocore's own model, so adding CloudWatch Logs or Service
Quotas later is one more entry here plus its handler modules.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache

import botocore.session
from botocore.model import OperationModel, ServiceModel

from dockyard.api.context import Handler
from dockyard.api.handlers import (
    clusters,
    ecr,
    identity,
    logs,
    service_quotas,
    tags,
    training_jobs,
    training_plans,
)


@dataclass(frozen=True)
class ServiceTarget:
    model: ServiceModel
    handlers: dict[str, Handler] = field(default_factory=dict)

    @property
    def signing_name(self) -> str:
        return str(self.model.signing_name)

    def operation(self, name: str) -> OperationModel | None:
        if name not in self.model.operation_names:
            return None
        return self.model.operation_model(name)


@cache
def _model(name: str) -> ServiceModel:
    return botocore.session.get_session().get_service_model(name)


def _sagemaker() -> ServiceTarget:
    return ServiceTarget(
        _model("sagemaker"),
        {
            **training_jobs.HANDLERS,
            **training_plans.HANDLERS,
            **clusters.HANDLERS,
            **tags.HANDLERS,
        },
    )


def _logs() -> ServiceTarget:
    # The SageMaker training jobs' log group, read straight from the instances' log files.
    return ServiceTarget(_model("logs"), dict(logs.HANDLERS))


def _service_quotas() -> ServiceTarget:
    # The accounts' SageMaker quotas; increases wait for an operator (`dockyard quotas`).
    return ServiceTarget(_model("service-quotas"), dict(service_quotas.HANDLERS))


def _ecr() -> ServiceTarget:
    # The accounts' container repositories and registry logins (docs/images.md).
    return ServiceTarget(_model("ecr"), dict(ecr.HANDLERS))


@cache
def targets() -> dict[str, ServiceTarget]:
    """Target prefix (as in `X-Amz-Target: SageMaker.ListTrainingJobs`) -> service."""
    services = [_sagemaker(), _logs(), _service_quotas(), _ecr()]
    return {str(s.model.metadata["targetPrefix"]): s for s in services}


@cache
def query_targets() -> dict[str, ServiceTarget]:
    """Signing name -> service, for the query protocol (no X-Amz-Target: the form's
    Action names the operation, the signature's scope the service)."""
    services = [
        ServiceTarget(_model("sts"), dict(identity.STS_HANDLERS)),
        ServiceTarget(_model("iam"), dict(identity.IAM_HANDLERS)),
    ]
    return {s.signing_name: s for s in services}
