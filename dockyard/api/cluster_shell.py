"""`GET /_dockyard/clusters/shell` (a WebSocket): an interactive shell, with a terminal,
on a cluster's node - what `aws ssm start-session` is on AWS (`dockyard clusters shell`).

The upgrade request is authenticated as `POST /_dockyard/clusters/exec` is (it is the
same code, `NodeCommands`): SigV4 (service `sagemaker`) over its method, path, query and
headers with an empty body, signed within 5 minutes of the server's time and each
signature accepted once (`replays`; spent only by an upgrade that opens a shell); the
cluster is found in the key's account only, the key's policy must allow
`ssm:StartSession` on the cluster's ARN, and the node must be Running.
The query names the node: `ClusterName`, `NodeId`, and optionally the terminal's `Rows`,
`Cols` and `Term`, and `LineEditing=false` for input that is not typed at a terminal
(bash then reads whole lines, so the end of piped input ends it). A refused upgrade is
answered before it happens, as HTTP 4xx with the exec endpoint's JSON error (or, where
the server cannot, accepted then closed with code 4000 + that status and the error as a
text message first).

Then: binary messages are terminal bytes, both ways. The client's text messages are
JSON: {"Rows": r, "Cols": c} (its window changed) or {"Eof": true} (its input ended: the
terminal's EOF character is typed). When the shell exits the server sends
{"ExitCode": n} and closes (1000); an error is {"__type", "message"}, then a close with
4000 + its status. A client that goes away ends the shell (its sandbox is killed), and
so does disabling or deleting the key that opened it (within KEY_CHECK_SECONDS: an
UnrecognizedClientException, closed with 4403).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
import struct
from collections.abc import Sequence
from concurrent.futures import Executor
from typing import Any
from urllib.parse import parse_qs

from starlette.responses import JSONResponse
from starlette.websockets import WebSocket, WebSocketDisconnect

from dockyard.api import sigv4
from dockyard.api.cluster_exec import NodeCommands, Refused
from dockyard.api.untrusted import ascii_int
from dockyard.compute.wire import shell as shell_wire
from dockyard.services import cluster_exec
from dockyard.services.errors import ServiceError, ValidationException

log = logging.getLogger("dockyard.api")

PATH = "/_dockyard/clusters/shell"
DEFAULT_ROWS = 24
DEFAULT_COLS = 80
# Closing codes: 4000 + the HTTP status an error would have had.
CLOSE_BASE = 4000
# How often an open session checks that its key is still Active.
KEY_CHECK_SECONDS = 2.0


class Failure(Exception):
    def __init__(self, status: int, answer: dict[str, Any]) -> None:
        super().__init__(answer.get("message"))
        self.status = status
        self.answer = answer


class NodeShells:
    def __init__(self, commands: NodeCommands, executor: Executor) -> None:
        self.commands = commands
        self.executor = executor

    def open(
        self, raw_path: str, query_string: str, headers: Sequence[tuple[str, str]]
    ) -> tuple[socket.socket, dict[str, Any], str]:
        """The session's socket to the node's agent, the terminal it asked for and the
        access key that signed it; Failure (status, JSON error) if it may not have one.
        Blocks (a worker thread)."""
        try:
            caller = self.commands.authenticate("GET", raw_path, query_string, headers, b"")
            query = _query(query_string)
            terminal = _terminal(query)
            backend = self.commands.backend()
            target = self.commands.target(caller, query.get("ClusterName"), query.get("NodeId"))
            self.commands.spend(caller)  # only an upgrade that will open a shell
            sock = cluster_exec.open_shell(backend, target)
            return sock, terminal, caller.key.access_key_id
        except sigv4.AuthError as exc:
            raise Failure(exc.status, _error(exc.code, exc.message)) from exc
        except (Refused, ServiceError) as exc:
            raise Failure(exc.status, _error(exc.code, exc.message)) from exc
        except Exception as exc:
            log.exception("internal error opening a shell (%s)", PATH)
            raise Failure(
                500, _error("InternalFailure", "dockyard failed to open the shell")
            ) from exc

    async def serve(self, websocket: WebSocket) -> str:
        """One session, from the upgrade to the close; answers its outcome's code."""
        scope = websocket.scope
        try:
            sock, terminal, key_id = await asyncio.get_running_loop().run_in_executor(
                self.executor,
                self.open,
                scope.get("raw_path", b"/").decode("latin-1") or scope["path"],
                scope.get("query_string", b"").decode("latin-1"),
                [(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope["headers"]],
            )
        except Failure as failure:
            await _deny(websocket, failure)
            return str(failure.answer["__type"])
        try:
            await websocket.accept()
            # A Unix socket to a local agent, TCP to a Ray node's relay: both streams.
            reader, writer = await asyncio.open_connection(sock=sock)
        except BaseException:
            sock.close()
            raise
        try:
            writer.write(json.dumps(terminal).encode() + b"\n")
            await writer.drain()
            from_client = asyncio.ensure_future(_client_to_node(websocket, writer))
            from_node = asyncio.ensure_future(_node_to_client(reader, websocket))
            key_gone = asyncio.ensure_future(self._key_gone(key_id))
            done, _ = await asyncio.wait(
                [from_client, from_node, key_gone], return_when=asyncio.FIRST_COMPLETED
            )
            key_gone.cancel()
            if key_gone in done and from_node not in done:
                from_client.cancel()
                from_node.cancel()
                answer = _error(
                    "UnrecognizedClientException",
                    f"The access key {key_id} was disabled or deleted: the session ended.",
                )
                await _close(websocket, 403, answer)
                return "UnrecognizedClientException"
            if from_node not in done:
                from_client_result = from_client.result()
                from_node.cancel()
                if from_client_result is not None:  # the client broke the protocol
                    await _close(websocket, 400, _error("ValidationException", from_client_result))
                    return "ValidationException"
                return "ClientClosed"
            from_client.cancel()
            outcome = from_node.result()
            if "ExitCode" in outcome:
                with contextlib.suppress(Exception):
                    await websocket.send_text(json.dumps(outcome))
                    await websocket.close(1000, f"exit {outcome['ExitCode']}")
                return "OK"
            await _close(websocket, 409, outcome)
            return str(outcome["__type"])
        finally:
            writer.close()  # the agent kills the shell if it still runs
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _key_gone(self, access_key_id: str) -> None:
        """Return once the key that opened the session is disabled or deleted: a
        revoked key keeps no shell (looked at every KEY_CHECK_SECONDS, from the key
        cache, which sees a revocation at once)."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(KEY_CHECK_SECONDS)
            try:
                found = await loop.run_in_executor(
                    self.executor, self.commands.keys.get, access_key_id
                )
            except Exception:  # the database is away: the key is not known to be gone
                log.warning("could not look up the key of an open shell", exc_info=True)
                continue
            if found is None:
                return


async def _client_to_node(websocket: WebSocket, writer: asyncio.StreamWriter) -> str | None:
    """Relay the client's messages until it goes; a broken message's reason, else None."""
    while True:
        message = await websocket.receive()
        if message["type"] == "websocket.disconnect":
            return None
        data = message.get("bytes")
        if data is not None:
            writer.write(shell_wire.frame(shell_wire.DATA, data))
        else:
            text = message.get("text") or ""
            try:
                control = json.loads(text)
            except (ValueError, RecursionError):
                return 'a text message must be JSON: {"Rows", "Cols"} or {"Eof": true}'
            if not isinstance(control, dict):
                return "a text message must be a JSON object"
            if control.get("Eof") is True:
                writer.write(shell_wire.frame(shell_wire.EOF))
            elif "Rows" in control or "Cols" in control:
                rows, cols = control.get("Rows"), control.get("Cols")
                if not all(_dimension(n) for n in (rows, cols)):
                    return "Rows and Cols must be whole numbers from 1 to 65535"
                writer.write(shell_wire.frame(shell_wire.WINDOW, struct.pack("!HH", rows, cols)))
            else:
                return 'a text message must be {"Rows", "Cols"} or {"Eof": true}'
        await writer.drain()


async def _node_to_client(reader: asyncio.StreamReader, websocket: WebSocket) -> dict[str, Any]:
    """Relay the shell's terminal until it ends: {"ExitCode"} or an error to send."""
    why = ""
    while True:
        try:
            header = await reader.readexactly(shell_wire.HEADER.size)
            kind, size = shell_wire.HEADER.unpack(header)
            payload = await reader.readexactly(size) if size else b""
        except (asyncio.IncompleteReadError, ConnectionError):
            return _error("ConflictException", why or "the node stopped during the session")
        if kind == shell_wire.DATA:
            try:
                await websocket.send_bytes(payload)
            except (WebSocketDisconnect, RuntimeError, OSError):
                await asyncio.Event().wait()  # the client's side sees it go
        elif kind == shell_wire.ERROR:
            why = payload.decode(errors="replace")
        elif kind == shell_wire.EXIT and len(payload) == 4:
            if why:
                return _error("ConflictException", why)
            (code,) = struct.unpack("!i", payload)
            return {"ExitCode": code}


def _query(query_string: str) -> dict[str, str]:
    try:
        parsed = parse_qs(query_string, keep_blank_values=True, strict_parsing=bool(query_string))
    except ValueError as exc:
        raise ValidationException(f"The query string cannot be read: {exc}") from exc
    query = {}
    for name, values in parsed.items():
        if len(values) != 1:
            raise ValidationException(f"{name} must be given once")
        query[name] = values[0]
    return query


def _dimension(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 < value < 65536


def _terminal(query: dict[str, str]) -> dict[str, Any]:
    size = {}
    for name, default in (("Rows", DEFAULT_ROWS), ("Cols", DEFAULT_COLS)):
        # ASCII digits only: "²" passes str.isdigit() and fails int(), and int() of
        # 5,000 digits raises too.
        value = ascii_int(query.get(name, str(default)), 1, 65535)
        if value is None:
            raise ValidationException(f"{name} must be a whole number from 1 to 65535")
        size[name.lower()] = value
    term = query.get("Term", shell_wire.DEFAULT_TERM)
    if not shell_wire.valid_term(term):
        raise ValidationException("Term must name a terminal type (letters, digits, ._+-)")
    editing = query.get("LineEditing", "true")
    if editing not in ("true", "false"):
        raise ValidationException("LineEditing must be true or false")
    return {**size, "term": term, "editing": editing == "true"}


async def _deny(websocket: WebSocket, failure: Failure) -> None:
    if "websocket.http.response" in websocket.scope.get("extensions", {}):
        await websocket.send_denial_response(JSONResponse(failure.answer, failure.status))
        return
    await websocket.accept()
    await _close(websocket, failure.status, failure.answer)


async def _close(websocket: WebSocket, status: int, answer: dict[str, Any]) -> None:
    with contextlib.suppress(Exception):
        await websocket.send_text(json.dumps(answer))
        reason = f"{answer['__type']}: {answer['message']}".encode()[:123]
        await websocket.close(CLOSE_BASE + status, reason.decode(errors="ignore"))


def _error(code: str, message: str) -> dict[str, Any]:
    return {"__type": code, "message": message}
