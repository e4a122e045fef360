"""Rows written straight into a server's database, for tests of the read paths.

Training jobs are created by CreateTrainingJob from a later issue; until then the
read paths (Describe/List, account scoping, restarts) are tested on rows put here.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from dockyard.domain.arns import training_job_arn
from dockyard.store.db import Database
from dockyard.store.tables import TrainingJob

BASE_TIME = datetime(2026, 1, 1, tzinfo=UTC)


def insert_training_jobs(
    database_url: str,
    account_id: str,
    names: list[str],
    *,
    region: str = "us-east-1",
    status: str = "Completed",
    start: datetime = BASE_TIME,
) -> None:
    db = Database(database_url)
    try:
        with db.session() as session:
            for index, name in enumerate(names):
                created = start + timedelta(minutes=index)
                session.add(
                    TrainingJob(
                        account_id=account_id,
                        region=region,
                        name=name,
                        arn=training_job_arn(region, account_id, name),
                        status=status,
                        secondary_status=status,
                        creation_time=created,
                        last_modified_time=created + timedelta(hours=1),
                        training_end_time=created + timedelta(hours=1),
                        spec={
                            "AlgorithmSpecification": {
                                "TrainingImage": "python:3.11",
                                "TrainingInputMode": "File",
                            },
                            "RoleArn": f"arn:aws:iam::{account_id}:role/training",
                            "ResourceConfig": {
                                "InstanceType": "ml.m5.xlarge",
                                "InstanceCount": 1,
                                "VolumeSizeInGB": 30,
                            },
                            "StoppingCondition": {"MaxRuntimeInSeconds": 3600},
                            "ModelArtifacts": {
                                "S3ModelArtifacts": f"s3://bucket/{name}/output/model.tar.gz"
                            },
                        },
                    )
                )
    finally:
        db.dispose()
