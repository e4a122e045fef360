"""CloudWatch Logs, read-only, over the log files the local agents write.

SageMaker sends each instance's output to the log group `/aws/sagemaker/TrainingJobs`,
one stream per instance named `<job>/algo-N-<epoch>` (epoch: the job's CreationTime in
whole seconds). Tools such as `aws logs get-log-events` and the SageMaker SDK's
`logs=True` read them there, so dockyard answers the same reads straight from each
instance's log and its index (`compute.log_index`) instead of copying lines into a
store: the files are the record and nothing can drift, and the index makes a read cost
what it returns. As on CloudWatch, a page holds at most 10,000 events and 1 MB, and a
FilterLogEvents call searches a bounded amount (8 MB of lines) before it answers with
what it found and a nextToken to go on from.

A HyperPod cluster's nodes log to `/aws/sagemaker/Clusters/<name>/<id>`, one stream per
node, `LifecycleConfig/<instance group>/<instance id>` (its OnCreate script's output).

Streams are scoped like jobs: only the caller's account's jobs in the request's region.
The log group always exists (it is created with the first job on AWS; dockyard does
not model its absence). filterPattern supports plain terms (all must appear), quoted
phrases and `-term` exclusions; `?term` alternatives, `%regex%`, JSON (`{...}`) and
space-delimited (`[...]`) patterns are refused with InvalidParameterException rather
than silently matching the wrong events.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import heapq
import json
import re
import shlex
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection
from sqlalchemy.orm import Session

from dockyard.compute.backends.protocol import InstanceLog, InstanceRecords
from dockyard.domain.jobs import instance_key
from dockyard.domain.metrics import Latest
from dockyard.services import log_streams
from dockyard.services.log_streams import (
    Group,
    InvalidParameterException,
    Stream,
)

DEFAULT_EVENTS_LIMIT = 10000
DEFAULT_STREAMS_LIMIT = 50
MAX_PAGE_BYTES = 1024 * 1024  # CloudWatch's 1 MB of events per response
SCAN_BYTES = 8 * 1024 * 1024  # lines one FilterLogEvents call searches at most
# ... for a filterPattern of up to this many terms; one of more (the syntax allows ~500
# in its 1024 characters, each a search of every line) searches proportionally less, so
# a call's work stays bounded whatever the pattern.
TERMS_PER_PASS = 8
# What a token's fields may hold (every token is checked field by field, although the
# API seals them: api.tokens): an offset in the streams, an event's time (ms since the
# epoch, within what a double holds exactly) and position, a stream name (the model's).
MAX_OFFSET = 2**31
MAX_TIMESTAMP = 2**53
MAX_POSITION = 2**53
MAX_STREAM_NAME = 512
_POSITION = re.compile(r"[0-9]{1,16}")


def _span(log: InstanceLog, params: Mapping[str, Any]) -> tuple[int, int]:
    """Positions [lo, hi) in the time range: startTime inclusive and endTime exclusive,
    as CloudWatch Logs documents."""
    start = params.get("startTime")
    end = params.get("endTime")
    lo = log.first_at(int(start)) if start is not None else 0
    hi = log.first_at(int(end)) if end is not None else len(log)
    return lo, max(lo, hi)


def _b64(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def _unb64(token: str) -> str:
    try:
        return base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
    except (binascii.Error, ValueError) as exc:
        raise InvalidParameterException("The specified nextToken is not valid.") from exc


def _stream_token(direction: str, stream: str, position: int) -> str:
    return f"{direction}/{_b64(f'{position}:{stream}')}"


def _decode_stream_token(token: str, stream: str, count: int) -> tuple[str, int]:
    direction, slash, body = token.partition("/")
    position_text, colon, token_stream = _unb64(body).partition(":")
    # ASCII digits only: str.isdigit() takes "²", which int() refuses.
    valid = direction in ("f", "b") and slash and colon and _POSITION.fullmatch(position_text)
    if not valid or token_stream != stream or int(position_text) > count:
        raise InvalidParameterException(
            "The specified nextToken is not valid: it was not returned for this log stream."
        )
    return direction, int(position_text)


def _fingerprint(params: Mapping[str, Any]) -> str:
    query = {k: v for k, v in params.items() if k not in ("nextToken", "limit")}
    canonical = json.dumps(query, sort_keys=True, default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def _query_token(value: Any, params: Mapping[str, Any]) -> str:
    """A nextToken carrying where to go on from, good only for the same query."""
    return _b64(json.dumps({"o": value, "q": _fingerprint(params)}))


def _decode_query_token(params: Mapping[str, Any]) -> Any:
    token = params.get("nextToken")
    if not token:
        return None
    try:
        data = json.loads(_unb64(token))
    except (ValueError, RecursionError) as exc:
        raise InvalidParameterException("The specified nextToken is not valid.") from exc
    if not isinstance(data, dict) or set(data) != {"o", "q"} or not isinstance(data["q"], str):
        raise InvalidParameterException("The specified nextToken is not valid.")
    value, fingerprint = data["o"], data["q"]
    if fingerprint != _fingerprint(params):
        raise InvalidParameterException(
            "The specified nextToken is not valid: it belongs to a different query."
        )
    return value


def _decode_offset(params: Mapping[str, Any]) -> int:
    offset = _decode_query_token(params)
    if offset is None:
        return 0
    if not _whole(offset, 0, MAX_OFFSET):
        raise InvalidParameterException("The specified nextToken is not valid.")
    return int(offset)


def _decode_key(params: Mapping[str, Any]) -> tuple[int, str, int] | None:
    key = _decode_query_token(params)
    if key is None:
        return None
    valid = (
        isinstance(key, list)
        and len(key) == 3
        and _whole(key[0], -MAX_TIMESTAMP, MAX_TIMESTAMP)
        and isinstance(key[1], str)
        and len(key[1]) <= MAX_STREAM_NAME
        and _whole(key[2], 0, MAX_POSITION)
    )
    if not valid:
        raise InvalidParameterException("The specified nextToken is not valid.")
    return key[0], key[1], key[2]


def _whole(value: Any, lo: int, hi: int) -> bool:
    """An int (not a bool, nor a float such as 1e300) in [lo, hi)."""
    return type(value) is int and lo <= value < hi


@dataclass(frozen=True)
class Filter:
    """The supported subset of the CloudWatch Logs filter syntax: plain terms (all must
    appear), quoted phrases, and -term exclusions."""

    required: tuple[str, ...] = ()
    excluded: tuple[str, ...] = ()

    def __call__(self, message: str) -> bool:
        return all(term in message for term in self.required) and not any(
            term in message for term in self.excluded
        )

    @property
    def cost(self) -> int:
        """How many times over a line is searched: one pass per TERMS_PER_PASS terms."""
        terms = len(self.required) + len(self.excluded)
        return max(1, -(-terms // TERMS_PER_PASS))


def compile_filter(pattern: str | None) -> Filter:
    """A matcher for the supported subset of the CloudWatch Logs filter syntax."""
    text = (pattern or "").strip()
    if not text or text == '""':
        return Filter()
    if text[0] in "{[" or (text.startswith("%") and text.endswith("%") and len(text) > 1):
        raise InvalidParameterException(
            "dockyard supports only plain terms, quoted phrases and -term exclusions in "
            "filterPattern (no JSON, space-delimited or regex patterns)"
        )
    try:
        terms = shlex.split(text, posix=True)
    except ValueError as exc:
        raise InvalidParameterException(f"Invalid filter pattern: {exc}") from exc
    if any(term.startswith("?") for term in terms):
        raise InvalidParameterException(
            "dockyard does not support ?term alternatives in filterPattern"
        )
    # A term said twice is one term (each is a search of every line).
    return Filter(
        required=tuple(
            dict.fromkeys(term for term in terms if not term.startswith("-") or len(term) == 1)
        ),
        excluded=tuple(
            dict.fromkeys(term[1:] for term in terms if term.startswith("-") and len(term) > 1)
        ),
    )


# ------------------------------------------------------------------ operations


def _stream_info(
    records: InstanceRecords, stream: Stream, account_id: str, region: str, group: Group
) -> dict[str, Any]:
    with stream.open(records) as log:
        count = len(log)
        first = log.timestamp(0) if count else None
        last = log.timestamp(count - 1) if count else None
    return {
        "logStreamName": stream.name,
        "creationTime": first if first is not None else stream.job_created_ms,
        "firstEventTimestamp": first,
        "lastEventTimestamp": last,
        "lastIngestionTime": last,
        "arn": (
            f"arn:aws:logs:{region}:{account_id}:log-group:{group.name}:log-stream:{stream.name}"
        ),
        "storedBytes": 0,
    }


def describe_log_streams(
    connection: Connection,
    records: InstanceRecords,
    account_id: str,
    region: str,
    params: Mapping[str, Any],
) -> dict[str, Any]:
    group = log_streams.check_group(params, account_id, region, connection)
    prefix = params.get("logStreamNamePrefix") or ""
    order = params.get("orderBy", "LogStreamName")
    if order == "LastEventTime" and prefix:
        raise InvalidParameterException(
            "Cannot order by LastEventTime with a logStreamNamePrefix."
        )
    limit = int(params.get("limit") or DEFAULT_STREAMS_LIMIT)
    offset = _decode_offset(params)
    descending = bool(params.get("descending", False))
    streams = log_streams.streams(connection, records, account_id, region, group, prefix)
    if order == "LogStreamName":
        if descending:
            streams.reverse()
        chosen = streams[offset : offset + limit]
        infos = [_stream_info(records, stream, account_id, region, group) for stream in chosen]
    else:
        every = [_stream_info(records, stream, account_id, region, group) for stream in streams]
        every.sort(
            key=lambda info: (info["lastEventTimestamp"] or 0, info["logStreamName"]),
            reverse=descending,
        )
        infos = every[offset : offset + limit]
    more = len(streams) > offset + limit
    return {
        "logStreams": infos,
        "nextToken": _query_token(offset + limit, params) if more else None,
    }


def _event(timestamp: int, message: str) -> dict[str, Any]:
    return {"timestamp": timestamp, "message": message, "ingestionTime": timestamp}


def get_log_events(
    connection: Connection,
    records: InstanceRecords,
    account_id: str,
    region: str,
    params: Mapping[str, Any],
) -> dict[str, Any]:
    """One page of a stream; positions are event indexes, carried in the tokens.

    When nothing is left in the token's direction the same token comes back, which is
    how `aws logs tail`-style readers and the SDK know they have caught up. A page
    reads only its own events (found through the index), at most `limit` and 1 MB.
    """
    group = log_streams.check_group(params, account_id, region, connection)
    stream = log_streams.find_stream(
        connection, records, account_id, region, group, params["logStreamName"]
    )
    limit = int(params.get("limit") or DEFAULT_EVENTS_LIMIT)
    with stream.open(records) as log:
        lo, hi = _span(log, params)
        token = params.get("nextToken")
        if token:
            direction, position = _decode_stream_token(token, stream.name, len(log))
        elif params.get("startFromHead", False):
            direction, position = "f", 0
        else:
            direction, position = "b", len(log)
        if direction == "f":
            start = max(lo, position)
            stop = log.fit(start, max(start, min(hi, start + limit)), MAX_PAGE_BYTES)
        else:
            stop = min(hi, position)
            start = log.fit(min(stop, max(lo, stop - limit)), stop, MAX_PAGE_BYTES, from_end=True)
        events = log.read(start, stop)
    forward = stop if events else position
    backward = start if events else position
    return {
        "events": [_event(event.timestamp, event.message) for event in events],
        "nextForwardToken": _stream_token("f", stream.name, forward),
        "nextBackwardToken": _stream_token("b", stream.name, backward),
    }


def _event_id(stream: Stream, position: int, timestamp: int) -> str:
    """A stable, unique, all-digit id, as AWS's event ids are."""
    stream_hash = int(hashlib.sha256(stream.name.encode()).hexdigest()[:8], 16)
    return f"{timestamp:016d}{stream_hash:010d}{position:012d}"


