"""A short-lived in-process cache of access keys, so verifying a request costs no query.

Keys created by `dockyard keys create` (directly on the database) are found at once:
only hits are cached, and a miss always asks the database.
"""

from __future__ import annotations

import threading

from dockyard.clock import monotonic
from dockyard.secretbox import SecretBox
from dockyard.services import accounts
from dockyard.services.accounts import KeyRecord
from dockyard.store.db import Database

TTL_SECONDS = 30.0


class KeyCache:
    def __init__(self, db: Database, box: SecretBox) -> None:
        self._db = db
        self._box = box
        self._lock = threading.Lock()
        self._entries: dict[str, tuple[float, KeyRecord]] = {}

    def get(self, access_key_id: str) -> KeyRecord | None:
        now = monotonic()
        with self._lock:
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
            else:
                self._entries[access_key_id] = (now, record)
        return record
