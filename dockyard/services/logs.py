"""CloudWatch Logs, read-only, over the log files the local agents write.

SageMaker sends each instance's output to the log group `/aws/sagemaker/TrainingJobs`,
one stream per instance named `<job>/algo-N-<epoch>` (epoch: the job's CreationTime in
whole seconds). Tools such as `aws logs get-log-events` and the SageMaker SDK's
`logs=True` read them there, so dockyard answers the same reads straight from each
instance's `logs/output.jsonl` (one `{"t": epoch ms, "m": line}` per line) instead of
copying lines into a store: the files are the record and nothing can drift.

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
import hashlib
import json
import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, bindparam, select

from dockyard.clock import utc
from dockyard.domain.jobs import instance_key
from dockyard.services.errors import ServiceError
from dockyard.store.tables import TrainingJob

GROUP = "/aws/sagemaker/TrainingJobs"
DEFAULT_EVENTS_LIMIT = 10000
DEFAULT_STREAMS_LIMIT = 50
TAIL_BYTES = 64 * 1024

JOBS = TrainingJob.__table__
_SCOPE = (JOBS.c.account_id == bindparam("account_id"), JOBS.c.region == bindparam("region"))
_ALL_JOBS = select(JOBS.c.name, JOBS.c.creation_time, JOBS.c.uid).where(*_SCOPE)
_ONE_JOB = _ALL_JOBS.where(JOBS.c.name == bindparam("name"))
_RUNTIME = select(JOBS.c.runtime, JOBS.c.uid).where(*_SCOPE, JOBS.c.name == bindparam("name"))
_HOST = re.compile(r"algo-([1-9][0-9]*)")
_STREAM_SUFFIX = re.compile(r"(algo-[1-9][0-9]*)-([0-9]+)")


class ResourceNotFoundException(ServiceError):
    code = "ResourceNotFoundException"


class InvalidParameterException(ServiceError):
    code = "InvalidParameterException"


GROUP_NOT_FOUND = "The specified log group does not exist."
STREAM_NOT_FOUND = "The specified log stream does not exist."


@dataclass(frozen=True)
class Event:
    timestamp: int
    message: str


@dataclass(frozen=True)
class Stream:
    name: str
    job_name: str
    host: str
    job_created_ms: int
    path: Path


# ------------------------------------------------------------------ files


def instance_root(
    data_dir: Path, account_id: str, region: str, job_name: str, uid: str | None, host: str
) -> Path:
    """Where the local backend runs one instance of a job (see compute.local)."""
    key = instance_key(account_id, region, job_name, uid)
    return Path(data_dir).resolve() / "instances" / key / host


def _parse(line: bytes) -> Event | None:
    try:
        record = json.loads(line)
        return Event(int(record["t"]), str(record["m"]))
    except (ValueError, KeyError, TypeError):
        return None


def read_events(path: Path) -> list[Event]:
    """Every complete event of a log file, in the order written (time order)."""
    try:
        data = path.read_bytes()
    except OSError:
        return []
    # The last piece is empty or a line the agent is still writing: not an event yet.
    lines = data.split(b"\n")[:-1]
    return [event for event in map(_parse, lines) if event is not None]


def _first_event(path: Path) -> Event | None:
    try:
        with open(path, "rb") as file:
            line = file.readline()
    except OSError:
        return None
    return _parse(line) if line.endswith(b"\n") else None


def _last_event(path: Path) -> Event | None:
    """The last complete event, read from the file's tail rather than the whole file."""
    try:
        with open(path, "rb") as file:
            size = file.seek(0, 2)
            file.seek(max(0, size - TAIL_BYTES))
            tail = file.read()
    except OSError:
        return None
    for line in reversed(tail.split(b"\n")[:-1]):
        event = _parse(line)
        if event is not None:
            return event
    events = read_events(path) if size > TAIL_BYTES else []
    return events[-1] if events else None


