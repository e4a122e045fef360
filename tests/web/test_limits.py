"""The console's sign-in limit as a function of time (a clock the test moves): a few
failures a minute per address and per key, then a wait that says how long."""

from __future__ import annotations

from dockyard.web.limits import FAILURES, WINDOW_SECONDS, SignInLimiter


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_few_failures_then_a_wait_until_the_oldest_ages_out() -> None:
    clock = Clock()
    limiter = SignInLimiter(now=clock)
    for _ in range(FAILURES):
        assert limiter.check("10.0.0.1", "AKIAONE") is None
        limiter.failed("10.0.0.1", "AKIAONE")
        clock.now += 1
    refused = limiter.check("10.0.0.1", "AKIAONE")
    assert refused is not None and refused.retry_after == WINDOW_SECONDS - FAILURES
    # The same address with another key, and the same key from another address: both
    # over the limit (each was counted).
    assert limiter.check("10.0.0.1", "AKIATWO") is not None
    assert limiter.check("10.0.0.2", "AKIAONE") is not None
    assert limiter.check("10.0.0.2", "AKIATWO") is None
    # Once the oldest failure is a window old, one more try is allowed.
    clock.now = 1000.0 + WINDOW_SECONDS
    assert limiter.check("10.0.0.1", "AKIAONE") is None
    limiter.failed("10.0.0.1", "AKIAONE")
    assert limiter.check("10.0.0.1", "AKIAONE") is not None


def test_a_key_is_limited_across_addresses_and_unknown_ids_count_per_address() -> None:
    clock = Clock()
    limiter = SignInLimiter(now=clock)
    for n in range(FAILURES):
        limiter.failed(f"10.0.1.{n}", "AKIAVICTIM")
    refused = limiter.check("10.0.9.9", "AKIAVICTIM")
    assert refused is not None and refused.why == "this key"
    # Made-up ids are counted for the address alone (None: not a real key).
    for _ in range(FAILURES):
        limiter.failed("10.0.2.1", None)
    assert limiter.check("10.0.2.1", "AKIAANY") is not None
    assert limiter.check("10.0.2.2", "AKIAANY") is None


def test_memory_is_bounded() -> None:
    clock = Clock()
    limiter = SignInLimiter(capacity=100, now=clock)
    for n in range(10_000):
        limiter.failed(f"10.{n // 65536}.{n // 256 % 256}.{n % 256}", None)
    assert len(limiter._addresses._seen) == 100
    # The most recent are the ones kept.
    for _ in range(FAILURES):
        limiter.failed("192.0.2.1", None)
    assert limiter.check("192.0.2.1", None) is not None
