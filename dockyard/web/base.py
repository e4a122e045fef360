"""The console's plumbing: who is calling, rendering a page, and running the API's
operations for the signed-in key (see `console`)."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.templating import Jinja2Templates

from dockyard.api.context import ServerState
from dockyard.api.dispatch import ApiError, Dispatcher
from dockyard.api.shapes import ValidationError
from dockyard.clock import wall_now
from dockyard.services.accounts import KeyRecord
from dockyard.services.errors import ServiceError
from dockyard.web import session as sessions
from dockyard.web import views
from dockyard.web.limits import SignInLimiter

log = logging.getLogger("dockyard.web")

HERE = Path(__file__).parent


@dataclass(frozen=True)
class Caller:
    session: sessions.Session
    key: KeyRecord | None  # None for the operator

    @property
    def account_id(self) -> str | None:
        return self.key.account_id if self.key else None


Page = Callable[[Request, Caller], Awaitable[Response]]


def as_utc(moment: Any) -> datetime | None:
    if isinstance(moment, datetime):
        return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    return None


class ConsoleBase:
    """What every page uses."""

    def __init__(self, state: ServerState, dispatcher: Dispatcher) -> None:
        self.state = state
        self.dispatcher = dispatcher
        self.sign_ins = SignInLimiter()
        self.templates = Jinja2Templates(directory=str(HERE / "templates"))
        env = self.templates.env
        env.filters["duration"] = views.duration
        env.filters["when"] = lambda m: m.strftime("%Y-%m-%d %H:%M:%S") if m else "-"
        env.filters["iso"] = lambda m: m.isoformat() if m else ""
        env.filters["short_arn"] = lambda arn: str(arn or "").rsplit("/", 1)[-1] or "-"

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
        """Whether a form POST came from one of the console's own pages: its Origin (a
        browser sends one with every POST; "null" from an opaque origin is another's),
        else its Referer, else the browser's Sec-Fetch-Site. A request with none of
        them is no browser's form (curl, a script) and cannot be a forged one."""
        host = request.headers.get("host", "")
        origin = request.headers.get("origin")
        if origin is not None:
            return bool(host) and urlsplit(origin).netloc == host
        referer = request.headers.get("referer")
        if referer:
            return bool(host) and urlsplit(referer).netloc == host
        site = request.headers.get("sec-fetch-site")
        if site is not None:
            return site in ("same-origin", "none")  # "none": typed, or a bookmark
        return True

    @staticmethod
    def _cookie_options(request: Request) -> dict[str, Any]:
        """The session cookie's attributes. Secure when the browser reached us over
        https: directly, or through a TLS-terminating proxy that `forwarded_allow_ips`
        trusts to say so (X-Forwarded-Proto; docs/console.md)."""
        return {
            "path": sessions.PATH,
            "httponly": True,
            "samesite": "strict",
            "secure": request.url.scheme == "https",
        }

    def _page(
        self, handler: Page, operator: bool = False, anyone: bool = False
    ) -> Callable[[Request], Any]:
        """An endpoint for a page: signed in (else to the sign-in page), the CSRF token
        on a POST, the right kind of session (an operator's pages, or an account's;
        `anyone` for either), and refusals shown as pages."""

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
            if not anyone and operator != caller.session.operator:
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