def _hosts(
    data_dir: Path, account_id: str, region: str, job_name: str, uid: str | None
) -> list[str]:
    """The instances of a job that have a log file, algo-1 first."""
    job_dir = instance_root(data_dir, account_id, region, job_name, uid, "x").parent
    try:
        names = [p.name for p in job_dir.iterdir() if _HOST.fullmatch(p.name)]
    except OSError:
        return []
    names.sort(key=lambda name: int(name.removeprefix("algo-")))
    return [name for name in names if (job_dir / name / "logs" / "output.jsonl").is_file()]


def _epoch_seconds(moment: datetime) -> int:
    return int(utc(moment).timestamp())


def _streams_of(
    data_dir: Path, account_id: str, region: str, name: str, uid: str | None, created: datetime
) -> list[Stream]:
    epoch = _epoch_seconds(created)
    return [
        Stream(
            name=f"{name}/{host}-{epoch}",
            job_name=name,
            host=host,
            job_created_ms=int(utc(created).timestamp() * 1000),
            path=instance_root(data_dir, account_id, region, name, uid, host)
            / "logs"
            / "output.jsonl",
        )
        for host in _hosts(data_dir, account_id, region, name, uid)
    ]


def _all_streams(
    connection: Connection, data_dir: Path, account_id: str, region: str, prefix: str = ""
) -> list[Stream]:
    scope = {"account_id": account_id, "region": region}
    job_name, slash, _ = prefix.partition("/")
    if slash:  # the prefix names one job
        rows = connection.execute(_ONE_JOB, {**scope, "name": job_name}).all()
    else:
        rows = connection.execute(_ALL_JOBS, scope).all()
    streams = [
        stream
        for row in rows
        if row.name.startswith(job_name)
        for stream in _streams_of(
            data_dir, account_id, region, row.name, row.uid, row.creation_time
        )
        if stream.name.startswith(prefix)
    ]
    streams.sort(key=lambda stream: stream.name)
    return streams


def _find_stream(
    connection: Connection, data_dir: Path, account_id: str, region: str, name: str
) -> Stream:
    job_name, _, suffix = name.partition("/")
    parts = _STREAM_SUFFIX.fullmatch(suffix)
    if parts is None:
        raise ResourceNotFoundException(STREAM_NOT_FOUND)
    row = connection.execute(
        _ONE_JOB, {"account_id": account_id, "region": region, "name": job_name}
    ).first()
    if row is None:
        raise ResourceNotFoundException(STREAM_NOT_FOUND)
    for stream in _streams_of(data_dir, account_id, region, row.name, row.uid, row.creation_time):
        if stream.name == name:
            return stream
    raise ResourceNotFoundException(STREAM_NOT_FOUND)


# ------------------------------------------------------------------ parameters


def _check_group(params: Mapping[str, Any], account_id: str, region: str) -> None:
    name = params.get("logGroupName")
    identifier = params.get("logGroupIdentifier")
    if name and identifier:
        raise InvalidParameterException(
            "LogGroup name and LogGroup ARN are mutually exclusive parameters."
        )
    if not name and not identifier:
        raise InvalidParameterException(
            "Either logGroupName or logGroupIdentifier must be specified."
        )
    group = str(name or identifier)
    if group.startswith("arn:"):
        prefix = f"arn:aws:logs:{region}:{account_id}:log-group:"
        if not group.startswith(prefix):
            raise ResourceNotFoundException(GROUP_NOT_FOUND)
        group = group.removeprefix(prefix).removesuffix(":*")
    if group != GROUP:
        raise ResourceNotFoundException(GROUP_NOT_FOUND)


def _in_range(params: Mapping[str, Any]) -> Callable[[Event], bool]:
    """startTime is inclusive and endTime exclusive, as CloudWatch Logs documents."""
    start = params.get("startTime")
    end = params.get("endTime")
    return lambda event: (
        (start is None or event.timestamp >= start) and (end is None or event.timestamp < end)
    )


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
    valid = direction in ("f", "b") and slash and colon and position_text.isdigit()
    if not valid or token_stream != stream or int(position_text) > count:
        raise InvalidParameterException(
            "The specified nextToken is not valid: it was not returned for this log stream."
        )
    return direction, int(position_text)


