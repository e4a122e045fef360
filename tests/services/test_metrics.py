"""The metric-scraping rules, without a server."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from dockyard.domain.metrics import Scraper, final_metrics, final_metrics_of
from dockyard.services.logs import InvalidParameterException, compile_filter


def test_the_last_match_wins_and_carries_its_line_time() -> None:
    events = [(1000, "loss=0.5"), (2000, "nothing"), (3000, "loss=0.25 acc 7")]
    result = final_metrics([{"Name": "loss", "Regex": "loss=([0-9.]+)"}], events)
    assert result == [
        {"MetricName": "loss", "Value": 0.25, "Timestamp": datetime.fromtimestamp(3, UTC)}
    ]


def test_whole_match_bad_regexes_and_non_numbers() -> None:
    definitions = [
        {"Name": "whole", "Regex": r"\d+\.\d+"},
        {"Name": "broken", "Regex": "loss=(["},
        {"Name": "word", "Regex": "state=(\\w+)"},
        {"Name": "nan", "Regex": "v=(\\w+)"},
    ]
    result = final_metrics(definitions, [(5, "x 1.5 state=ok v=nan")])
    assert [(m["MetricName"], m["Value"]) for m in result] == [("whole", 1.5)]


def test_filter_terms_phrases_and_exclusions() -> None:
    match = compile_filter('loss "epoch 2" -nan')
    assert match("epoch 2 loss=0.25")
    assert not match("epoch 1 loss=0.5")
    assert not match("epoch 2 loss=nan")
    assert compile_filter("")("anything")
    for unsupported in ("{ $.a = 1 }", "[ip, user]", "?a ?b", "%err.*%"):
        with pytest.raises(InvalidParameterException):
            compile_filter(unsupported)


def test_instances_merge_as_if_their_lines_were_one_stream() -> None:
    definitions = [{"Name": "loss", "Regex": "loss=([0-9.]+)"}, {"Name": "acc", "Regex": "a=(.+)"}]
    first, second = Scraper(definitions), Scraper(definitions)
    assert first.feed(1000, "loss=0.5 a=0.1")
    assert not first.feed(1500, "nothing here")
    second.feed(3000, "loss=0.25")
    second.feed(1000, "a=0.2")  # the same time as algo-1's: the later instance wins
    result = final_metrics_of(definitions, [first.latest, second.latest])
    assert [(m["MetricName"], m["Value"]) for m in result] == [("loss", 0.25), ("acc", 0.2)]
    events = [(1000, "loss=0.5 a=0.1"), (1000, "a=0.2"), (1500, "nothing"), (3000, "loss=0.25")]
    assert final_metrics(definitions, events) == result
