"""Each signature once, for the requests that start something on a node (`clusters
exec` and `clusters shell`): a captured signed request is not a second shell or a
second run of the command.

These requests are verified within a narrower window than SigV4's 15 minutes
(`WINDOW`, 5 minutes either side of the server's real time: see `cluster_exec`), so a
signature can be replayed until `signed_at + WINDOW`; it is remembered until then, and
forgotten after (by then it is refused as expired). Only a request that will run is
recorded - signed by a known key, valid, for a node of the key's account that its policy
lets it reach - so a flood of requests that fail costs the ledger nothing.

The ledger is kept per access key, each holding at most `capacity` signatures: when all
of a key's are still within their window, that key's next request is refused (429)
rather than an old signature forgotten, so the bound never reopens a replay, and one
key filling its share never refuses another key (issue 25: 49,100 cheap failing requests
from one tenant, dated 14 minutes ahead, once filled a ledger shared by every account and
locked all of them out of exec and shell for half an hour). It is in memory: a restart
forgets it (a signature made before the restart can be used once more after it, within
its window), and each server of several on one database keeps its own.

Two identical requests signed in the same second carry the same signature; dockyard's
CLI signs a random `X-Dockyard-Nonce` header so that its requests never collide.
"""

from __future__ import annotations

import heapq
import threading
from dataclasses import dataclass, field
from datetime import datetime, timedelta

# Each key's share: far above what a person starts in ten minutes (each one a command
# that ran or a shell that opened), and small enough that every key's full share fits.
CAPACITY = 10_000
WINDOW = timedelta(minutes=5)


class Replayed(Exception):
    def __init__(self, code: str, message: str, status: int) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status


@dataclass
class _Ledger:
    """One key's signatures still within their window, and when each leaves it."""

    until: dict[str, datetime] = field(default_factory=dict)
    expiring: list[tuple[datetime, str]] = field(default_factory=list)

    def forget_expired(self, now: datetime) -> None:
        while self.expiring and self.expiring[0][0] < now:
            _, old = heapq.heappop(self.expiring)
            self.until.pop(old, None)


class SeenSignatures:
    def __init__(self, max_skew: timedelta, capacity: int = CAPACITY) -> None:
        self.max_skew = max_skew
        self.capacity = capacity
        self._lock = threading.Lock()
        self._ledgers: dict[str, _Ledger] = {}

    def __len__(self) -> int:
        return sum(len(ledger.until) for ledger in self._ledgers.values())

    def use(self, access_key_id: str, signature: str, signed_at: datetime, now: datetime) -> None:
        """Spend a verified request's signature, in its key's ledger; raise Replayed if it
        was spent before (or if the key's ledger is full of signatures still in their
        window)."""
        until = signed_at + self.max_skew
        with self._lock:
            for key_id in [k for k, ledger in self._ledgers.items() if k != access_key_id]:
                # So keys that went quiet leave nothing behind: one look per key that has
                # a ledger (keys are the operator's to make), nothing more until an entry
                # is due.
                ledger = self._ledgers[key_id]
                ledger.forget_expired(now)
                if not ledger.until:
                    del self._ledgers[key_id]
            ledger = self._ledgers.setdefault(access_key_id, _Ledger())
            ledger.forget_expired(now)
            if signature in ledger.until:
                raise Replayed(
                    "InvalidSignatureException",
                    "This request's signature was already used: a request that starts a "
                    "command or a shell is accepted once. Sign each request anew (two "
                    "identical requests signed in the same second have the same signature; "
                    "sign a random header such as X-Dockyard-Nonce to tell them apart).",
                    403,
                )
            if len(ledger.until) >= self.capacity:
                minutes = int(self.max_skew.total_seconds() * 2 // 60)
                raise Replayed(
                    "ThrottlingException",
                    f"The access key {access_key_id} started more than {self.capacity} "
                    f"commands and shells in the last {minutes} minutes; try again later.",
                    429,
                )
            ledger.until[signature] = until
            heapq.heappush(ledger.expiring, (until, signature))
