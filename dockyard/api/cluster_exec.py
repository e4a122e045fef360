"""`POST /_dockyard/clusters/exec`: run a command on a cluster's node (dockyard's own
endpoint, what SSM's StartSession is on AWS; `dockyard clusters exec|shell` call it).

Authenticated exactly as the JSON API: a SigV4 signature (service `sagemaker`) by one
of dockyard's access keys, whose account is the only one whose clusters it finds, and
whose policy, if it has one, must allow `ssm:StartSession` on the cluster's ARN. Unlike
the JSON API's, the signature must be within 5 minutes of the server's real time
(`replays.WINDOW`, not SigV4's 15), and is accepted once (`replays`): a replayed request
would run its command again. The signature is spent only by a request that will run -
valid, for a Running node of the key's account its policy allows - so requests that
fail cost nothing to remember.

A command waits for its node on the event loop (`serve`): the short steps - checking
the request, starting the command, each look at whether it ended - run on the
executor, and nothing holds a thread while the command runs, so however many commands
one tenant runs for however long, another's `echo` answers at once (issue 25: sixteen
`sleep 40` of one account once held every exec thread, and another account's `echo`
waited 38 s). An account runs at most `MAX_RUNNING_PER_ACCOUNT` commands at once; the
next is refused with 429 ThrottlingException until one ends.

Request (JSON): {"ClusterName", "NodeId", "Command": [argv], "Stdin": base64,
"TimeoutSeconds", "WorkingDirectory"}. Answer: {"ExitCode", "Output": base64 of the
command's stdout and stderr, "OutputTruncated"}; an error is {"__type", "message"}
with an AWS-style code, as the JSON API's are.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import uuid
from collections.abc import Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from dockyard.api import replays, sigv4, untrusted
from dockyard.api.authorise import authorise
from dockyard.api.context import ServerState
from dockyard.api.keys import KeyCache
from dockyard.api.replays import Replayed, SeenSignatures
from dockyard.clock import monotonic, wall_now
from dockyard.compute.backends.protocol import Backend
from dockyard.compute.wire.exec import ExecRequest
from dockyard.services import cluster_exec
from dockyard.services.accounts import KeyRecord
from dockyard.services.cluster_exec import NodeTarget
from dockyard.services.errors import ServiceError

log = logging.getLogger("dockyard.api")

PATH = "/_dockyard/clusters/exec"
# The command's stdin (1 MiB) as base64, and the rest of the request.
MAX_BODY_BYTES = 2 * 1024 * 1024
SIGNING_SERVICE = "sagemaker"


# Commands one account may have running at once: a few per person, so that one
# tenant's load stays its own (issue 25).
MAX_RUNNING_PER_ACCOUNT = 8


@dataclass(frozen=True)
class Caller:
    """The key that signed a request, the region it signed for, and its signature (to
    spend once the request is known to run)."""

    key: KeyRecord
    region: str
    signature: str
    signed_at: datetime


class Refused(Exception):
    def __init__(self, code: str, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status


class RunningCommands:
    """How many commands each account runs now, held to a limit."""

    def __init__(self, limit: int = MAX_RUNNING_PER_ACCOUNT) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._running: dict[str, int] = {}

    def take(self, account_id: str) -> None:
        with self._lock:
            running = self._running.get(account_id, 0)
            if running >= self.limit:
                raise Refused(
                    "ThrottlingException",
                    f"Account {account_id} already runs {running} commands on its nodes, "
                    f"the most it may run at once; wait for one to end and try again.",
                    429,
                )
            self._running[account_id] = running + 1

    def give_back(self, account_id: str) -> None:
        with self._lock:
            left = self._running.get(account_id, 1) - 1
            if left > 0:
                self._running[account_id] = left
            else:
                self._running.pop(account_id, None)


@dataclass(frozen=True)
class Started:
    """A command handed to its node, which counts against its account until it ends."""

    account_id: str
    backend: Backend
    target: NodeTarget
    request: ExecRequest
    exec_id: str


class NodeCommands:
    def __init__(self, state: ServerState, keys: KeyCache) -> None:
        self.state = state
        self.keys = keys
        self.max_skew = min(
            timedelta(seconds=state.settings.max_clock_skew_seconds), replays.WINDOW
        )
        self.seen = SeenSignatures(self.max_skew)
        self.running = RunningCommands()

    async def serve(
        self,
        executor: Executor,
        method: str,
        raw_path: str,
        query_string: str,
        headers: Sequence[tuple[str, str]],
        body: bytes,
    ) -> tuple[int, dict[str, Any], str]:
        """(status, JSON answer, request id) of one exec request; never raises. Waits for
        the command without holding a thread (see the module's docstring)."""
        request_id = str(uuid.uuid4())
        loop = asyncio.get_running_loop()
        try:
            started = await loop.run_in_executor(
                executor, self._start, method, raw_path, query_string, headers, body
            )
            try:
                return 200, await self._wait(executor, started), request_id
            finally:
                self.running.give_back(started.account_id)
        except sigv4.AuthError as exc:
            return exc.status, _error(exc.code, exc.message), request_id
        except (Refused, ServiceError) as exc:
            return exc.status, _error(exc.code, exc.message), request_id
        except Exception:
            log.exception("internal error serving %s (request %s)", PATH, request_id)
            message = (
                f"dockyard failed to process the request; the server log has request id "
                f"{request_id}"
            )
            return 500, _error("InternalFailure", message), request_id

    def _start(
        self,
        method: str,
        raw_path: str,
        query_string: str,
        headers: Sequence[tuple[str, str]],
        body: bytes,
    ) -> Started:
        """Check the request, spend its signature and hand its command to the node (a
        worker thread: short)."""
        caller = self.authenticate(method, raw_path, query_string, headers, body)
        try:
            params = untrusted.read_json(body)
        except untrusted.BodyError as exc:
            raise Refused("SerializationException", exc.message) from exc
        if not isinstance(params, dict):
            raise Refused("SerializationException", "The request body must be a JSON object")
        backend = self.backend()
        request = cluster_exec.command_from(params)
        target = self.target(caller, params.get("ClusterName"), params.get("NodeId"))
        account_id = caller.key.account_id
        self.running.take(account_id)
        try:
            self.spend(caller)
            exec_id = cluster_exec.start(backend, target, request)
        except BaseException:
            self.running.give_back(account_id)
            raise
        return Started(account_id, backend, target, request, exec_id)

    async def _wait(self, executor: Executor, started: Started) -> dict[str, Any]:
        """The command's answer, looked for on the executor, waited for here."""
        loop = asyncio.get_running_loop()
        begun = monotonic()
        deadline = begun + started.request.timeout + cluster_exec.GRACE_SECONDS
        delay = 0.005
        try:
            while True:
                answer = await loop.run_in_executor(
                    executor,
                    cluster_exec.outcome,
                    started.backend,
                    started.target,
                    started.exec_id,
                    started.request,
                    deadline,
                )
                if answer is not None:
                    return answer
                await asyncio.sleep(delay)
                # Quick for a quick command; a long one is looked at twice a second.
                delay = min(delay * 2, 0.1 if monotonic() - begun < 10 else 0.5)
        except asyncio.CancelledError:  # the server is stopping: the command goes too
            cluster_exec.cancel(started.backend, started.target, started.exec_id)
            raise

    def authenticate(
        self,
        method: str,
        raw_path: str,
        query_string: str,
        headers: Sequence[tuple[str, str]],
        body: bytes,
    ) -> Caller:
        """Who signed the request (SigV4, service `sagemaker`, one of dockyard's keys,
        within `max_skew` of now). Its signature is not spent yet: `spend` does that,
        once the request is known to run."""
        signed, key = self.keys.verify(
            method, raw_path, query_string, headers, body, self.max_skew
        )
        if signed.service != SIGNING_SERVICE:
            raise Refused(
                "InvalidSignatureException",
                f"Credential should be scoped to correct service: '{SIGNING_SERVICE}'.",
                403,
            )
        _, signed_at = sigv4.request_time({name.lower(): value for name, value in headers})
        return Caller(key, signed.region, signed.signature, signed_at)

    def spend(self, caller: Caller) -> None:
        """Use up the caller's signature (in its key's ledger): the same request again is
        refused."""
        try:
            self.seen.use(caller.key.access_key_id, caller.signature, caller.signed_at, wall_now())
        except Replayed as exc:
            raise Refused(exc.code, exc.message, exc.status) from exc

    def backend(self) -> Backend:
        if self.state.backend is None:
            raise Refused("NotImplementedException", "This server runs no cluster nodes", 501)
        return self.state.backend

    def target(self, caller: Caller, cluster_name: Any, node_id: Any) -> NodeTarget:
        """The caller's Running node, once its policy allows `ssm:StartSession` on the
        cluster (a cluster of another account is not found)."""
        key = caller.key
        with self.state.db.read_session() as session:
            target = cluster_exec.locate(
                session, self.backend(), key.account_id, caller.region, cluster_name, node_id
            )
        authorise(
            key.policy,
            "ssm",
            "StartSession",
            caller.region,
            key.account_id,
            {"ResourceArn": target.cluster_arn},
            access_key_id=key.access_key_id,
        )
        return target


def _error(code: str, message: str) -> dict[str, Any]:
    return {"__type": code, "message": message}
