"""The console's training-job pages: the list with warm pools counting down, creating a
job, a job's page, Release cluster and Stop."""

from __future__ import annotations

import io
import re
import tarfile
import uuid
from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import Any
from urllib.parse import quote, urlsplit

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from dockyard.api.dispatch import ApiError
from dockyard.api.shapes import ValidationError
from dockyard.clock import monotonic
from dockyard.domain import metrics as metric_rules
from dockyard.services import buckets, quotas, warm_pools
from dockyard.services.errors import ServiceError, ValidationException
from dockyard.web import session as sessions
from dockyard.web import views
from dockyard.web.base import Caller, ConsoleBase, as_utc

LOG_GROUP = "/aws/sagemaker/TrainingJobs"
JOB_STATUSES = ("InProgress", "Completed", "Failed", "Stopping", "Stopped")
POOL_STATUSES = ("Available", "InUse", "Reused", "Terminated")
PAGE_JOBS = 50
LOG_TAIL = 100
# The charts read the head of algo-1's log: one GetLogEvents page (at most 10,000 events
# and 1 MB), scraped for at most METRIC_SECONDS (a tenant's regexes, RE2 or not, must
# not hold a worker for long on each 2-second refresh); what is left is not charted.
METRIC_EVENTS = 10000
METRIC_SECONDS = 1.0
DEFAULT_CODE = """import time
for step in range(1, 6):
    print(f"step={step} loss={1 / step:.3f}", flush=True)
    time.sleep(1)
"""
DEFAULT_METRIC = ("loss", r"loss=([0-9.]+)")


def _charts(definitions: list[Any], events: list[tuple[int, str]]) -> list[views.Chart]:
    """The job's metrics charted from its first lines, for at most METRIC_SECONDS."""
    give_up = monotonic() + METRIC_SECONDS

    def in_time(lines: Iterable[tuple[int, str]]) -> Iterator[tuple[int, str]]:
        for line in lines:
            if monotonic() > give_up:
                return
            yield line

    found = metric_rules.series(definitions, in_time(events))
    return [c for name, values in found.items() if (c := views.chart(name, values)) is not None]


