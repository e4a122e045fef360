"""The clock: manual time moves only forward and only when told."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from dockyard.clock import ClockError, ManualClock, parse_duration, parse_instant

START = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("30s", timedelta(seconds=30)),
        ("90m", timedelta(minutes=90)),
        ("2h", timedelta(hours=2)),
        ("1d12h", timedelta(days=1, hours=12)),
        ("1w", timedelta(weeks=1)),
        ("45", timedelta(seconds=45)),
        ("1h 30m", timedelta(minutes=90)),
    ],
)
def test_parse_duration(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize("text", ["", "soon", "2x", "h2", "2h and then some"])
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(ClockError):
        parse_duration(text)


def test_manual_clock_advances_sets_and_notifies() -> None:
    clock = ManualClock(START)
    seen: list[datetime] = []
    clock.subscribe(seen.append)
    assert clock.now() == START
    clock.advance(timedelta(hours=2))
    clock.set(parse_instant("2026-03-02T00:00:00Z"))
    assert clock.now() == datetime(2026, 3, 2, tzinfo=UTC)
    assert seen == [START + timedelta(hours=2), datetime(2026, 3, 2, tzinfo=UTC)]
    with pytest.raises(ClockError):
        clock.set(START)
    with pytest.raises(ClockError):
        clock.advance(timedelta(seconds=-1))


def test_parse_instant_defaults_to_utc() -> None:
    assert parse_instant("2026-03-01T12:00:00") == START
    with pytest.raises(ClockError):
        parse_instant("tomorrow")


def test_parse_instant_reads_the_aws_cli_v1_epoch_seconds() -> None:
    # `aws sagemaker describe-training-plan --query StartTime --output text` prints these.
    assert parse_instant(str(START.timestamp())) == START
    assert parse_instant("1796174082.5") == datetime(2026, 12, 2, 1, 14, 42, 500000, tzinfo=UTC)
    for bad in ("nan", "inf", "1e400"):
        with pytest.raises(ClockError):
            parse_instant(bad)
