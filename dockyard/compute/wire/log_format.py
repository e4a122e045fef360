"""One instance's log: its lines file and the index beside it.

The agent writes each line a job prints to `logs/output.jsonl` as
`{"t": epoch ms, "m": line}`, then one record to `logs/output.idx`: the byte offset
where that line ends and its timestamp (two little-endian int64s). Event i is bytes
`[end(i-1), end(i))` of the lines file, and timestamps never decrease within a stream
(the writer makes them so), so a reader finds any event, or the first at a given
time, with a few 16-byte reads. A read costs what it returns, not the size of the log:
a tenant printing gigabytes slows nobody's `GetLogEvents` or `DescribeTrainingJob`.

The lines are written before their record, so the index can only lag the lines file.
A reader indexes the complete lines past the index's end itself (an agent killed
between the two writes, or a file older than the index); a writer that opens the
files again (the agent of a plan job's next attempt) first completes the index and
drops a half-written last line, which was never an event.
"""

from __future__ import annotations

import bisect
import json
import os
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

RECORD = struct.Struct("<qq")  # (end offset, timestamp ms)


@dataclass(frozen=True)
class Event:
    timestamp: int
    message: str


def index_path(log_path: Path) -> Path:
    return log_path.with_suffix(".idx")


def _size(fd: int) -> int:
    return os.fstat(fd).st_size


def _read(fd: int, size: int, offset: int) -> bytes:
    """Exactly the bytes asked for that the file has (pread may return fewer)."""
    parts = []
    while size > 0:
        chunk = os.pread(fd, min(size, 1 << 24), offset)
        if not chunk:
            break
        parts.append(chunk)
        size -= len(chunk)
        offset += len(chunk)
    return b"".join(parts)


def _timestamp(line: bytes, floor: int) -> int:
    try:
        return max(floor, int(json.loads(line)["t"]))
    except (ValueError, KeyError, TypeError):
        return floor


def _complete_lines(data: bytes, base: int, floor: int) -> tuple[list[int], list[int]]:
    """(end offsets, timestamps) of the complete lines in data, which starts at base."""
    ends: list[int] = []
    times: list[int] = []
    start = 0
    while (newline := data.find(b"\n", start)) >= 0:
        floor = _timestamp(data[start:newline], floor)
        ends.append(base + newline + 1)
        times.append(floor)
        start = newline + 1
    return ends, times


def encode_term(term: str) -> bytes:
    """A piece of text as it appears inside a stored line: a message that holds the term
    holds these bytes (JSON's escaping maps characters one by one), so a line without
    them need not be decoded to be passed over."""
    return json.dumps(term)[1:-1].encode()


