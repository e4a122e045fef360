"""`POST /_dockyard/clusters/exec`: run a command on a cluster's node (dockyard's own
endpoint, what SSM's StartSession is on AWS; `dockyard clusters exec|shell` call it).

Authenticated exactly as the JSON API: a SigV4 signature (service `sagemaker`) by one
of dockyard's access keys, whose account is the only one whose clusters it finds, and
whose policy, if it has one, must allow `ssm:StartSession` on the cluster's ARN. Unlike
the JSON API's, each signature is accepted once (`replays`): a replayed request would
run its command again.

Request (JSON): {"ClusterName", "NodeId", "Command": [argv], "Stdin": base64,
"TimeoutSeconds", "WorkingDirectory"}. Answer: {"ExitCode", "Output": base64 of the
command's stdout and stderr, "OutputTruncated"}; an error is {"__type", "message"}
with an AWS-style code, as the JSON API's are.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from dockyard.api import sigv4
from dockyard.api.authorise import authorise
from dockyard.api.context import ServerState
from dockyard.api.keys import KeyCache
from dockyard.api.replays import Replayed, SeenSignatures
from dockyard.clock import wall_now
from dockyard.compute.backend import Backend
from dockyard.services import cluster_exec
from dockyard.services.accounts import KeyRecord
from dockyard.services.cluster_exec import NodeTarget
from dockyard.services.errors import ServiceError

log = logging.getLogger("dockyard.api")

PATH = "/_dockyard/clusters/exec"
# The command's stdin (1 MiB) as base64, and the rest of the request.
MAX_BODY_BYTES = 2 * 1024 * 1024
SIGNING_SERVICE = "sagemaker"


@dataclass(frozen=True)
class Caller:
    """The key that signed a request, and the region it signed for."""

    key: KeyRecord
    region: str


class Refused(Exception):
    def __init__(self, code: str, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status


class NodeCommands:
    def __init__(self, state: ServerState, keys: KeyCache) -> None:
        self.state = state
        self.keys = keys
        self.max_skew = timedelta(seconds=state.settings.max_clock_skew_seconds)
        self.seen = SeenSignatures(self.max_skew)

    def handle(
        self,
        method: str,
        raw_path: str,
        query_string: str,
        headers: Sequence[tuple[str, str]],
        body: bytes,
    ) -> tuple[int, dict[str, Any], str]:
        """(status, JSON answer, request id); never raises."""
        request_id = str(uuid.uuid4())
        try:
            return 200, self._run(method, raw_path, query_string, headers, body), request_id
        except sigv4.AuthError as exc:
            return exc.status, _error(exc.code, exc.message), request_id
        except Refused as exc:
            return exc.status, _error(exc.code, exc.message), request_id
        except ServiceError as exc:
            return exc.status, _error(exc.code, exc.message), request_id
        except Exception:
            log.exception("internal error serving %s (request %s)", PATH, request_id)
            message = (
                f"dockyard failed to process the request; the server log has request id "
                f"{request_id}"
            )
            return 500, _error("InternalFailure", message), request_id

    def _run(
        self,
        method: str,
        raw_path: str,
        query_string: str,
        headers: Sequence[tuple[str, str]],
        body: bytes,
    ) -> dict[str, Any]:
        caller = self.authenticate(method, raw_path, query_string, headers, body)
        try:
            params = json.loads(body) if body.strip() else {}
        except (ValueError, RecursionError) as exc:
            raise Refused(
                "SerializationException", f"The request body is not valid JSON: {exc}"
            ) from exc
        if not isinstance(params, dict):
            raise Refused("SerializationException", "The request body must be a JSON object")
        backend = self.backend()
        request = cluster_exec.command_from(params)
        target = self.target(caller, params.get("ClusterName"), params.get("NodeId"))
        return cluster_exec.run(backend, target, request)

    def authenticate(
        self,
        method: str,
        raw_path: str,
        query_string: str,
        headers: Sequence[tuple[str, str]],
        body: bytes,
    ) -> Caller:
        """Who signed the request (SigV4, service `sagemaker`, one of dockyard's keys),
        whose signature is spent by it: the same request again is refused."""
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
        try:
            self.seen.use(signed.signature, signed_at, wall_now())
        except Replayed as exc:
            raise Refused(exc.code, exc.message, exc.status) from exc
        return Caller(key, signed.region)

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
