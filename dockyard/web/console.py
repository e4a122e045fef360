"""The web console at `/console`: training jobs and their warm pools, training plans,
quotas, and for operators the fleet and quota requests (SPEC §7).

Server-rendered (Jinja2) with a small script of its own for the live parts (a region
re-fetched every two seconds, countdowns): no external asset and no build step. A
person signs in with an access key (or, as an operator, the operator key); the session
is a sealed cookie (`session`). Every change is a form POST carrying the session's
CSRF token.

What a page shows and does is the API's own operations, run in-process for the
signed-in key through the dispatcher (`Dispatcher.call`): validated by botocore's model,
refused by the key's policy, scoped to its account exactly as through boto3. Only what
the API has no operation for is read from services directly, always for the caller's
account (a warm pool's deadline, the leases the operator's fleet picture draws).
"""

from __future__ import annotations

import hmac
import io
import logging
import re
import tarfile
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from dockyard.api.context import ServerState
from dockyard.api.dispatch import ApiError, Dispatcher
from dockyard.api.shapes import ValidationError
from dockyard.clock import wall_now
from dockyard.domain import metrics as metric_rules
from dockyard.services import buckets, fleet, maintenance, quotas, warm_pools
from dockyard.services.accounts import KeyRecord
from dockyard.services.errors import ServiceError, ValidationException
from dockyard.web import session as sessions
from dockyard.web import views

log = logging.getLogger("dockyard.web")

HERE = Path(__file__).parent
LOG_GROUP = "/aws/sagemaker/TrainingJobs"
JOB_STATUSES = ("InProgress", "Completed", "Failed", "Stopping", "Stopped")
POOL_STATUSES = ("Available", "InUse", "Reused", "Terminated")
PAGE_JOBS = 50
LOG_TAIL = 100
METRIC_EVENTS = 10000
DEFAULT_CODE = """import time
for step in range(1, 6):
    print(f"step={step} loss={1 / step:.3f}", flush=True)
    time.sleep(1)
"""
DEFAULT_METRIC = ("loss", r"loss=([0-9.]+)")


@dataclass(frozen=True)
class Caller:
    session: sessions.Session
    key: KeyRecord | None  # None for the operator

    @property
    def account_id(self) -> str | None:
        return self.key.account_id if self.key else None


class Refused(Exception):
    """A page the caller may not see (signed in as the wrong kind)."""


Page = Callable[[Request, Caller], Awaitable[Response]]


def _utc(moment: Any) -> datetime | None:
    if isinstance(moment, datetime):
        return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    return None


Span = tuple[str, str, datetime, datetime, str, str]


def _block_span(row: str, label: str, block: dict[str, Any], kind: str = "") -> Span | None:
    """A reserved capacity (a plan's block, or an offering's) as a bar on a timeline."""
    start, end = _utc(block.get("StartTime")), _utc(block.get("EndTime"))
    if start is None or end is None:
        return None
    count = block.get("InstanceCount", block.get("TotalInstanceCount"))
    title = (
        f"{row}: {count} x {block.get('InstanceType')} in "
        f"{block.get('AvailabilityZone')}, {start:%m-%d %H:%M} to {end:%m-%d %H:%M} UTC"
    )
    if block.get("Status"):
        title += f" ({block['Status']})"
    return (row, label, start, end, kind or str(block.get("Status", "")).lower(), title)


def _timeline(spans: list[Span], now: datetime) -> tuple[views.Axis | None, list[views.Bar]]:
    """An axis over the spans (and now), and their bars on it."""
    if not spans:
        return None, []
    axis = views.axis(min([s[2] for s in spans] + [now]), max([s[3] for s in spans] + [now]), now)
    return axis, views.bars(axis, spans)


def _ran_within(job: dict[str, Any], start: datetime, end: datetime, now: datetime) -> bool:
    """Whether the job ran (or runs) in [start, end): a plan's job runs only within its
    blocks, so this says which block it ran on."""
    began = _utc(job.get("TrainingStartTime"))
    ended = _utc(job.get("TrainingEndTime")) or now
    return began is not None and began < end and ended > start


