"""Each signature once, for the requests that start something on a node (`clusters
exec` and `clusters shell`): a captured signed request is not a second shell or a
second run of the command.

SigV4 accepts a request signed up to `max_skew` before or after the server's real time
(`sigv4.check_skew`), so a signature can be replayed until `signed_at + max_skew`; it
is remembered until then, and forgotten after (by then it is refused as expired). The
ledger holds at most `capacity` signatures; when every one of them is still within its
window a new request is refused (429) rather than an old signature forgotten, so the
bound never reopens a replay. It is in memory: a restart forgets it (a signature made
before the restart can be used once more after it, within its window), and each server
of several on one database keeps its own.

Two identical requests signed in the same second carry the same signature; dockyard's
CLI signs a random `X-Dockyard-Nonce` header so that its requests never collide.
"""

from __future__ import annotations

import heapq
import threading
from datetime import datetime, timedelta

CAPACITY = 50_000


class Replayed(Exception):
    def __init__(self, code: str, message: str, status: int) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status


class SeenSignatures:
    def __init__(self, max_skew: timedelta, capacity: int = CAPACITY) -> None:
        self.max_skew = max_skew
        self.capacity = capacity
        self._lock = threading.Lock()
        self._until: dict[str, datetime] = {}
        self._expiring: list[tuple[datetime, str]] = []

    def __len__(self) -> int:
        return len(self._until)

    def use(self, signature: str, signed_at: datetime, now: datetime) -> None:
        """Spend a verified request's signature; raise Replayed if it was spent before
        (or if the ledger is full of signatures still in their window)."""
        until = signed_at + self.max_skew
        with self._lock:
            while self._expiring and self._expiring[0][0] < now:
                _, old = heapq.heappop(self._expiring)
                self._until.pop(old, None)
            if signature in self._until:
                raise Replayed(
                    "InvalidSignatureException",
                    "This request's signature was already used: a request that starts a "
                    "command or a shell is accepted once. Sign each request anew (two "
                    "identical requests signed in the same second have the same signature; "
                    "sign a random header such as X-Dockyard-Nonce to tell them apart).",
                    403,
                )
            if len(self._until) >= self.capacity:
                raise Replayed(
                    "ThrottlingException",
                    f"More than {self.capacity} commands and shells were started in the last "
                    f"{int(self.max_skew.total_seconds() * 2 // 60)} minutes; try again later.",
                    429,
                )
            self._until[signature] = until
            heapq.heappush(self._expiring, (until, signature))
