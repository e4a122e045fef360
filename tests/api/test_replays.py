"""Each signature of a node command or shell once, within its window, in bounded memory
per access key."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from dockyard.api.replays import WINDOW, Replayed, SeenSignatures

SKEW = WINDOW
T0 = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
KEY = "AKIAVICTIM"


def test_a_signature_is_accepted_once_while_it_could_be_verified() -> None:
    seen = SeenSignatures(SKEW)
    seen.use(KEY, "a" * 64, T0, T0)
    for later in (T0, T0 + timedelta(minutes=2), T0 + SKEW):
        with pytest.raises(Replayed) as refused:
            seen.use(KEY, "a" * 64, T0, later)
        assert refused.value.status == 403 and "already used" in refused.value.message
    seen.use(KEY, "b" * 64, T0, T0)  # another signature is another request
    # Past its window the signature is forgotten (the verifier refuses it as expired).
    seen.use(KEY, "c" * 64, T0 + SKEW * 2, T0 + SKEW * 2)
    assert len(seen) == 1


def test_a_full_ledger_refuses_rather_than_forgets() -> None:
    seen = SeenSignatures(SKEW, capacity=3)
    for n in range(3):
        seen.use(KEY, f"{n}" * 64, T0, T0)
    with pytest.raises(Replayed) as refused:
        seen.use(KEY, "z" * 64, T0, T0)
    assert refused.value.status == 429 and KEY in refused.value.message
    with pytest.raises(Replayed) as replayed:
        seen.use(KEY, "0" * 64, T0, T0)  # still a replay, not forgotten to make room
    assert replayed.value.status == 403
    seen.use(KEY, "z" * 64, T0 + SKEW * 3, T0 + SKEW * 3)
    assert len(seen) == 1


def test_one_keys_flood_never_refuses_another_key() -> None:
    """Issue 25: one tenant's requests filled a ledger every account shared."""
    seen = SeenSignatures(SKEW, capacity=100)
    for n in range(100):
        seen.use("AKIAATTACKER", f"{n:064d}", T0, T0)
    with pytest.raises(Replayed):
        seen.use("AKIAATTACKER", "f" * 64, T0, T0)
    for n in range(100):
        seen.use(KEY, f"{n:064d}", T0, T0)  # the same signatures are another key's
    # A key that went quiet leaves nothing once its signatures are past their window.
    later = T0 + SKEW * 3
    seen.use(KEY, "e" * 64, later, later)
    assert len(seen) == 1
