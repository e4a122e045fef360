"""Logs and metrics reach the API through the backend that ran the instances
(`compute.backends.protocol.InstanceRecords`), not through any backend's files: a
second backend - here one that
keeps its instances' reports in memory, as a remote one would hand them over - serves
GetLogEvents, DescribeLogStreams, FilterLogEvents, final metrics and a cluster's
lifecycle logs alone."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from dockyard.compute.wire.log_format import Event
from dockyard.compute.wire.spec import JobSpec
from dockyard.domain.jobs import instance_key
from dockyard.domain.metrics import Latest
from dockyard.services import logs, training_jobs
from dockyard.store.db import Database
from dockyard.store.migrate import upgrade
from tests.fixtures import BASE_TIME, insert_training_jobs

ACCOUNT = "111122223333"


class MemoryLog:
    """An InstanceLog over events held in memory."""

    def __init__(self, events: list[tuple[int, str]]) -> None:
        self.events = events
        self.closed = False

    def __len__(self) -> int:
        return len(self.events)

    def timestamp(self, position: int) -> int:
        return self.events[position][0]

    def first_at(self, timestamp_ms: int) -> int:
        return next((i for i, (t, _) in enumerate(self.events) if t >= timestamp_ms), len(self))

    def fit(self, start: int, stop: int, budget: int, *, from_end: bool = False) -> int:
        return start if from_end else stop

    def read(self, start: int, stop: int) -> list[Event]:
        return [Event(t, m) for t, m in self.events[start:stop]]

    def search(self, start: int, stop: int, terms: Sequence[str] = ()) -> Any:
        for position in range(start, stop):
            t, m = self.events[position]
            yield t, position, len(m.encode()), m if all(term in m for term in terms) else None

    def close(self) -> None:
        self.closed = True

    def __enter__(self) -> MemoryLog:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class MemoryBackend:
    """Just the reporting half of a Backend (`records`): instances' logs, metrics and
    specs, in memory - no encoding of the agent's."""

    def __init__(self) -> None:
        self.logs: dict[tuple[str, str], list[tuple[int, str]]] = {}
        self.latest: dict[tuple[str, str], Latest] = {}
        self.specs: dict[tuple[str, str], JobSpec] = {}
        self.opened: list[MemoryLog] = []

    @property
    def records(self) -> MemoryBackend:
        return self

    def logged_hosts(self, job_key: str) -> list[str]:
        return sorted(h for k, h in self.logs if k == job_key)

    def logged_instances(self, key_prefix: str) -> list[tuple[str, str]]:
        return sorted(key for key in self.logs if key[0].startswith(key_prefix))

    def open_log(self, job_key: str, host: str) -> MemoryLog:
        log = MemoryLog(self.logs.get((job_key, host), []))
        self.opened.append(log)
        return log

    def metrics(self, job_key: str, host: str) -> Latest:
        return self.latest.get((job_key, host), {})

    def launched_spec(self, job_key: str, host: str) -> JobSpec | None:
        return self.specs.get((job_key, host))


def test_a_jobs_logs_and_metrics_come_from_its_backend(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    db = Database(url)
    upgrade(db)
    from dockyard.services.accounts import create_account

    with db.session() as session:
        create_account(session, BASE_TIME, "memory", ACCOUNT)
    insert_training_jobs(url, ACCOUNT, ["remote"])
    with db.session() as session:
        from dockyard.store.tables import TrainingJob

        job = session.query(TrainingJob).one()
        job.spec = {
            **job.spec,
            "AlgorithmSpecification": {
                **job.spec["AlgorithmSpecification"],
                "MetricDefinitions": [{"Name": "loss", "Regex": "loss=([0-9.]+)"}],
            },
        }
        uid = job.uid
    key = instance_key(ACCOUNT, "us-east-1", "remote", uid)
    backend = MemoryBackend()
    backend.logs[(key, "algo-1")] = [(1000, "epoch 1 loss=0.5"), (2000, "epoch 2 loss=0.25")]
    backend.logs[(key, "algo-2")] = [(1500, "worker up")]
    backend.latest[(key, "algo-1")] = {"loss": (0.25, 2000)}
    group = {"logGroupName": "/aws/sagemaker/TrainingJobs"}
    try:
        with db.read() as connection:
            streams = logs.describe_log_streams(
                connection,
                backend,
                ACCOUNT,
                "us-east-1",
                {**group, "logStreamNamePrefix": "remote/"},
            )["logStreams"]
            names = [s["logStreamName"] for s in streams]
            assert [n.split("/")[1].rsplit("-", 1)[0] for n in names] == ["algo-1", "algo-2"]
            got = logs.get_log_events(
                connection,
                backend,
                ACCOUNT,
                "us-east-1",
                {**group, "logStreamName": names[0], "startFromHead": True},
            )
            assert [e["message"] for e in got["events"]] == [
                "epoch 1 loss=0.5",
                "epoch 2 loss=0.25",
            ]
            found = logs.filter_log_events(
                connection, backend, ACCOUNT, "us-east-1", {**group, "filterPattern": "up"}
            )
            assert [e["message"] for e in found["events"]] == ["worker up"]
            described = training_jobs.describe_training_job(
                connection, ACCOUNT, "us-east-1", "remote", backend=backend
            )
            assert [(m["MetricName"], m["Value"]) for m in described["FinalMetricDataList"]] == [
                ("loss", 0.25)
            ]
        assert backend.opened and all(log.closed for log in backend.opened)
    finally:
        db.dispose()