class JobPages(ConsoleBase):
    # -- training jobs ------------------------------------------------------------------

    async def jobs(self, request: Request, caller: Caller) -> Response:
        query = request.query_params
        status = query.get("status") if query.get("status") in JOB_STATUSES else None
        pool = query.get("pool") if query.get("pool") in POOL_STATUSES else None
        name = (query.get("name") or "")[:63]
        listed = await self.call(
            caller,
            "SageMaker.ListTrainingJobs",
            MaxResults=PAGE_JOBS,
            StatusEquals=status,
            WarmPoolStatusEquals=pool,
            NameContains=name,
            SortBy="CreationTime",
            SortOrder="Descending",
        )
        rows = await self._described(caller, listed)
        until = await self._pool_deadlines(caller, [r["TrainingJobName"] for r in rows])
        return self.render(
            request,
            caller,
            "jobs.html",
            jobs=rows,
            until=until,
            statuses=JOB_STATUSES,
            pool_statuses=POOL_STATUSES,
            status_filter=status or "",
            pool=pool or "",
            name=name,
            live_url=str(request.url.include_query_params(fragment="rows")),
        )

    async def _described(self, caller: Caller, listed: dict[str, Any]) -> list[dict[str, Any]]:
        """Each listed job in full (a summary has no ResourceConfig nor start time)."""
        return [
            await self.call(
                caller, "SageMaker.DescribeTrainingJob", TrainingJobName=s["TrainingJobName"]
            )
            for s in listed.get("TrainingJobSummaries", [])
        ]

    async def _pool_deadlines(self, caller: Caller, names: list[str]) -> dict[str, datetime]:
        account, region = caller.account_id, caller.session.region
        assert account is not None
        found: dict[str, datetime] = await self.read(
            lambda s: warm_pools.available_until(s, account, region, names)
        )
        return {name: as_utc(moment) or moment for name, moment in found.items()}

    async def new_job(self, request: Request, caller: Caller) -> Response:
        account = caller.account_id
        assert account is not None
        types = await self.read(lambda _s: quotas.instance_types(self.state.plans))
        plans = await self.call(caller, "SageMaker.ListTrainingPlans", MaxResults=100)
        usable = [
            p
            for p in plans.get("TrainingPlanSummaries", [])
            if p.get("Status") in ("Scheduled", "Active")
            and "training-job" in (p.get("TargetResources") or [])
        ]
        output = await self._default_output(caller)
        values: dict[str, Any] = {
            "name": f"console-{uuid.uuid4().hex[:8]}",
            "instance_type": "ml.m5.xlarge" if "ml.m5.xlarge" in types else types[0],
            "count": 1,
            "keep_alive": 0,
            "plan": "",
            "max_runtime": 3600,
            "code": DEFAULT_CODE,
            "output": output,
            "metric_name": DEFAULT_METRIC[0],
            "metric_regex": DEFAULT_METRIC[1],
        }
        error = None
        if request.method == "POST":
            form = await request.form()
            values.update({k: str(form.get(k, "")) for k in values})
            try:
                params = self._job_request(account, values)
            except ValueError as exc:
                error = str(exc)
            else:
                try:
                    params["HyperParameters"] = await self._upload_code(
                        account, values["output"], values["name"], values["code"]
                    )
                    await self.call(caller, "SageMaker.CreateTrainingJob", **params)
                except (ApiError, ServiceError) as exc:
                    error = f"{exc.code}: {exc.message}"
                except ValidationError as exc:
                    error = f"ValidationException: {exc.message}"
                else:
                    target = f"{sessions.PATH}/jobs/{quote(values['name'])}"
                    return RedirectResponse(target, 303)
        return self.render(
            request,
            caller,
            "new_job.html",
            400 if error else 200,
            values=values,
            types=types,
            plans=usable,
            error=error,
        )

    async def _default_output(self, caller: Caller) -> str:
        """Where a console job's model goes: the development bucket when the account owns
        it, else the first bucket it owns (the form says so when it has none)."""
        store, account = self.state.s3_store, caller.account_id
        if store is None or account is None:
            return ""
        owned = sorted(await self.read(lambda s: buckets.owned(s, account, store)))
        if not owned:
            return ""
        bucket = "dockyard-jobs" if "dockyard-jobs" in owned else owned[0]
        return f"s3://{bucket}/console"

    async def _upload_code(
        self, account: str, output: str, name: str, code: str
    ) -> dict[str, str]:
        """The form's code as the SageMaker SDK ships a script: `train.py` in a
        sourcedir.tar.gz beside the output path, run in script mode."""
        store = self.state.s3_store
        if store is None:
            raise ValidationException(
                "the console uploads a job's code to dockyard's own S3 service, and this "
                "server uses another (--s3-endpoint-url)"
            )
        bucket, _, prefix = output.removeprefix("s3://").partition("/")
        if not re.fullmatch(r"[a-zA-Z0-9-]{1,63}", name):
            raise ValidationException("a job name is letters, digits and hyphens (at most 63)")
        archive = io.BytesIO()
        with tarfile.open(fileobj=archive, mode="w:gz") as tar:
            data = code.replace("\r\n", "\n").encode()
            member = tarfile.TarInfo("train.py")
            member.size = len(data)
            member.mode = 0o644
            tar.addfile(member, io.BytesIO(data))
        key = "/".join(p for p in (prefix.strip("/"), name, "source", "sourcedir.tar.gz") if p)
        uri = await self.write(
            lambda s: buckets.put_object(s, store, account, bucket, key, archive.getvalue())
        )
        return {"sagemaker_program": '"train.py"', "sagemaker_submit_directory": f'"{uri}"'}

    @staticmethod
    def _job_request(account: str, values: dict[str, Any]) -> dict[str, Any]:
        def number(field: str, label: str) -> int:
            try:
                return int(str(values[field]).strip() or "0")
            except ValueError as exc:
                raise ValueError(f"{label} must be a whole number") from exc

        if not values["output"]:
            raise ValueError(
                "Output S3 path is required: create a bucket first (aws s3 mb s3://NAME)"
            )
        resources: dict[str, Any] = {
            "InstanceType": values["instance_type"],
            "InstanceCount": number("count", "Instance count"),
            "VolumeSizeInGB": 10,
        }
        keep_alive = number("keep_alive", "Keep-alive period")
        if keep_alive:
            resources["KeepAlivePeriodInSeconds"] = keep_alive
        if values["plan"]:
            resources["TrainingPlanArn"] = values["plan"]
        algorithm: dict[str, Any] = {"TrainingImage": "python:3.11", "TrainingInputMode": "File"}
        if values["metric_name"] and values["metric_regex"]:
            algorithm["MetricDefinitions"] = [
                {"Name": values["metric_name"], "Regex": values["metric_regex"]}
            ]
        return {
            "TrainingJobName": values["name"].strip(),
            "AlgorithmSpecification": algorithm,
            "RoleArn": f"arn:aws:iam::{account}:role/dockyard-console",
            "OutputDataConfig": {"S3OutputPath": values["output"]},
            "ResourceConfig": resources,
            "StoppingCondition": {"MaxRuntimeInSeconds": number("max_runtime", "Max runtime")},
        }

    async def job(self, request: Request, caller: Caller) -> Response:
        name = request.path_params["name"]
        job = await self.call(caller, "SageMaker.DescribeTrainingJob", TrainingJobName=name)
        until = (await self._pool_deadlines(caller, [name])).get(name)
        streams = await self.call(
            caller,
            "Logs_20140328.DescribeLogStreams",
            logGroupName=LOG_GROUP,
            logStreamNamePrefix=f"{name}/",
        )
        logs: list[tuple[str, list[dict[str, Any]]]] = []
        definitions = (job.get("AlgorithmSpecification") or {}).get("MetricDefinitions") or []
        events_for_metrics: list[tuple[int, str]] = []
        for stream in streams.get("logStreams", []):
            stream_name = stream["logStreamName"]
            tail = await self.call(
                caller,
                "Logs_20140328.GetLogEvents",
                logGroupName=LOG_GROUP,
                logStreamName=stream_name,
                startFromHead=False,
                limit=LOG_TAIL,
            )
            logs.append((stream_name, tail.get("events", [])))
            if definitions and stream_name.split("/", 1)[-1].startswith("algo-1-"):
                head = await self.call(
                    caller,
                    "Logs_20140328.GetLogEvents",
                    logGroupName=LOG_GROUP,
                    logStreamName=stream_name,
                    startFromHead=True,
                    limit=METRIC_EVENTS,
                )
                events_for_metrics += [
                    (int(e["timestamp"]), str(e["message"])) for e in head.get("events", [])
                ]
        charts = await run_in_threadpool(_charts, definitions, events_for_metrics)
        live = job.get("TrainingJobStatus") in ("InProgress", "Stopping") or (
            (job.get("WarmPoolStatus") or {}).get("Status") in ("Available", "InUse")
        )
        # Up to a page of log per stream: rendered off the event loop, as it was read.
        return await run_in_threadpool(
            self.render,
            request,
            caller,
            "job.html",
            job=job,
            until=until,
            logs=logs,
            charts=charts,
            live=live,
            live_url=str(request.url.include_query_params(fragment="live")),
        )

    async def release(self, request: Request, caller: Caller) -> Response:
        """SageMaker's "Release cluster": the keep-alive period set to 0 (spec §5.7)."""
        name = request.path_params["name"]
        await self.call(
            caller,
            "SageMaker.UpdateTrainingJob",
            TrainingJobName=name,
            ResourceConfig={"KeepAlivePeriodInSeconds": 0},
        )
        self.state.control.nudge()
        return self._back(request, f"{sessions.PATH}/jobs/{quote(name)}")

    async def stop(self, request: Request, caller: Caller) -> Response:
        name = request.path_params["name"]
        await self.call(caller, "SageMaker.StopTrainingJob", TrainingJobName=name)
        self.state.control.nudge()
        return self._back(request, f"{sessions.PATH}/jobs/{quote(name)}")

    @staticmethod
    def _back(request: Request, default: str) -> Response:
        came = request.headers.get("referer", "")
        path = urlsplit(came).path if came else ""
        target = path if path.startswith(f"{sessions.PATH}/") else default
        query = urlsplit(came).query if came else ""
        return RedirectResponse(target + (f"?{query}" if query else ""), 303)
