"""The console's pictures as functions: durations, time axes, bars, metric lines; and
its session cookie."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from cryptography.fernet import Fernet

from dockyard.domain.metrics import series
from dockyard.secretbox import SecretBox
from dockyard.web import session as sessions
from dockyard.web import views

T0 = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


def test_durations_read_as_people_say_them() -> None:
    assert [views.duration(s) for s in (None, -3, 7, 249, 3 * 3600 + 5 * 60, 90000)] == [
        "-",
        "0s",
        "7s",
        "4m 09s",
        "3h 05m",
        "1d 1h",
    ]


def test_bars_sit_where_their_times_are_on_the_axis() -> None:
    axis = views.axis(T0, T0 + timedelta(hours=10), T0 + timedelta(hours=5))
    assert axis.now == 50.0 and len(axis.ticks) == 7 and axis.ticks[0] == (0.0, "12-02 12:00")
    bars = views.bars(
        axis,
        [
            ("a", "", T0 + timedelta(hours=1), T0 + timedelta(hours=3), "x", "first"),
            ("a", "", T0 - timedelta(hours=5), T0 - timedelta(hours=1), "x", "gone before"),
            ("b", "", T0 + timedelta(hours=9), T0 + timedelta(hours=20), "y", "runs off"),
            ("c", "", T0 + timedelta(hours=2), T0 + timedelta(hours=2, seconds=1), "z", "blip"),
        ],
    )
    assert [(b.row, round(b.left, 3), round(b.width, 3)) for b in bars] == [
        ("a", 10.0, 20.0),
        ("b", 90.0, 10.0),
        ("c", 20.0, 0.6),  # a moment still shows
    ]
    off = views.axis(T0, T0 + timedelta(hours=1), T0 + timedelta(days=1))
    assert off.now is None


def test_a_metric_line_fills_its_box() -> None:
    found = series(
        [{"Name": "loss", "Regex": r"loss=([0-9.]+)"}, {"Name": "acc", "Regex": "acc=(x)"}],
        [(1000, "loss=1.0"), (2000, "noise"), (3000, "loss=0.5"), (5000, "loss=0.25")],
    )
    assert found == {"loss": [(1000, 1.0), (3000, 0.5), (5000, 0.25)], "acc": []}
    chart = views.chart("loss", found["loss"])
    assert chart is not None and chart.points == "0.00,2.00 50.00,26.00 100.00,38.00"
    assert (chart.low, chart.high, chart.last, chart.count) == (0.25, 1.0, 0.25, 3)
    assert views.chart("acc", []) is None
    single = views.chart("one", [(1, 3.0)])
    assert single is not None and single.points == "0,20 100,20"


def test_a_session_cookie_is_sealed_and_expires() -> None:
    box = SecretBox(Fernet.generate_key())
    made = sessions.new("AKIAEXAMPLE", "us-east-1", now=1000.0, session_id="s1")
    cookie = sessions.seal(box, made)
    assert "AKIAEXAMPLE" not in cookie
    assert sessions.unseal(box, cookie, now=1001.0) == made
    assert sessions.unseal(box, cookie, now=1000.0 + sessions.SESSION_SECONDS + 1) is None
    other = SecretBox(Fernet.generate_key())
    assert sessions.unseal(other, cookie, now=1001.0) is None  # another server's key
    assert sessions.unseal(box, cookie[:-2] + "xx", now=1001.0) is None
    assert sessions.unseal(box, None, now=1.0) is None
    assert sessions.csrf_ok(made, made.csrf) and not sessions.csrf_ok(made, "forged")
    assert not sessions.csrf_ok(made, None)
