"""How often the console's sign-in may be got wrong: a few failures a minute per client
address and per access key, then 429 with Retry-After until the oldest ages out.

A secret is 40 random characters and the operator key 32 random bytes, so guessing one
is hopeless anyway; the limit keeps the sign-in page from being a free, fast oracle
(and keeps a guessing client's load off the database). Failures count; a right key
resets nothing (else one's own key would wipe one's record between guesses), and while
a client or key is over the limit even the right secret is refused, unread. Failures
against key ids that do not exist count for the address only, so made-up ids cannot
push a real key's record out. Memory is bounded: at most `MAX_TRACKED` addresses and as
many keys, the least recently failed forgotten first. Kept in memory: a restart forgets
it, and each server of several on one database counts its own.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass

from dockyard.clock import monotonic

FAILURES = 5
WINDOW_SECONDS = 60.0
MAX_TRACKED = 10_000


@dataclass(frozen=True)
class Refusal:
    """Over the limit: for how long, and whose (the address's or the key's)."""

    retry_after: int
    why: str


class _Failures:
    """Failures per name in a sliding window, for at most `capacity` names."""

    def __init__(self, limit: int, window: float, capacity: int) -> None:
        self.limit = limit
        self.window = window
        self.capacity = capacity
        self._seen: OrderedDict[str, deque[float]] = OrderedDict()

    def _recent(self, name: str, now: float) -> deque[float] | None:
        times = self._seen.get(name)
        if times is None:
            return None
        while times and times[0] <= now - self.window:
            times.popleft()
        if not times:
            del self._seen[name]
            return None
        return times

    def wait(self, name: str, now: float) -> float:
        """Seconds until `name` may try again (0: now)."""
        times = self._recent(name, now)
        if times is None or len(times) < self.limit:
            return 0.0
        return times[0] + self.window - now

    def add(self, name: str, now: float) -> None:
        times = self._recent(name, now)
        if times is None:
            times = deque(maxlen=self.limit)
            self._seen[name] = times
            while len(self._seen) > self.capacity:
                self._seen.popitem(last=False)
        self._seen.move_to_end(name)
        times.append(now)


class SignInLimiter:
    def __init__(
        self,
        failures: int = FAILURES,
        window_seconds: float = WINDOW_SECONDS,
        capacity: int = MAX_TRACKED,
        now: Callable[[], float] = monotonic,
    ) -> None:
        self._now = now
        self._lock = threading.Lock()
        self._addresses = _Failures(failures, window_seconds, capacity)
        self._keys = _Failures(failures, window_seconds, capacity)

    def check(self, address: str, key: str | None) -> Refusal | None:
        """None if this client may try to sign in with this key (an access key id or
        the operator's) now; else how long it must wait."""
        now = self._now()
        with self._lock:
            by_address = self._addresses.wait(address, now)
            by_key = self._keys.wait(key, now) if key else 0.0
        wait = max(by_address, by_key)
        if wait <= 0:
            return None
        why = "this address" if by_address >= by_key else "this key"
        return Refusal(max(1, math.ceil(wait)), why)

    def failed(self, address: str, key: str | None) -> None:
        """A wrong sign-in from `address`; `key` only when it names a real key."""
        now = self._now()
        with self._lock:
            self._addresses.add(address, now)
            if key:
                self._keys.add(key, now)
