"""One API request, start to end: verify, route, validate, handle, serialise.

Runs synchronously (in a worker thread): every step is short, and handlers only
record intent in the database. Every failure becomes an AWS-shaped error; an
unexpected exception is logged with its request id and answered as
InternalFailure without a traceback.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

from dockyard.api import query, sigv4
from dockyard.api.authorise import authorise
from dockyard.api.context import RequestContext, ServerState
from dockyard.api.keys import KeyCache
from dockyard.api.serialise import serialise_output
from dockyard.api.shapes import ValidationError, parse_input
from dockyard.api.targets import ServiceTarget, query_targets, targets
from dockyard.api.tokens import BadToken, TokenSeal
from dockyard.api.untrusted import BodyError, read_json
from dockyard.services import clusters
from dockyard.services.accounts import KeyRecord
from dockyard.services.errors import ServiceError
from dockyard.store.tables import TrainingPlanOffering

log = logging.getLogger("dockyard.api")

CONTENT_TYPE = "application/x-amz-json-1.1"
# Enforced by the app before a body is read (api/app.py), so never past the limit.
MAX_BODY_BYTES = 4 * 1024 * 1024
READ_ONLY_PREFIXES = ("Describe", "List", "Get")
# Reads that also read an instance's files (its log): never on the event loop, where a
# slow disk or a big read would hold up every other request. (DescribeTrainingJob reads
# its metrics from the database; only a job that ended before they were kept there has
# them read from the instances' small metrics files.)
READS_FILES = frozenset({"GetLogEvents", "DescribeLogStreams"})


# What the metrics call a request whose X-Amz-Target names no operation of any service
# dockyard serves: a label per target would let anyone add label sets without end.
UNKNOWN_OPERATION = "unknown"


def operation_label(target: str) -> str:
    """The X-Amz-Target if it names an operation of a service dockyard serves (one of
    the models' few hundred: a bounded set), else one fixed value."""
    if not target:
        return "-"
    prefix, _, name = target.rpartition(".")
    service = targets().get(prefix)
    if service is None or name not in service.model.operation_names:
        return UNKNOWN_OPERATION
    return target


def known_operations() -> frozenset[str]:
    """Every label `Dispatcher.handle` may give a request: each JSON operation as
    X-Amz-Target names it, each query one as `<service>.<Action>`, "-" and "unknown"."""
    names = {"-", UNKNOWN_OPERATION}
    for prefix, service in targets().items():
        names.update(f"{prefix}.{name}" for name in service.model.operation_names)
    for service in query_targets().values():
        names.update(f"{service.model.service_name}.{name}" for name in service.handlers)
    return frozenset(names)


def reads_only_the_database(target: str) -> bool:
    """Whether an X-Amz-Target names an operation that only reads the database."""
    operation = target.rpartition(".")[2]
    return operation.startswith(READ_ONLY_PREFIXES) and operation not in READS_FILES


class ApiError(Exception):
    def __init__(self, code: str, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status


@dataclass
class Response:
    status: int
    body: bytes
    request_id: str
    operation: str
    code: str
    content_type: str = CONTENT_TYPE

    @property
    def headers(self) -> dict[str, str]:
        headers = {"content-type": self.content_type, "x-amzn-requestid": self.request_id}
        if self.status >= 400:
            headers["x-amzn-errortype"] = self.code
        return headers


# A request the model refuses, in the words of the services that name it otherwise
# (ECR answers a bad repository name or a missing member with InvalidParameterException).
_VALIDATION_CODES = {"ecr": "InvalidParameterException"}


# What STS and IAM call the failures the JSON services name otherwise.
_QUERY_CODES = {
    "InvalidSignatureException": "SignatureDoesNotMatch",
    "UnrecognizedClientException": "InvalidClientTokenId",
    "IncompleteSignatureException": "IncompleteSignature",
}


def _error(
    request_id: str, operation: str, code: str, message: str, status: int, xml: bool = False
) -> Response:
    if xml:  # the query protocol's (STS, IAM) error document, in its services' codes
        code = _QUERY_CODES.get(code, code)
        return Response(
            status, query.error(code, message, request_id), request_id, operation, code, "text/xml"
        )
    body = json.dumps({"__type": code, "message": message}).encode()
    return Response(status, body, request_id, operation, code)


def _protocol(headers: Sequence[tuple[str, str]]) -> tuple[str, bool]:
    """The request's X-Amz-Target, and whether it is the query protocol (no target,
    signed for STS or IAM), whose errors are XML."""
    target = next((v for k, v in headers if k.lower() == "x-amz-target"), "")
    if target:
        return target, False
    authorization = next((v for k, v in headers if k.lower() == "authorization"), "")
    scope = sigv4.credential_scope(authorization)
    return target, scope is not None and scope[1] in query_targets()


class _DatabaseLookup:
    """What authorising a request looks up (`authorise.Lookup`), in the caller's
    account and region: read only when the key has a policy and the request names it."""

    def __init__(self, state: ServerState, account_id: str, region: str) -> None:
        self.state = state
        self.account_id = account_id
        self.region = region

    def cluster_arn(self, name: str) -> str | None:
        with self.state.db.read_session() as session:
            try:
                return clusters.find(session, self.account_id, self.region, name).arn
            except ServiceError:
                return None

    def offering_instance_types(self, offering_id: str) -> list[str]:
        with self.state.db.read_session() as session:
            offering = session.get(TrainingPlanOffering, offering_id)
            if (
                offering is None
                or offering.account_id != self.account_id
                or offering.region != self.region
            ):
                return []
            blocks = (offering.blocks or {}).get("blocks") or []
            return sorted(
                {
                    str(b["instance_type"])
                    for b in blocks
                    if isinstance(b, dict) and b.get("instance_type")
                }
            )


class Dispatcher:
    def __init__(self, state: ServerState) -> None:
        self.state = state
        self.keys = KeyCache(state.db, state.box, state.settings.data_dir)
        self.max_skew = timedelta(seconds=state.settings.max_clock_skew_seconds)
        # SQLite reads are page-cache lookups of a few microseconds and never wait on a
        # writer in WAL mode, so read-only operations run on the event loop: handing them
        # to a worker thread costs more than the read. Everything else (writes, reads of
        # files, and any query that crosses a network to PostgreSQL) goes to the thread
        # pool.
        self.inline_reads = state.db.dialect == "sqlite"
        self.tokens = TokenSeal(state.box.derive_key("pagination-tokens"))

    def runs_inline(self, target: str) -> bool:
        return self.inline_reads and reads_only_the_database(target)

    def handle(
        self,
        method: str,
        raw_path: str,
        query_string: str,
        headers: Sequence[tuple[str, str]],
        body: bytes,
    ) -> Response:
        request_id = str(uuid.uuid4())
        target_header, xml = _protocol(headers)
        operation = operation_label(target_header)
        signing_name = ""
        try:
            signed, key = self.keys.verify(
                method, raw_path, query_string, headers, body, self.max_skew
            )
            if not target_header and signed.service in query_targets():
                return self._query(request_id, signed, key, body)
            service, name = self._route(target_header)
            signing_name = service.signing_name
            if signed.service != service.signing_name:
                raise ApiError(
                    "InvalidSignatureException",
                    f"Credential should be scoped to correct service: '{service.signing_name}'.",
                    403,
                )
            op_model = service.operation(name)
            assert op_model is not None
            # Validate first, so a bad request says what is wrong even where the
            # operation itself is not implemented yet.
            params = parse_input(op_model.input_shape, self._decode(body))
            result = self._invoke(
                service,
                name,
                target_header,
                "NotImplementedException",
                signed,
                key,
                params,
                request_id,
                checked=True,
            )
            payload = serialise_output(op_model.output_shape, result)
            return Response(200, json.dumps(payload).encode(), request_id, operation, "OK")
        except sigv4.AuthError as exc:
            return _error(request_id, operation, exc.code, exc.message, exc.status, xml)
        except ApiError as exc:
            return _error(request_id, operation, exc.code, exc.message, exc.status, xml)
        except ValidationError as exc:
            code = (
                "ValidationError"
                if xml
                else _VALIDATION_CODES.get(signing_name, "ValidationException")
            )
            return _error(request_id, operation, code, exc.message, 400, xml)
        except ServiceError as exc:
            return _error(request_id, operation, exc.code, exc.message, exc.status, xml)
        except Exception:
            log.exception("internal error serving %s (request %s)", operation, request_id)
            return _error(
                request_id,
                operation,
                "InternalFailure",
                "dockyard failed to process the request; "
                f"the server log has request id {request_id}",
                500,
                xml,
            )

    def call(self, key: KeyRecord, region: str, target: str, params: dict[str, Any]) -> Any:
        """One JSON-protocol operation (`target` as in X-Amz-Target) for a caller whose
        key is already known - the console's signed-in session: validated against the
        model and authorised by the key's policy exactly as the HTTP API does it. The
        handler's result comes back as it made it (datetimes, not their wire form);
        refusals raise ApiError, ValidationError or ServiceError."""
        service, name = self._route(target)
        op_model = service.operation(name)
        assert op_model is not None
        parsed = parse_input(op_model.input_shape, params)
        signed = SimpleNamespace(region=region, service=service.signing_name)
        request_id = str(uuid.uuid4())
        return self._invoke(
            service,
            name,
            target,
            "NotImplementedException",
            signed,
            key,
            parsed,
            request_id,
            checked=True,
        )

    def too_large(self, headers: Sequence[tuple[str, str]]) -> Response:
        """The answer to a body over the limit, which is never read past it (nor is
        anything of it authenticated first)."""
        target, xml = _protocol(headers)
        return _error(
            str(uuid.uuid4()),
            operation_label(target),
            "SerializationException",
            f"Request body is over the limit of {MAX_BODY_BYTES} bytes",
            413,
            xml,
        )

    def _query(self, request_id: str, signed: Any, key: Any, body: bytes) -> Response:
        """A query-protocol request (`Action=...` form), whose service is the one its
        signature is scoped to."""
        service = query_targets().get(signed.service)
        try:
            fields = query.form(body)
        except query.QueryError as exc:
            raise ApiError("MalformedQueryString", str(exc)) from exc
        action = fields.get("Action", "")
        if service is None or service.operation(action) is None:
            raise ApiError(
                "InvalidAction",
                f"Unknown operation {action or '(no Action)'} for service {signed.service}",
            )
        op_model = service.operation(action)
        assert op_model is not None
        operation = f"{service.model.service_name}.{action}"
        try:
            decoded = query.decode(op_model, fields)
        except query.QueryError as exc:
            raise ApiError("ValidationError", str(exc)) from exc
        params = parse_input(op_model.input_shape, decoded)
        # GetCallerIdentity needs no permission on AWS; everything else obeys the key.
        result = self._invoke(
            service,
            action,
            operation,
            "NotImplemented",
            signed,
            key,
            params,
            request_id,
            checked=action != "GetCallerIdentity",
        )
        namespace = str(service.model.metadata.get("xmlNamespace", ""))
        document = query.encode(op_model, namespace, result, request_id)
        return Response(200, document, request_id, operation, "OK", "text/xml")

    def _invoke(
        self,
        service: ServiceTarget,
        name: str,
        label: str,
        not_implemented: str,
        signed: Any,
        key: Any,
        params: dict[str, Any],
        request_id: str,
        *,
        checked: bool,
    ) -> Any:
        """Run a validated operation as the key's account: its policy first (before the
        handler lookup: IAM answers even for an operation dockyard does not implement,
        as it would before the service does), then the handler."""
        if checked and key.policy is not None:
            authorise(
                key.policy,
                service.signing_name,
                name,
                signed.region,
                key.account_id,
                params,
                access_key_id=key.access_key_id,
                lookup=_DatabaseLookup(self.state, key.account_id, signed.region),
            )
        handler = service.handlers.get(name)
        if handler is None:
            raise ApiError(
                not_implemented,
                f"dockyard does not implement {label} yet. It implements: "
                + ", ".join(sorted(service.handlers)),
            )
        # A page token is opened before the handler sees it, and sealed as it leaves.
        sealed_for = f"{service.model.service_name}.{name}"
        try:
            params = self.tokens.open_request(
                service.signing_name, key.account_id, sealed_for, params
            )
        except BadToken as exc:
            raise ApiError(exc.code, exc.message) from exc
        ctx = RequestContext(
            state=self.state,
            account_id=key.account_id,
            region=signed.region,
            access_key_id=key.access_key_id,
            policy=key.policy,
            request_id=request_id,
        )
        return self.tokens.seal_response(key.account_id, sealed_for, handler(ctx, params))

    @staticmethod
    def _route(target_header: str) -> tuple[ServiceTarget, str]:
        prefix, _, name = target_header.rpartition(".")
        service = targets().get(prefix)
        if service is None or service.operation(name) is None:
            shown = target_header[:200] if target_header else "(no X-Amz-Target header)"
            raise ApiError("UnknownOperationException", f"Unknown operation {shown}")
        return service, name

    @staticmethod
    def _decode(body: bytes) -> Any:
        try:
            # Its strings are each checked for valid Unicode by parse_input, which names
            # the member that is not.
            return read_json(body, check_strings=False)
        except BodyError as exc:
            raise ApiError("SerializationException", exc.message) from exc
