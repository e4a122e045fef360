"""The web console at `/console`: training jobs and their warm pools, training plans,
quotas, and for operators the fleet and quota requests (spec §7).

Server-rendered (Jinja2) with a small script of its own for the live parts (a region
re-fetched every two seconds, countdowns): no external asset and no build step. A
person signs in with an access key (or, as an operator, the operator key); the session
is a sealed cookie (`session`) naming a row that signing out, or disabling the key,
removes (`services.console_sessions`). Every change is a form POST carrying the
session's CSRF token.

What a page shows and does is the API's own operations, run in-process for the
signed-in key through the dispatcher (`Dispatcher.call`): validated by botocore's model,
refused by the key's policy, scoped to its account exactly as through boto3. Only what
the API has no operation for is read from services directly, always for the caller's
account (a warm pool's deadline, the leases the operator's fleet picture draws).
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from dockyard.api.untrusted import same_secret
from dockyard.clock import wall_now
from dockyard.services import accounts, console_sessions
from dockyard.services.accounts import KeyRecord
from dockyard.web import session as sessions
from dockyard.web.base import HERE, Caller
from dockyard.web.operator_pages import QuotaPages
from dockyard.web.plan_pages import PlanPages


class Console(PlanPages, QuotaPages):
    """The console: its routes, and signing in and out (pages: job_pages, plan_pages,
    operator_pages; plumbing: base)."""

    def routes(self) -> list[BaseRoute]:
        """The console's routes, under /console (where the server mounts them)."""
        page = self._page
        return [
            Route("/", self.home),
            Route("/signin", self.signin, methods=["GET", "POST"]),
            Route("/signout", page(self.signout, anyone=True), methods=["POST"]),
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

        def again(status: int, error: str, **headers: str) -> Response:
            response = self.render(
                request, None, "signin.html", status, region=region, next=target, error=error
            )
            response.headers.update(headers)
            return response

        # Login CSRF: another site's page posting its own key here would sign this
        # browser in to the other site's account (SameSite stops a cookie being sent
        # with another site's top-level POST, not being set by its answer). Only the
        # console's own page may sign in.
        if not self._same_origin(request):
            return again(
                403,
                "This sign-in came from another site's page, so it was refused. "
                "Sign in here instead.",
            )
        form = await request.form()
        kind = str(form.get("kind", "key"))
        region = str(form.get("region") or region)[:32]
        address = request.client.host if request.client else "-"
        if kind == "operator":
            named: str | None = sessions.OPERATOR
        else:
            key_id = str(form.get("access_key_id", "")).strip()[:128]
            named = key_id or None
        refused = self.sign_ins.check(address, named)
        if refused is not None:
            return again(
                429,
                f"Too many wrong sign-ins from {refused.why}: try again in "
                f"{refused.retry_after} seconds.",
                **{"retry-after": str(refused.retry_after)},
            )
        principal: str | None = None
        real_key = False
        if kind == "operator":
            presented = str(form.get("operator_key", ""))
            real_key = True
            if presented and same_secret(presented, self.state.operator_token):
                principal = sessions.OPERATOR
        elif named is not None:
            secret = str(form.get("secret_access_key", ""))
            record = await run_in_threadpool(self.dispatcher.keys.get, named)
            if record is None:
                record = await run_in_threadpool(self._key_in_any_state, named)
                if record is not None and same_secret(secret, record.secret_access_key):
                    return again(
                        403,
                        "This access key is disabled. An operator can enable it again "
                        "(dockyard keys enable).",
                    )
            real_key = record is not None
            if record is not None and same_secret(secret, record.secret_access_key):
                principal = named
        if principal is None:
            self.sign_ins.failed(address, named if real_key else None)
            return again(401, "That key is not right. Check it and try again.")
        now = wall_now()
        session_id = await run_in_threadpool(
            self._begin_session, principal, now, now + timedelta(seconds=sessions.SESSION_SECONDS)
        )
        made = sessions.new(
            principal, region, now.timestamp(), session_id, self.state.operator_token
        )
        response = RedirectResponse(target, 303)
        response.set_cookie(
            sessions.COOKIE,
            sessions.seal(self.state.box, made),
            max_age=sessions.SESSION_SECONDS,
            **self._cookie_options(request),
        )
        return response

    # -- sessions that have not ended (services.console_sessions) ----------------------

    async def _caller(self, request: Request) -> Caller | None:
        """The signed-in caller, if their cookie's session has not ended: its row is
        still there (not signed out, its key not disabled or deleted since), and an
        operator's was signed in with the operator key in use now."""
        caller = await super()._caller(request)
        if caller is None:
            return None
        found = caller.session
        if found.operator and not found.holds_operator_key(self.state.operator_token):
            return None
        if not await run_in_threadpool(self._session_live, found):
            return None
        return caller

    def _begin_session(self, principal: str, now: datetime, expires_at: datetime) -> str:
        with self.state.db.session() as session:
            return console_sessions.begin(session, now, principal, expires_at)

    def _session_live(self, found: sessions.Session) -> bool:
        with self.state.db.read() as connection:
            return console_sessions.live(connection, found.session_id, found.principal, wall_now())

    def _end_session(self, session_id: str) -> None:
        with self.state.db.session() as session:
            console_sessions.end(session, session_id)

    def _key_in_any_state(self, access_key_id: str) -> KeyRecord | None:
        """The key if it exists at all (asked when the cache, which holds only Active
        keys, has none: to tell a disabled key's owner so)."""
        with self.state.db.read() as connection:
            return accounts.lookup_key(
                connection, self.state.box, access_key_id, active_only=False
            )

    async def signout(self, request: Request, caller: Caller) -> Response:
        # Ended here, not only in this browser: a copy of the cookie is worth nothing now.
        await run_in_threadpool(self._end_session, caller.session.session_id)
        response = RedirectResponse(f"{sessions.PATH}/signin", 303)
        response.delete_cookie(sessions.COOKIE, **self._cookie_options(request))
        return response
