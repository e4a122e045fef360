"""The console's training-plan pages: plans on a timeline, offering search and buying,
a plan's page."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from dockyard.services import quotas
from dockyard.web import session as sessions
from dockyard.web import views
from dockyard.web.base import Caller, as_utc
from dockyard.web.job_pages import JobPages

Span = tuple[str, str, datetime, datetime, str, str]


def _block_span(row: str, label: str, block: dict[str, Any], kind: str = "") -> Span | None:
    """A reserved capacity (a plan's block, or an offering's) as a bar on a timeline."""
    start, end = as_utc(block.get("StartTime")), as_utc(block.get("EndTime"))
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
    began = as_utc(job.get("TrainingStartTime"))
    ended = as_utc(job.get("TrainingEndTime")) or now
    return began is not None and began < end and ended > start


class PlanPages(JobPages):
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
                        if span and (as_utc(c.get("CreationTime")) or now) < span[3]
                    ],
                    "servers": servers,
                }
            )
        axis, bars = _timeline(spans, now)
        return self.render(
            request, caller, "plan.html", plan=plan, blocks=per_block, axis=axis, bars=bars
        )
