"""Each signature of a node command or shell once, within SigV4's window, in bounded
memory."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from dockyard.api.replays import Replayed, SeenSignatures

SKEW = timedelta(minutes=15)
T0 = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)


def test_a_signature_is_accepted_once_while_it_could_be_verified() -> None:
    seen = SeenSignatures(SKEW)
    seen.use("a" * 64, T0, T0)
    for later in (T0, T0 + timedelta(minutes=5), T0 + SKEW):
        with pytest.raises(Replayed) as refused:
            seen.use("a" * 64, T0, later)
        assert refused.value.status == 403 and "already used" in refused.value.message
    seen.use("b" * 64, T0, T0)  # another signature is another request
    # Past its window the signature is forgotten (the verifier refuses it as expired).
    seen.use("c" * 64, T0 + SKEW * 2, T0 + SKEW * 2)
    assert len(seen) == 1


def test_a_full_ledger_refuses_rather_than_forgets() -> None:
    seen = SeenSignatures(SKEW, capacity=3)
    for n in range(3):
        seen.use(f"{n}" * 64, T0, T0)
    with pytest.raises(Replayed) as refused:
        seen.use("z" * 64, T0, T0)
    assert refused.value.status == 429
    with pytest.raises(Replayed):
        seen.use("0" * 64, T0, T0)  # still a replay, not forgotten to make room
    seen.use("z" * 64, T0 + SKEW * 3, T0 + SKEW * 3)
    assert len(seen) == 1