class Console:
    def __init__(self, state: ServerState, dispatcher: Dispatcher) -> None:
        self.state = state
        self.dispatcher = dispatcher
        self.templates = Jinja2Templates(directory=str(HERE / "templates"))
        env = self.templates.env
        env.filters["duration"] = views.duration
        env.filters["when"] = lambda m: m.strftime("%Y-%m-%d %H:%M:%S") if m else "-"
        env.filters["iso"] = lambda m: m.isoformat() if m else ""
        env.filters["short_arn"] = lambda arn: str(arn or "").rsplit("/", 1)[-1] or "-"

    def routes(self) -> list[BaseRoute]:
        """The console's routes, under /console (where the server mounts them)."""
        page = self._page
        return [
            Route("/", self.home),
            Route("/signin", self.signin, methods=["GET", "POST"]),
            Route("/signout", page(self.signout), methods=["POST"]),
            Route("/jobs", page(self.jobs)),
            Route("/jobs/new", page(self.new_job), methods=["GET", "POST"]),
            Route("/jobs/{name}", page(self.job)),
            Route("/jobs/{name}/release", page(self.release), methods=["POST"]),
            Route("/jobs/{name}/stop", page(self.stop), methods=["POST"]),
            Route("/plans", page(self.plans)),
            Route("/plans/search", page(self.search), methods=["GET", "POST"]),
            Route("/plans/{name}", page(self.plan)),
            Route("/quotas", page(self.quotas), methods=["GET", "POST"]),
            Route("/fleet", page(self.fleet, operator=True), methods=["GET", "POST"]),
            Route(
                "/quota-requests",
                page(self.quota_requests, operator=True),
                methods=["GET", "POST"],
            ),
            Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
        ]

    # -- plumbing -----------------------------------------------------------------------

    def _now(self) -> datetime:
        return self.state.clock.now()

    def render(
        self,
        request: Request,
        caller: Caller | None,
        template: str,
        status: int = 200,
        **context: Any,
    ) -> Response:
        context.update(
            caller=caller,
            csrf=caller.session.csrf if caller else "",
            now=self._now(),
            path=request.url.path,
            fragment=request.query_params.get("fragment"),
        )
        response = self.templates.TemplateResponse(request, template, context, status_code=status)
        response.headers["cache-control"] = "no-store"
        # Nothing from elsewhere: no external script, style, frame or form target.
        response.headers["content-security-policy"] = (
            "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
            "frame-ancestors 'none'; form-action 'self'; base-uri 'none'"
        )
        response.headers["x-content-type-options"] = "nosniff"
        response.headers["referrer-policy"] = "same-origin"
        return response

    async def _caller(self, request: Request) -> Caller | None:
        found = sessions.unseal(
            self.state.box, request.cookies.get(sessions.COOKIE), wall_now().timestamp()
        )
        if found is None:
            return None
        if found.operator:
            return Caller(found, None)
        # Looked up again on every request: a deleted key is signed out at once.
        key = await run_in_threadpool(self.dispatcher.keys.get, found.principal)
        return Caller(found, key) if key is not None else None

    @staticmethod
    def _same_origin(request: Request) -> bool:
        origin = request.headers.get("origin") or request.headers.get("referer")
        if not origin:
            return True  # SameSite=Strict already kept other sites' requests cookieless
        return urlsplit(origin).netloc == request.headers.get("host", "")

    def _page(self, handler: Page, operator: bool = False) -> Callable[[Request], Any]:
        async def endpoint(request: Request) -> Response:
            caller = await self._caller(request)
            if caller is None:
                target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
                return RedirectResponse(f"{sessions.PATH}/signin?next={quote(target)}", 303)
            if request.method == "POST":
                form = await request.form()
                token = form.get("csrf")
                if not self._same_origin(request) or not sessions.csrf_ok(
                    caller.session, token if isinstance(token, str) else None
                ):
                    return self.render(
                        request,
                        caller,
                        "error.html",
                        403,
                        title="Refused",
                        message="This form is out of date or came from another site; "
                        "reload the page and try again.",
                    )
            if operator != caller.session.operator and handler != self.signout:
                needed = "the operator key" if operator else "an access key"
                return self.render(
                    request,
                    caller,
                    "error.html",
                    403,
                    title="Not for this sign-in",
                    message=f"This page needs a session signed in with {needed}.",
                )
            try:
                return await handler(request, caller)
            except (ApiError, ServiceError) as exc:
                return self._refusal(request, caller, exc.code, exc.message, exc.status)
            except ValidationError as exc:
                return self._refusal(request, caller, "ValidationException", exc.message, 400)
            except Exception:  # a defect: said plainly, never a traceback
                request_id = uuid.uuid4().hex[:16]
                log.exception("console %s failed (request %s)", request.url.path, request_id)
                return self.render(
                    request,
                    caller,
                    "error.html",
                    500,
                    title="Something went wrong",
                    message="dockyard failed to show this page; the server log has request "
                    f"id {request_id}.",
                )

        return endpoint

    def _refusal(
        self, request: Request, caller: Caller, code: str, message: str, status: int
    ) -> Response:
        return self.render(
            request, caller, "error.html", status if 400 <= status < 500 else 400,
            title=code, message=message,
        )  # fmt: skip

    async def call(self, caller: Caller, target: str, **params: Any) -> Any:
        """One API operation as the signed-in key (see `Dispatcher.call`)."""
        assert caller.key is not None
        clean = {k: v for k, v in params.items() if v not in (None, "", [])}
        return await run_in_threadpool(
            self.dispatcher.call, caller.key, caller.session.region, target, clean
        )

    async def read(self, work: Callable[[Any], Any]) -> Any:
        """A read of services the API has no operation for, in a worker thread."""

        def run() -> Any:
            with self.state.db.read_session() as session:
                return work(session)

        return await run_in_threadpool(run)

    async def write(self, work: Callable[[Any], Any]) -> Any:
        def run() -> Any:
            with self.state.db.session() as session:
                return work(session)

        result = await run_in_threadpool(run)
        self.state.control.nudge()
        return result

    # -- signing in ---------------------------------------------------------------------

    async def home(self, request: Request) -> Response:
        caller = await self._caller(request)
        if caller is None:
            return RedirectResponse(f"{sessions.PATH}/signin", 303)
        landing = "/fleet" if caller.session.operator else "/jobs"
        return RedirectResponse(sessions.PATH + landing, 303)

    async def signin(self, request: Request) -> Response:
        target = request.query_params.get("next", "")
        # Only back into the console: never a redirect to somewhere else.
        if not re.fullmatch(r"/console(/[^\s]*)?", target) or target.startswith("//"):
            target = f"{sessions.PATH}/"
        region = self.state.settings.default_region
        if request.method == "GET":
            return self.render(request, None, "signin.html", region=region, next=target)
        form = await request.form()
        kind = str(form.get("kind", "key"))
        region = str(form.get("region") or region)[:32]
        principal: str | None = None
        if kind == "operator":
            presented = str(form.get("operator_key", ""))
            if presented and hmac.compare_digest(presented, self.state.operator_token):
                principal = sessions.OPERATOR
        else:
            key_id = str(form.get("access_key_id", "")).strip()[:128]
            secret = str(form.get("secret_access_key", ""))
            record = await run_in_threadpool(self.dispatcher.keys.get, key_id) if key_id else None
            if record is not None and hmac.compare_digest(
                secret.encode(), record.secret_access_key.encode()
            ):
                principal = key_id
        if principal is None:
            return self.render(
                request,
                None,
                "signin.html",
                401,
                region=region,
                next=target,
                error="That key is not right. Check it and try again.",
            )
        made = sessions.new(principal, region, wall_now().timestamp())
        response = RedirectResponse(target, 303)
        response.set_cookie(
            sessions.COOKIE,
            sessions.seal(self.state.box, made),
            max_age=sessions.SESSION_SECONDS,
            path=sessions.PATH,
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )
        return response

    async def signout(self, request: Request, caller: Caller) -> Response:
        response = RedirectResponse(f"{sessions.PATH}/signin", 303)
        response.delete_cookie(sessions.COOKIE, path=sessions.PATH)
        return response

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
        return {name: _utc(moment) or moment for name, moment in found.items()}

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
        charts = []
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
            if definitions and stream_name.split("/", 1)[-1].startswith("algo-1"):
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
        for metric, values in metric_rules.series(definitions, events_for_metrics).items():
            drawn = views.chart(metric, values)
            if drawn is not None:
                charts.append(drawn)
        live = job.get("TrainingJobStatus") in ("InProgress", "Stopping") or (
            (job.get("WarmPoolStatus") or {}).get("Status") in ("Available", "InUse")
        )
        return self.render(
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
        """SageMaker's "Release cluster": the keep-alive period set to 0 (SPEC §5.7)."""
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

    # -- training plans -----------------------------------------------------------------

    async def plans(self, request: Request, caller: Caller) -> Response:
        listed = await self.call(caller, "SageMaker.ListTrainingPlans", MaxResults=100)
        plans = listed.get("TrainingPlanSummaries", [])
        spans = [
            span
            for plan in plans
            for block in plan.get("ReservedCapacitySummaries", [])
            if (span := _block_span(plan["TrainingPlanName"], "", block)) is not None
        ]
        axis, bars = _timeline(spans, self._now())
        return self.render(request, caller, "plans.html", plans=plans, axis=axis, bars=bars)

    async def search(self, request: Request, caller: Caller) -> Response:
        types = await self.read(lambda _s: quotas.instance_types(self.state.plans))
        now = self._now()
        values: dict[str, Any] = {
            "instance_type": "ml.p5.48xlarge" if "ml.p5.48xlarge" in types else types[0],
            "count": 1,
            "target": "training-job",
            "duration": 24,
            "start_after": (now + timedelta(days=1)).strftime("%Y-%m-%d"),
            "end_before": (now + timedelta(days=15)).strftime("%Y-%m-%d"),
            "plan_name": "",
        }
        offerings: list[dict[str, Any]] = []
        error = None
        source = request.query_params if request.method == "GET" else await request.form()
        values.update({k: str(source[k]) for k in values if k in source})
        if request.method == "POST" and source.get("offering"):
            await self.call(
                caller,
                "SageMaker.CreateTrainingPlan",
                TrainingPlanName=values["plan_name"].strip(),
                TrainingPlanOfferingId=str(source["offering"]),
            )
            self.state.control.nudge()
            target = f"{sessions.PATH}/plans/{quote(values['plan_name'].strip())}"
            return RedirectResponse(target, 303)
        if "instance_type" in source:
            try:
                params = {
                    "InstanceType": values["instance_type"],
                    "InstanceCount": int(values["count"]),
                    "DurationHours": int(values["duration"]),
                    "TargetResources": [values["target"]],
                    "StartTimeAfter": datetime.fromisoformat(values["start_after"])
                    .replace(tzinfo=UTC)
                    .timestamp(),
                    "EndTimeBefore": datetime.fromisoformat(values["end_before"])
                    .replace(tzinfo=UTC)
                    .timestamp(),
                }
            except ValueError:
                error = "Count and duration are whole numbers; dates are YYYY-MM-DD."
            else:
                found = await self.call(caller, "SageMaker.SearchTrainingPlanOfferings", **params)
                offerings = found.get("TrainingPlanOfferings", [])
        axis, bars = _timeline(
            [
                span
                for index, offering in enumerate(offerings, 1)
                for block in offering.get("ReservedCapacityOfferings", [])
                if (span := _block_span(f"Offering {index}", "", block, "offered")) is not None
            ],
            now,
        )
        return self.render(
            request,
            caller,
            "search.html",
            values=values,
            types=types,
            offerings=offerings,
            axis=axis,
            bars=bars,
            error=error,
            searched="instance_type" in source,
        )

    async def plan(self, request: Request, caller: Caller) -> Response:
        name = request.path_params["name"]
        plan = await self.call(caller, "SageMaker.DescribeTrainingPlan", TrainingPlanName=name)
        arn = plan["TrainingPlanArn"]
        blocks = plan.get("ReservedCapacitySummaries", [])
        listed = await self.call(
            caller,
            "SageMaker.ListTrainingJobs",
            TrainingPlanArnEquals=arn,
            MaxResults=100,
            SortBy="CreationTime",
            SortOrder="Ascending",
        )
        jobs = await self._described(caller, listed)
        clusters = (
            await self.call(caller, "SageMaker.ListClusters", TrainingPlanArn=arn, MaxResults=100)
        ).get("ClusterSummaries", [])
        now = self._now()
        per_block = []
        spans = []
        for index, block in enumerate(blocks, 1):
            span = _block_span(f"Block {index}", "", block)
            if span is not None:
                spans.append(span)
            servers: list[dict[str, Any]] = []
            if block.get("UltraServerCount"):
                servers = (
                    await self.call(
                        caller,
                        "SageMaker.ListUltraServersByReservedCapacity",
                        ReservedCapacityArn=block["ReservedCapacityArn"],
                        MaxResults=100,
                    )
                ).get("UltraServers", [])
            per_block.append(
                {
                    "index": index,
                    "block": block,
                    "jobs": [j for j in jobs if span and _ran_within(j, span[2], span[3], now)],
                    "clusters": [
                        c
                        for c in clusters
                        if span and (_utc(c.get("CreationTime")) or now) < span[3]
                    ],
                    "servers": servers,
                }
            )
        axis, bars = _timeline(spans, now)
        return self.render(
            request, caller, "plan.html", plan=plan, blocks=per_block, axis=axis, bars=bars
        )

    # -- quotas -------------------------------------------------------------------------

    async def quotas(self, request: Request, caller: Caller) -> Response:
        message = None
        if request.method == "POST":
            form = await request.form()
            try:
                desired = float(str(form.get("desired", "")))
            except ValueError:
                desired = -1.0
            if desired < 0:
                return self._refusal(
                    request, caller, "ValidationException", "The new value must be a number.", 400
                )
            made = await self.call(
                caller,
                "ServiceQuotasV20190624.RequestServiceQuotaIncrease",
                ServiceCode="sagemaker",
                QuotaCode=str(form.get("quota", "")),
                DesiredValue=desired,
            )
            message = f"Requested: {made['RequestedQuota']['QuotaName']} to {desired:g}"
        wanted = (request.query_params.get("type") or "")[:64]
        found: list[dict[str, Any]] = []
        token = None
        while True:
            page = await self.call(
                caller,
                "ServiceQuotasV20190624.ListServiceQuotas",
                ServiceCode="sagemaker",
                MaxResults=100,
                NextToken=token,
            )
            found += page.get("Quotas", [])
            token = page.get("NextToken")
            if not token:
                break
        if wanted:
            found = [q for q in found if wanted in q.get("QuotaName", "")]
        history = await self.call(
            caller,
            "ServiceQuotasV20190624.ListRequestedServiceQuotaChangeHistory",
            ServiceCode="sagemaker",
        )
        return self.render(
            request,
            caller,
            "quotas.html",
            quotas=found,
            requests=history.get("RequestedQuotas", []),
            wanted=wanted,
            message=message,
        )

    # -- operators ----------------------------------------------------------------------

    async def fleet(self, request: Request, caller: Caller) -> Response:
        message = None
        if request.method == "POST":
            form = await request.form()
            health = fleet.MAINTENANCE if form.get("action") == "start" else fleet.HEALTHY
            kind = str(form.get("instance_type") or "") or None
            zone = str(form.get("availability_zone") or "") or None
            try:
                done = await self.write(
                    lambda s: maintenance.set_health(
                        s,
                        self._now(),
                        self.state.plans,
                        health,
                        instance_type=kind,
                        availability_zone=zone,
                    )
                )
            except ValueError as exc:
                return self._refusal(request, caller, "ValidationException", str(exc), 400)
            message = (
                f"{len(done['instances'])} instance(s) now {done['health']}; "
                f"{done['terminated_warm_pools']} warm pool(s) terminated"
            )
        now = self._now()
        start, end = now - timedelta(hours=6), now + timedelta(days=3)
        instances, leases = await self.read(
            lambda s: (fleet.fleet_view(s, now), fleet.leases_between(s, start, end))
        )
        axis = views.axis(start, end, now)
        spans = [
            (
                f"{lease['instance_type']} {lease['availability_zone']}",
                f"{lease['count']}",
                _utc(lease["start"]) or start,
                _utc(lease["end"]) or end,
                lease["kind"],
                f"{lease['kind']} {lease['holder']}: {lease['count']} x {lease['instance_type']}"
                f" in {lease['availability_zone']}, {lease['start']:%m-%d %H:%M} to "
                f"{lease['end']:%m-%d %H:%M} UTC",
            )
            for lease in leases
        ]
        pools: dict[str, dict[str, Any]] = {}
        for row in instances:
            key = f"{row['instance_type']} {row['availability_zone']}"
            entry = pools.setdefault(
                key,
                {
                    "instance_type": row["instance_type"],
                    "availability_zone": row["availability_zone"],
                    "total": 0,
                    "healthy": 0,
                    "busy": 0,
                },
            )
            entry["total"] += 1
            entry["healthy"] += row["health"] == fleet.HEALTHY
            entry["busy"] += row["doing"] not in ("idle", "out of service")
        return self.render(
            request,
            caller,
            "fleet.html",
            pools=pools,
            axis=axis,
            bars=views.bars(axis, spans),
            rows=sorted(pools),
            message=message,
        )

    async def quota_requests(self, request: Request, caller: Caller) -> Response:
        message = None
        if request.method == "POST":
            form = await request.form()
            decide = quotas.approve if form.get("decision") == "approve" else quotas.deny
            request_id = str(form.get("request", ""))
            decided = await self.write(
                lambda s: decide(s, self._now(), request_id, self.state.plans)
            )
            message = f"Request {request_id} is {decided['status']}"
        rows = await self.read(lambda s: quotas.list_requests(s, self.state.plans))
        return self.render(request, caller, "quota_requests.html", requests=rows, message=message)
