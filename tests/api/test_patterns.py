"""The models' patterns run in RE2: linear on the values a tenant crafts against them,
the same verdicts as the Java patterns' translation where RE2 can spell them, and a
wider (never narrower) check where it cannot."""

from __future__ import annotations

import re

import botocore.session
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dockyard.api.linear_patterns import compile_pattern
from dockyard.api.patterns import translate_pattern

_SESSION = botocore.session.get_session()
MODELS = ("sagemaker", "logs", "service-quotas", "sts", "iam")
PATTERNS = sorted(
    {
        shape.metadata["pattern"]
        for model in map(_SESSION.get_service_model, MODELS)
        for shape in map(model.shape_for, model.shape_names)
        if shape.type_name == "string" and "pattern" in shape.metadata
    }
)
# Exponential for a backtracking engine (Python's `re`) on values of ~40 characters:
# each froze the whole server, from one signed request, before the patterns ran in RE2.
CATASTROPHIC = [
    # PipelineDefinition, ResourcePolicyString: forty spaces and a line separator.
    (r".*(?:[ \r\n\t].*)*", " " * 100_000 + "\u2028"),
    # ComputeQuotaTarget.TeamName, PriorityClasses[].Name (no length limit at all).
    (r"[a-z0-9]([-a-z0-9]*[a-z0-9]){0,39}?", "a" * 100_000 + "!"),
    # CodeRepositories[].RepositoryUrl.
    (r"https://([.\-_a-zA-Z0-9]+/?){3,1016}", "https://" + "a" * 100_000 + "!"),
]


@pytest.mark.parametrize(("pattern", "value"), CATASTROPHIC)
def test_the_models_catastrophic_patterns_answer_in_one_pass(pattern: str, value: str) -> None:
    assert pattern in PATTERNS
    compiled = compile_pattern(pattern)
    assert compiled is not None
    assert compiled.fullmatch(value) is None  # with `re`, this test would not end
    assert compiled.fullmatch(value[:-1]) is not None


def test_every_pattern_runs_and_few_are_widened() -> None:
    compiled = {pattern: compile_pattern(pattern) for pattern in PATTERNS}
    assert [p for p, c in compiled.items() if c is None] == []
    widened = sorted(p for p, c in compiled.items() if c is not None and c.widened)
    # Lookarounds and counts over 1,000 (RE2's limit), all in fields dockyard only checks.
    assert 0 < len(widened) <= 25
    assert all(re.search(r"\(\?[=!<]|\{\d+,?\d{4,}\}|\{\d+,1\d{3}\}", p) for p in widened)


@pytest.mark.parametrize(
    ("pattern", "inside", "outside"),
    [
        # Java's \b, RE2's \b: both ASCII word boundaries.
        (r"((25[0-5]|(2[0-4]|1\d|[1-9]|)\d)\.?\b){4}", "10.0.0.255", "1.2.3.4a"),
        # Java's \z is the very end; its . stops at \r.
        (r"\A[a-z]+\z", "abc", "abc\n"),
        (r"^.+$", "line", "line\rbreak"),
        (r"^(?i)(true|false)$", "TRUE", "yes"),
        (r"^[\p{L}\p{Z}\p{N}_.:/=+\-@]+$", "héllo wörld 42", "semi;colon"),
        (r"^[\u0020-\uD7FF\uE000-\uFFFD\uD800\uDC00-\uDBFF\uDFFF\t]*$", "ok 😀\t", "no\x01"),
    ],
)
def test_re2_reads_java_constructs_as_the_translation_does(
    pattern: str, inside: str, outside: str
) -> None:
    compiled = compile_pattern(pattern)
    assert compiled is not None and not compiled.widened
    assert compiled.fullmatch(inside) is not None
    assert compiled.fullmatch(outside) is None


def test_a_widened_pattern_accepts_more_never_less() -> None:
    blank = compile_pattern(r"(?!\s*$).+")  # "not blank": RE2 has no lookahead
    assert blank is not None and blank.widened
    assert blank.fullmatch("x") is not None
    assert blank.fullmatch("   ") is not None  # the model refuses it; dockyard does not
    long_url = compile_pattern(r"https://([^/]+)/?.{3,1016}")
    assert long_url is not None and long_url.widened
    assert long_url.fullmatch("https://host/" + "p" * 1016) is not None


@pytest.mark.parametrize("pattern", [r"[\S\s]*", r".*", r"[^x]*", r"[a-z ]*", r"\p{L}*"])
def test_a_lone_surrogate_is_read_as_the_translation_reads_it(pattern: str) -> None:
    """JSON may carry half a surrogate pair; RE2 sees it as bytes that are no UTF-8."""
    compiled = compile_pattern(pattern)
    assert compiled is not None
    python = re.compile(*translate_pattern(pattern))
    for value in ("ab \ud800 c", "\udfff"):
        assert (compiled.fullmatch(value) is None) is (python.fullmatch(value) is None)


EXACT = [
    p for p in PATTERNS if p not in {c[0] for c in CATASTROPHIC} and not compile_pattern(p).widened
]
PROBE = st.characters(codec="utf-8", categories=["L", "N", "P", "Z", "S", "Cc"])


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.sampled_from(EXACT), st.data())
def test_re2_and_the_translation_agree_on_drawn_values(pattern: str, data: st.DataObject) -> None:
    """Values drawn from the pattern itself (RE2 must accept them) and then edited by a
    character (either verdict, but both engines' the same)."""
    python = re.compile(*translate_pattern(pattern, max_codepoint=0x2FFF))
    value = data.draw(st.from_regex(python, fullmatch=True).map(lambda s: s[:200]), "value")
    compiled = compile_pattern(pattern)
    assert compiled is not None
    exact = re.compile(*translate_pattern(pattern))
    assert (compiled.fullmatch(value) is not None) is (exact.fullmatch(value) is not None)
    at = data.draw(st.integers(0, len(value)), "at")
    edited = value[:at] + data.draw(PROBE, "char") + value[at + data.draw(st.booleans()) :]
    assert (compiled.fullmatch(edited) is not None) is (exact.fullmatch(edited) is not None)
