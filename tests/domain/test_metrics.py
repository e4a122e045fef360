"""MetricDefinitions run in RE2: the regexes SageMaker users write read as they would in
Python's `re`, what only a backtracking engine can run is refused by name, and no regex
or line makes a scrape take more than a bounded slice of time and memory."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dockyard.domain.metrics import (
    MAX_PROGRAM_SIZE,
    SCRAPED_BYTES,
    Scraper,
    compile_definitions,
    definition_problems,
    final_metrics,
    regex_problem,
    series,
)

# What users write: the SageMaker docs' examples, the SDK's built-in definitions (RL
# toolkits), Hugging Face's and XGBoost's usual ones - with a line each and its value.
WRITTEN = [
    (r"Train_loss=(.*?);", "epoch 1 Train_loss=0.25; Valid_acc=0.9;", 0.25),
    (r"Valid_acc=(.*?);", "epoch 1 Train_loss=0.25; Valid_acc=0.9;", 0.9),
    (r"Train_Loss=([0-9\.]+)", "Train_Loss=0.125", 0.125),
    (r"loss: ([0-9\.]+)", "1875/1875 - 5s - loss: 0.5 - accuracy: 0.8", 0.5),
    (r"'loss': ([0-9]+(.|e\-)[0-9]+),?", "{'loss': 0.6931, 'grad_norm': 1.2}", 0.6931),
    (r"'loss': ([0-9]+(.|e\-)[0-9]+),?", "{'loss': 5e-05, 'epoch': 0.01}", 5e-05),
    (r"^Training>.*Total reward=(.*?),", "Training> Episode=1, Total reward=12.5, Steps=20", 12.5),
    (
        r"episode_reward_mean: ([-+]?[0-9]*[.]?[0-9]+([eE][-+]?[0-9]+)?)",
        "episode_reward_mean: -1.5e+02",
        -150.0,
    ),
    (
        r".*\[[0-9]+\].*#011validation-rmse:([-+]?[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?).*",
        "[12]#011train-rmse:0.5#011validation-rmse:0.75",
        0.75,
    ),
    (r"loss=(?P<loss>[0-9.]+)", "loss=0.3", 0.3),
    (r"loss=(?<loss>[0-9.]+)", "loss=0.3", 0.3),  # Java's named group: RE2 reads it too
    (r"acc=(\d+\.\d+)", "acc=0.95", 0.95),
    (r"\bval_loss\s*[:=]\s*(\S+)", "val_loss = 0.42", 0.42),
    (r"(?i)LOSS=([0-9.]+)", "loss=0.7", 0.7),
    (r"(?:train|val)_loss=([0-9.]+)", "val_loss=0.1", 0.1),
    (r"[0-9]+\.[0-9]+", "accuracy 0.5", 0.5),  # no group: the whole match
]


@pytest.mark.parametrize(("regex", "line", "value"), WRITTEN)
def test_the_regexes_users_write_give_their_values(regex: str, line: str, value: float) -> None:
    assert regex_problem(regex) is None
    scraper = Scraper([{"Name": "m", "Regex": regex}])
    assert scraper.feed(1, line)
    assert scraper.latest == {"m": (value, 1)}


def test_a_catastrophic_regex_for_python_is_one_pass_here() -> None:
    """`(a+)+$` on a's and a `!`: 2^n steps for `re`, one pass for RE2 (with `re` this
    test would not end)."""
    definitions = [{"Name": "evil", "Regex": "(a+)+$"}, {"Name": "loss", "Regex": "loss=(.+)"}]
    scraper = Scraper(definitions)
    for length in (40, 1000, 60000):
        assert not scraper.feed(1, "a" * length + "!")
    assert scraper.feed(2, "loss=0.5")
    assert scraper.latest == {"loss": (0.5, 2)}
    assert series(definitions, [(1, "a" * 40 + "!"), (2, "loss=1")]) == {
        "evil": [],
        "loss": [(2, 1.0)],
    }


@pytest.mark.parametrize(
    ("regex", "says"),
    [
        (r"loss=(?=\d)([0-9.]+)", "invalid perl operator: (?="),
        (r"(?<=loss=)[0-9.]+", "invalid perl operator: (?<="),
        (r"(?<!val_)loss=([0-9.]+)", "invalid perl operator: (?<!"),
        (r"(['\"])loss\1: ([0-9.]+)", "invalid escape sequence: \\1"),
        (r"loss=([0-9.]++)", "bad repetition operator: ++"),
        (r"loss=(?>[0-9.]+)", "invalid perl operator: (?>"),
        (r"loss=([0-9.]+)\Z", "invalid escape sequence: \\Z"),
        (r"loss=([", "missing ]"),
        (r"(a{100}){100}", "invalid repetition size"),
    ],
)
def test_what_re2_cannot_run_is_refused_saying_why(regex: str, says: str) -> None:
    problem = regex_problem(regex)
    assert problem is not None and says in problem and "RE2" in problem


def test_a_regex_too_costly_for_every_line_is_refused() -> None:
    # Linear for RE2, but each byte could cost a step per instruction of its program.
    problem = regex_problem(r"(?:\S+\s+){200}loss=(\S+)")
    assert problem is not None and f"at most {MAX_PROGRAM_SIZE}" in problem
    # One RE2 cannot build within its memory at all.
    problem = regex_problem(r"(?:\S+\s+){1000}")
    assert problem is not None and "too costly" in problem and "KiB" in problem
    assert regex_problem("[0-9]{900}") is None


def test_problems_name_each_definition_by_index_and_metric() -> None:
    definitions = [
        {"Name": "loss", "Regex": "loss=([0-9.]+)"},
        {"Name": "val:acc", "Regex": "acc=(?=1)(.*)"},
        {"Name": "f1", "Regex": "f1=(\\d+)\\1"},
    ]
    problems = definition_problems(definitions)
    assert len(problems) == 2
    assert problems[0].startswith("AlgorithmSpecification.MetricDefinitions[1] ('val:acc'): ")
    assert problems[1].startswith("AlgorithmSpecification.MetricDefinitions[2] ('f1'): ")
    assert "invalid escape sequence: \\1" in problems[1]
    assert definition_problems(definitions[:1]) == []
    # A job created before the check keeps its usable definitions.
    assert [name for name, _ in compile_definitions(definitions)] == ["loss"]


def test_only_the_first_part_of_a_line_is_read() -> None:
    scraper = Scraper([{"Name": "loss", "Regex": "loss=([0-9.]+)"}])
    padding = "é" * (SCRAPED_BYTES // 2 - 3)  # two bytes each in UTF-8
    assert scraper.feed(1, padding + "loss=1")  # ends within the slice
    assert scraper.latest == {"loss": (1.0, 1)}
    assert not scraper.feed(2, "x" * SCRAPED_BYTES + "loss=2")  # past it: not seen
    # The slice may cut a character in two, and a line may hold what UTF-8 cannot.
    assert not scraper.feed(3, "é" * SCRAPED_BYTES + "\ud800 loss=3")
    assert scraper.feed(4, "\ud800 loss=4")
    assert scraper.latest == {"loss": (4.0, 4)}


def test_digits_and_words_are_ascii_as_in_java() -> None:
    # Python's `\d` takes Arabic-Indic digits; Java's and RE2's do not.
    scraper = Scraper([{"Name": "n", "Regex": r"n=(\d+)"}])
    assert not scraper.feed(1, "n=\u0661\u0662")
    assert scraper.feed(2, "n=12") and scraper.latest == {"n": (12.0, 2)}


def test_final_metrics_skip_what_cannot_run() -> None:
    definitions = [
        {"Name": "bad", "Regex": "(?=x)x"},
        {"Name": "loss", "Regex": "loss=([0-9.]+)"},
        {"Regex": "no name"},
    ]
    result = final_metrics(definitions, [(1000, "loss=0.5 x")])
    assert [(m["MetricName"], m["Value"]) for m in result] == [("loss", 0.5)]


@given(
    st.sampled_from([regex for regex, _, _ in WRITTEN if "(?<" not in regex]),
    st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=200),
)
def test_re2_reads_the_common_subset_as_python_does(regex: str, line: str) -> None:
    """On ASCII lines, RE2 finds what `re` finds (these regexes are safe for `re`)."""
    expected = None
    found = re.search(regex, line)
    if found is not None:
        text = found.group(1) if found.re.groups else found.group(0)
        try:
            number = float(text.strip()) if text is not None else None
        except ValueError:
            number = None
        if number is not None and number == number and abs(number) != float("inf"):
            expected = number
    scraper = Scraper([{"Name": "m", "Regex": regex}])
    scraper.feed(1, line)
    assert scraper.latest.get("m", (None, 1))[0] == expected
