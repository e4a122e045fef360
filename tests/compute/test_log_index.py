"""A log and its index: reads by position and time, and repair after a crash."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from dockyard.compute.wire.log_format import (
    RECORD,
    Event,
    LogReader,
    LogWriter,
    index_path,
    read_metrics,
    write_metrics,
)


def write(path: Path, events: list[tuple[int, str]]) -> list[Event]:
    with LogWriter(path) as log:
        return [Event(log.write(t, m), m) for t, m in events]


def test_events_by_position_and_time(tmp_path: Path) -> None:
    path = tmp_path / "output.jsonl"
    written = write(path, [(1000, "a"), (2000, "b"), (2000, "c"), (3000, "d\u00e9")])
    with LogReader(path) as log:
        assert len(log) == 4
        assert log.read(0, 4) == written
        assert log.read(1, 3) == written[1:3]
        assert log.first_at(2000) == 1
        assert log.first_at(2001) == 3
        assert log.first_at(9999) == 4
        assert log.first_at(0) == 0


def test_timestamps_never_go_back(tmp_path: Path) -> None:
    written = write(tmp_path / "output.jsonl", [(5000, "a"), (4000, "b"), (6000, "c")])
    assert [event.timestamp for event in written] == [5000, 5000, 6000]


def test_a_read_fits_its_byte_budget(tmp_path: Path) -> None:
    path = tmp_path / "output.jsonl"
    write(path, [(i, "x" * 100) for i in range(10)])
    with LogReader(path) as log:
        line = log.end(0)
        assert log.fit(0, 10, line * 3) == 3
        assert log.fit(0, 10, 1) == 1  # always one event
        assert log.fit(0, 10, line * 3, from_end=True) == 7
        assert log.fit(4, 5, 1, from_end=True) == 4


def test_a_missing_stream_has_no_events(tmp_path: Path) -> None:
    with LogReader(tmp_path / "nothing.jsonl") as log:
        assert len(log) == 0
        assert log.read(0, 0) == []


def test_lines_past_the_index_are_read_and_then_indexed(tmp_path: Path) -> None:
    """An agent killed between a line and its record, leaving half a line as well."""
    path = tmp_path / "output.jsonl"
    write(path, [(1, "one")])
    with open(path, "ab") as file:
        file.write(json.dumps({"t": 2, "m": "two"}).encode() + b"\n")
        file.write(b'{"t": 3, "m": "thr')
    with LogReader(path) as log:
        assert log.read(0, len(log)) == [Event(1, "one"), Event(2, "two")]
    write(path, [(4, "four")])  # the next attempt's agent
    assert index_path(path).stat().st_size == 3 * RECORD.size
    with LogReader(path) as log:
        assert log.read(0, len(log)) == [Event(1, "one"), Event(2, "two"), Event(4, "four")]


def test_a_log_without_an_index_is_read_whole(tmp_path: Path) -> None:
    path = tmp_path / "output.jsonl"
    path.write_bytes(b"".join(json.dumps({"t": t, "m": str(t)}).encode() + b"\n" for t in (7, 8)))
    with LogReader(path) as log:
        assert log.read(0, len(log)) == [Event(7, "7"), Event(8, "8")]
        assert log.first_at(8) == 1


def test_metrics_files(tmp_path: Path) -> None:
    path = tmp_path / "metrics.json"
    assert read_metrics(path) == {}
    write_metrics(path, {"loss": (0.25, 1000)})
    assert read_metrics(path) == {"loss": (0.25, 1000)}
    path.write_text("[not an object")
    assert read_metrics(path) == {}


@settings(max_examples=60, deadline=None)
@given(
    events=st.lists(
        st.tuples(st.integers(0, 50), st.text(max_size=30).filter(lambda t: "\n" not in t)),
        max_size=40,
    ),
    window=st.tuples(st.integers(0, 45), st.integers(0, 45)),
    budget=st.integers(1, 400),
    chunk=st.integers(1, 200),
)
def test_reads_match_the_events_written(
    tmp_path_factory: object,
    events: list[tuple[int, str]],
    window: tuple[int, int],
    budget: int,
    chunk: int,
) -> None:
    path = Path(str(tmp_path_factory.mktemp("log"))) / "output.jsonl"  # type: ignore[attr-defined]
    written = write(path, events)
    start, stop = min(window), min(max(window), len(written))
    with LogReader(path) as log:
        assert len(log) == len(written)
        assert log.read(start, stop) == written[start:stop]
        found = [Event(t, message) for t, _, _, message in log.search(start, stop, (), chunk)]
        assert found == written[start:stop]
        # Every event holding a term comes decoded (others may be passed over undecoded).
        term = written[start].message[:2] if start < stop else "x"
        searched = [message for _, _, _, message in log.search(start, stop, (term,), chunk)]
        for event, message in zip(written[start:stop], searched, strict=True):
            assert message in (None, event.message)
            assert message is not None or term not in event.message
        for moment in (0, 10, 25, 51):
            expected = next(
                (i for i, event in enumerate(written) if event.timestamp >= moment), len(written)
            )
            assert log.first_at(moment) == expected
        if start < stop:
            upto = log.fit(start, stop, budget)
            assert start < upto <= stop
            assert upto == start + 1 or log.end(upto - 1) - log.start(start) <= budget
            begin = log.fit(start, stop, budget, from_end=True)
            assert start <= begin < stop
            assert begin == stop - 1 or log.end(stop - 1) - log.start(begin) <= budget