class LogWriter:
    """The one writer of a stream (its instance's agent): a line, then its record."""

    def __init__(self, log_path: Path) -> None:
        self._log = open(log_path, "a+b")  # noqa: SIM115 - closed in close()
        self._index = open(index_path(log_path), "a+b")  # noqa: SIM115
        self._end, self._last = self._repair()

    def _repair(self) -> tuple[int, int]:
        log, index = self._log.fileno(), self._index.fileno()
        records = _size(index) // RECORD.size
        end, last = 0, 0
        if records:
            end, last = RECORD.unpack(_read(index, RECORD.size, (records - 1) * RECORD.size))
        if end > _size(log):  # not this file's index (the lines were replaced): start over
            records, end, last = 0, 0, 0
        os.truncate(index, records * RECORD.size)
        ends, times = _complete_lines(_read(log, _size(log) - end, end), end, last)
        self._index.write(b"".join(map(RECORD.pack, ends, times)))
        self._index.flush()
        if ends:
            end, last = ends[-1], times[-1]
        os.truncate(log, end)  # a half-written last line is no event: never append to it
        return end, last

    def write(self, timestamp_ms: int, message: str) -> int:
        """Append one event; answers its timestamp (never before the previous one's)."""
        self._last = max(self._last, timestamp_ms)
        line = json.dumps({"t": self._last, "m": message}).encode() + b"\n"
        self._log.write(line)
        self._log.flush()  # the control plane reads the stream while the job runs
        self._end += len(line)
        self._index.write(RECORD.pack(self._end, self._last))
        self._index.flush()
        return self._last

    def close(self) -> None:
        self._log.close()
        self._index.close()

    def __enter__(self) -> LogWriter:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class LogReader:
    """A stream's events by position (0 = the first line), read through its index.

    A snapshot: the events there were when it was opened. A missing stream has none.
    """

    def __init__(self, log_path: Path) -> None:
        self._log = self._index = -1
        self._indexed = 0
        self._tail_ends: list[int] = []
        self._tail_times: list[int] = []
        try:
            self._log = os.open(log_path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return
        try:
            self._index = os.open(index_path(log_path), os.O_RDONLY | os.O_CLOEXEC)
            self._indexed = _size(self._index) // RECORD.size
        except OSError:
            self._indexed = 0
        end, last = self._record(self._indexed - 1) if self._indexed else (0, 0)
        size = _size(self._log)
        if end > size:  # an index not of these lines: read them all
            self._indexed, end, last = 0, 0, 0
        self._tail_ends, self._tail_times = _complete_lines(
            _read(self._log, size - end, end), end, last
        )

    def close(self) -> None:
        for fd in (self._log, self._index):
            if fd >= 0:
                os.close(fd)
        self._log = self._index = -1

    def __enter__(self) -> LogReader:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __len__(self) -> int:
        return self._indexed + len(self._tail_ends)

    def _record(self, position: int) -> tuple[int, int]:
        if position >= self._indexed:
            tail = position - self._indexed
            return self._tail_ends[tail], self._tail_times[tail]
        end, timestamp = RECORD.unpack(_read(self._index, RECORD.size, position * RECORD.size))
        return int(end), int(timestamp)

    def _records(self, start: int, stop: int) -> list[tuple[int, int]]:
        """Records [start, stop) in one read of the index (and the tail's, past it)."""
        indexed = min(stop, self._indexed)
        records: list[tuple[int, int]] = []
        if start < indexed:
            data = _read(self._index, (indexed - start) * RECORD.size, start * RECORD.size)
            records = list(RECORD.iter_unpack(data))
        first_tail = max(start, self._indexed) - self._indexed
        last_tail = stop - self._indexed
        records.extend(
            zip(
                self._tail_ends[first_tail:last_tail],
                self._tail_times[first_tail:last_tail],
                strict=True,
            )
        )
        return records

    def start(self, position: int) -> int:
        """The byte offset where event `position` begins."""
        return self._record(position - 1)[0] if position > 0 else 0

    def end(self, position: int) -> int:
        return self._record(position)[0]

    def timestamp(self, position: int) -> int:
        return self._record(position)[1]

    def first_at(self, timestamp_ms: int) -> int:
        """The position of the first event at or after a time (len(self) if none)."""
        return bisect.bisect_left(range(len(self)), timestamp_ms, key=self.timestamp)

    def fit(self, start: int, stop: int, budget: int, *, from_end: bool = False) -> int:
        """How far a read of [start, stop) may go within `budget` bytes, always at least
        one event: the stop position (or, from_end, the start position) that fits."""
        if start >= stop:
            return stop if not from_end else start
        if from_end:
            limit = self.end(stop - 1) - budget
            first = bisect.bisect_left(range(start, stop), limit, key=self.start)
            return min(start + first, stop - 1)
        limit = self.start(start) + budget
        fits = bisect.bisect_right(range(start, stop), limit, key=self.end)
        return max(start + fits, start + 1)

    def read(self, start: int, stop: int) -> list[Event]:
        """Events [start, stop), in one read of the lines file."""
        return [self.event(timestamp, line) for timestamp, _, line in self._chunk(start, stop)]

    def search(
        self, start: int, stop: int, terms: Sequence[str] = (), chunk: int = 1 << 20
    ) -> Iterator[tuple[int, int, int, str | None]]:
        """(timestamp, position, size, message) for [start, stop), `chunk` bytes at a
        time; the message only where the stored line holds every term (`InstanceLog`)."""
        encoded = tuple(encode_term(term) for term in terms)
        while start < stop:
            upto = self.fit(start, stop, chunk)
            for timestamp, position, line in self._chunk(start, upto):
                message = (
                    self.event(timestamp, line).message
                    if all(term in line for term in encoded)
                    else None
                )
                yield timestamp, position, len(line), message
            start = upto

    def _chunk(self, start: int, stop: int) -> list[tuple[int, int, bytes]]:
        if start >= stop:
            return []
        origin = self.start(start)
        data = _read(self._log, self.end(stop - 1) - origin, origin)
        chunk = []
        begin = 0
        for position, (end, timestamp) in enumerate(self._records(start, stop), start):
            chunk.append((timestamp, position, data[begin : end - origin - 1]))  # no newline
            begin = end - origin
        return chunk

    @staticmethod
    def event(timestamp: int, line: bytes) -> Event:
        """The event a raw line (without its newline) holds."""
        try:
            return Event(timestamp, str(json.loads(line)["m"]))
        except (ValueError, KeyError, TypeError):
            # Only a file that predates the index can hold a broken line.
            return Event(timestamp, line.decode("utf-8", errors="replace"))


def read_metrics(path: Path) -> dict[str, tuple[float, int]]:
    """An instance's latest metric values (see `Scraper`); none when unwritten."""
    try:
        data = json.loads(path.read_text())
        return {str(k): (float(v[0]), int(v[1])) for k, v in data.items()}
    except (OSError, ValueError, TypeError, AttributeError, IndexError):
        return {}


def write_metrics(path: Path, latest: dict[str, tuple[float, int]]) -> None:
    """Replaced whole, so a reader sees the old values or the new ones."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(latest))
    os.replace(tmp, path)
