"""A short-lived in-process cache of access keys, so verifying a request costs no query.

Keys created by `dockyard keys create` (directly on the database) are found at once:
only hits are cached, and a miss always asks the database. Keys disabled or deleted
(`dockyard keys disable|delete`, also on the database) stop working at once too: those
commands append to the data dir's revocation file (`services.accounts`), and the cache
looks at that file's size (one `stat`) before every hit; when it has changed, every
cached key is forgotten and looked up again. Only a server on another data dir would
keep a cached key for up to `TTL_SECONDS`.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path

from dockyard.api import sigv4
from dockyard.clock import monotonic, wall_now
from dockyard.secretbox import SecretBox
from dockyard.services import accounts
from dockyard.services.accounts import KeyRecord
from dockyard.store.db import Database

TTL_SECONDS = 30.0


class KeyCache:
    def __init__(self, db: Database, box: SecretBox, data_dir: Path | None = None) -> None:
        self._db = db
        self._box = box
        # Where `dockyard keys disable|delete` announce a change (None: nowhere to look,
        # as in tests that build a cache of their own).
        self._data_dir = data_dir
        self._lock = threading.Lock()
        self._entries: dict[str, tuple[float, KeyRecord]] = {}
        self._revocations = self._revocations_now()

    def _revocations_now(self) -> tuple[int, int]:
        return accounts.revocations_seen(self._data_dir) if self._data_dir else (0, 0)

    def get(self, access_key_id: str) -> KeyRecord | None:
        """The Active key of that id, or None (unknown, disabled or deleted)."""
        now = monotonic()
        # Read before the database: a revocation announced after this is seen next time.
        revocations = self._revocations_now()
        with self._lock:
            if revocations != self._revocations:
                self._entries.clear()
                self._revocations = revocations
            entry = self._entries.get(access_key_id)
        if entry is not None and now - entry[0] < TTL_SECONDS:
            return entry[1]
        if len(access_key_id) > 128:
            return None
        with self._db.read() as session:
            record = accounts.lookup_key(session, self._box, access_key_id)
        with self._lock:
            if record is None:
                self._entries.pop(access_key_id, None)
            elif self._revocations == revocations:
                self._entries[access_key_id] = (now, record)
        return record

    def verify(
        self,
        method: str,
        raw_path: str,
        query_string: str,
        headers: Sequence[tuple[str, str]],
        body: bytes,
        max_skew: timedelta,
    ) -> tuple[sigv4.SignedRequest, KeyRecord]:
        """A request's SigV4 signature checked against the key it names: what it was
        signed for, and by which key (raises sigv4.AuthError otherwise)."""
        found: list[KeyRecord] = []

        def secret_for(access_key_id: str) -> str | None:
            record = self.get(access_key_id)
            if record is None:
                return None
            found.append(record)
            return record.secret_access_key

        signed = sigv4.verify(
            method=method,
            raw_path=raw_path,
            query_string=query_string,
            headers=headers,
            body=body,
            secret_for=secret_for,
            now=wall_now(),
            max_skew=max_skew,
        )
        return signed, found[0]
