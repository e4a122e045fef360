"""The console's quota pages, and the operators': the fleet's leases and maintenance,
quota requests."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from dockyard.services import fleet, maintenance, quotas
from dockyard.web import views
from dockyard.web.base import Caller, ConsoleBase, as_utc


class QuotaPages(ConsoleBase):
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
                as_utc(lease["start"]) or start,
                as_utc(lease["end"]) or end,
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