def _candidates(
    log: InstanceLog,
    stream: Stream,
    params: Mapping[str, Any],
    after: tuple[int, str, int] | None,
    terms: tuple[str, ...],
) -> Iterator[tuple[int, str, int, int, str | None]]:
    """(timestamp, stream, position, size, message) of a stream's events in the time
    range, after the key a previous page ended at; the message only where it may hold
    every term (`InstanceLog.search`)."""
    lo, hi = _span(log, params)
    if after is not None:
        lo = max(lo, log.first_at(after[0]))
    for timestamp, position, size, message in log.search(lo, hi, terms):
        key = (timestamp, stream.name, position)
        if after is None or key > after:
            yield (*key, size, message)


def filter_log_events(
    connection: Connection,
    records: InstanceRecords,
    account_id: str,
    region: str,
    params: Mapping[str, Any],
) -> dict[str, Any]:
    """Matching events of every chosen stream in time order (streams merged by name on a
    tie). A call stops at `limit` events, 1 MB of them, or 8 MB searched, and its
    nextToken is the (time, stream, position) to go on after, so a page costs what it
    reads, however many came before it."""
    group = log_streams.check_group(params, account_id, region, connection)
    names = params.get("logStreamNames")
    prefix = params.get("logStreamNamePrefix")
    if names and prefix:
        raise InvalidParameterException(
            "logStreamNames and logStreamNamePrefix are mutually exclusive parameters."
        )
    if names:
        streams = [
            log_streams.find_stream(connection, records, account_id, region, group, name)
            for name in dict.fromkeys(names)
        ]
    else:
        streams = log_streams.streams(connection, records, account_id, region, group, prefix or "")
    matches = compile_filter(params.get("filterPattern"))
    limit = int(params.get("limit") or DEFAULT_EVENTS_LIMIT)
    after = _decode_key(params)
    by_name = {stream.name: stream for stream in streams}
    found: list[dict[str, Any]] = []
    more = False
    with contextlib.ExitStack() as stack:
        logs = [stack.enter_context(stream.open(records)) for stream in streams]
        merged = heapq.merge(
            *(
                _candidates(log, stream, params, after, matches.required)
                for log, stream in zip(logs, streams, strict=True)
            )
        )
        searched = size = 0
        for timestamp, name, position, line_size, message in merged:
            if len(found) >= limit or size >= MAX_PAGE_BYTES or searched >= SCAN_BYTES:
                more = True  # an event is left: the next page starts from it
                break
            after = (timestamp, name, position)
            searched += (line_size + 1) * matches.cost
            if message is not None and matches(message):
                found.append(
                    {
                        "logStreamName": name,
                        **_event(timestamp, message),
                        "eventId": _event_id(by_name[name], position, timestamp),
                    }
                )
                size += line_size
    return {
        "events": found,
        "searchedLogStreams": [
            {"logStreamName": stream.name, "searchedCompletely": not more} for stream in streams
        ],
        "nextToken": _query_token(list(after), params) if more and after else None,
    }


# ------------------------------------------------------------------ metrics


def job_metrics(
    connection: Connection | Session,
    records: InstanceRecords,
    account_id: str,
    region: str,
    job_name: str,
) -> list[Latest]:
    """Each instance's latest metric values (algo-1 first), as its agent scraped them."""
    row = connection.execute(
        log_streams.RUNTIME, {"account_id": account_id, "region": region, "name": job_name}
    ).first()
    key = instance_key(account_id, region, job_name, row.uid if row else None)
    return [records.metrics(key, host) for host in records.logged_hosts(key)]