def _fingerprint(params: Mapping[str, Any]) -> str:
    query = {k: v for k, v in params.items() if k not in ("nextToken", "limit")}
    canonical = json.dumps(query, sort_keys=True, default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def _offset_token(offset: int, params: Mapping[str, Any]) -> str:
    return _b64(json.dumps({"o": offset, "q": _fingerprint(params)}))


def _decode_offset(params: Mapping[str, Any]) -> int:
    token = params.get("nextToken")
    if not token:
        return 0
    try:
        data = json.loads(_unb64(token))
        offset = int(data["o"])
        fingerprint = str(data["q"])
    except (ValueError, KeyError, TypeError) as exc:
        raise InvalidParameterException("The specified nextToken is not valid.") from exc
    if offset < 0 or fingerprint != _fingerprint(params):
        raise InvalidParameterException(
            "The specified nextToken is not valid: it belongs to a different query."
        )
    return offset


def compile_filter(pattern: str | None) -> Callable[[str], bool]:
    """A matcher for the supported subset of the CloudWatch Logs filter syntax."""
    text = (pattern or "").strip()
    if not text or text == '""':
        return lambda message: True
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
    required = [term for term in terms if not term.startswith("-") or len(term) == 1]
    excluded = [term[1:] for term in terms if term.startswith("-") and len(term) > 1]
    return lambda message: (
        all(term in message for term in required) and not any(term in message for term in excluded)
    )


# ------------------------------------------------------------------ operations


def _stream_info(stream: Stream, account_id: str, region: str) -> dict[str, Any]:
    first = _first_event(stream.path)
    last = _last_event(stream.path)
    return {
        "logStreamName": stream.name,
        "creationTime": first.timestamp if first else stream.job_created_ms,
        "firstEventTimestamp": first.timestamp if first else None,
        "lastEventTimestamp": last.timestamp if last else None,
        "lastIngestionTime": last.timestamp if last else None,
        "arn": f"arn:aws:logs:{region}:{account_id}:log-group:{GROUP}:log-stream:{stream.name}",
        "storedBytes": 0,
    }


def describe_log_streams(
    connection: Connection,
    data_dir: Path,
    account_id: str,
    region: str,
    params: Mapping[str, Any],
) -> dict[str, Any]:
    _check_group(params, account_id, region)
    prefix = params.get("logStreamNamePrefix") or ""
    order = params.get("orderBy", "LogStreamName")
    if order == "LastEventTime" and prefix:
        raise InvalidParameterException(
            "Cannot order by LastEventTime with a logStreamNamePrefix."
        )
    limit = int(params.get("limit") or DEFAULT_STREAMS_LIMIT)
    offset = _decode_offset(params)
    descending = bool(params.get("descending", False))
    streams = _all_streams(connection, data_dir, account_id, region, prefix)
    if order == "LogStreamName":
        if descending:
            streams.reverse()
        chosen = streams[offset : offset + limit]
        infos = [_stream_info(stream, account_id, region) for stream in chosen]
    else:
        every = [_stream_info(stream, account_id, region) for stream in streams]
        every.sort(
            key=lambda info: (info["lastEventTimestamp"] or 0, info["logStreamName"]),
            reverse=descending,
        )
        infos = every[offset : offset + limit]
    more = len(streams) > offset + limit
    return {
        "logStreams": infos,
        "nextToken": _offset_token(offset + limit, params) if more else None,
    }


def _event(event: Event) -> dict[str, Any]:
    return {
        "timestamp": event.timestamp,
        "message": event.message,
        "ingestionTime": event.timestamp,
    }


def get_log_events(
    connection: Connection,
    data_dir: Path,
    account_id: str,
    region: str,
    params: Mapping[str, Any],
) -> dict[str, Any]:
    """One page of a stream; positions are event indexes, carried in the tokens.

    When nothing is left in the token's direction the same token comes back, which is
    how `aws logs tail`-style readers and the SDK know they have caught up.
    """
    _check_group(params, account_id, region)
    stream = _find_stream(connection, data_dir, account_id, region, params["logStreamName"])
    events = read_events(stream.path)
    wanted = _in_range(params)
    indexed = [(i, event) for i, event in enumerate(events) if wanted(event)]
    limit = int(params.get("limit") or DEFAULT_EVENTS_LIMIT)
    token = params.get("nextToken")
    if token:
        direction, position = _decode_stream_token(token, stream.name, len(events))
        if direction == "f":
            chosen = [item for item in indexed if item[0] >= position][:limit]
        else:
            chosen = [item for item in indexed if item[0] < position][-limit:]
    elif params.get("startFromHead", False):
        chosen, position = indexed[:limit], 0
    else:
        chosen, position = indexed[-limit:], len(events)
    forward = chosen[-1][0] + 1 if chosen else position
    backward = chosen[0][0] if chosen else position
    return {
        "events": [_event(event) for _, event in chosen],
        "nextForwardToken": _stream_token("f", stream.name, forward),
        "nextBackwardToken": _stream_token("b", stream.name, backward),
    }


def _event_id(stream: Stream, index: int, event: Event) -> str:
    """A stable, unique, all-digit id, as AWS's event ids are."""
    stream_hash = int(hashlib.sha256(stream.name.encode()).hexdigest()[:8], 16)
    return f"{event.timestamp:016d}{stream_hash:010d}{index:012d}"


def filter_log_events(
    connection: Connection,
    data_dir: Path,
    account_id: str,
    region: str,
    params: Mapping[str, Any],
) -> dict[str, Any]:
    _check_group(params, account_id, region)
    names = params.get("logStreamNames")
    prefix = params.get("logStreamNamePrefix")
    if names and prefix:
        raise InvalidParameterException(
            "logStreamNames and logStreamNamePrefix are mutually exclusive parameters."
        )
    if names:
        streams = [
            _find_stream(connection, data_dir, account_id, region, name)
            for name in dict.fromkeys(names)
        ]
    else:
        streams = _all_streams(connection, data_dir, account_id, region, prefix or "")
    matches = compile_filter(params.get("filterPattern"))
    wanted = _in_range(params)
    limit = int(params.get("limit") or DEFAULT_EVENTS_LIMIT)
    offset = _decode_offset(params)
    found = [
        (event.timestamp, order, index, stream, event)
        for order, stream in enumerate(streams)
        for index, event in enumerate(read_events(stream.path))
        if wanted(event) and matches(event.message)
    ]
    found.sort(key=lambda item: item[:3])
    chosen = found[offset : offset + limit]
    more = len(found) > offset + limit
    return {
        "events": [
            {
                "logStreamName": stream.name,
                **_event(event),
                "eventId": _event_id(stream, index, event),
            }
            for _, _, index, stream, event in chosen
        ],
        "searchedLogStreams": [
            {"logStreamName": stream.name, "searchedCompletely": True} for stream in streams
        ],
        "nextToken": _offset_token(offset + limit, params) if more else None,
    }


# ------------------------------------------------------------------ metrics


def job_events(
    connection: Connection,
    data_dir: Path | None,
    account_id: str,
    region: str,
    job_name: str,
) -> list[tuple[int, str]]:
    """Every instance's events of one job merged in time order, for metric scraping.

    Without a data_dir the instances' root is found from the job's runtime record,
    whose host specs name the data directory's `s3` folder.
    """
    row = connection.execute(
        _RUNTIME, {"account_id": account_id, "region": region, "name": job_name}
    ).first()
    uid = row.uid if row else None
    if data_dir is None:
        runtime = row.runtime if row else None
        specs = (runtime or {}).get("specs") or []
        root = (specs[0].get("s3") or {}).get("root") if specs else None
        if not root:
            return []
        data_dir = Path(root).parent
    merged = [
        (event.timestamp, order, index, event.message)
        for order, host in enumerate(_hosts(data_dir, account_id, region, job_name, uid))
        for index, event in enumerate(
            read_events(
                instance_root(data_dir, account_id, region, job_name, uid, host)
                / "logs"
                / "output.jsonl"
            )
        )
    ]
    merged.sort()
    return [(timestamp, message) for timestamp, _, _, message in merged]
