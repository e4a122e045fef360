"""rclone's `--auth-proxy` program: an access key in, its secret and backend out.

rclone serve s3 runs this once per access key it has not seen (and again every five
minutes), with `{"user": ACCESS_KEY_ID}` on stdin; it answers the key's secret, which
rclone verifies the request's SigV4 signature with, and the backend to serve: the
data dir's S3 directory, the same for every account (bucket ownership is checked in
front of rclone, `dockyard.api.s3`). An unknown, disabled or deleted key gets an empty
answer, which rclone refuses. So keys made with `dockyard keys create` work at once. A
key disabled or deleted afterwards may still be in rclone's own cache for five minutes,
but no request reaches rclone without passing dockyard's front door first, which looks
the key up again (`api.keys.KeyCache`) and refuses it at once.

    python -m dockyard.s3.auth   (DOCKYARD_S3AUTH_DATA_DIR, DOCKYARD_S3AUTH_DATABASE_URL)
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

DATA_DIR_VARIABLE = "DOCKYARD_S3AUTH_DATA_DIR"
DATABASE_VARIABLE = "DOCKYARD_S3AUTH_DATABASE_URL"


def answer(request: dict[str, object], data_dir: Path, database_url: str) -> dict[str, str]:
    from dockyard.secretbox import SecretBox
    from dockyard.services.accounts import lookup_key
    from dockyard.store.db import Database

    user = request.get("user")
    if not isinstance(user, str) or not user or len(user) > 128:
        return {}
    db = Database(database_url)
    try:
        with db.read() as connection:
            record = lookup_key(connection, SecretBox.for_data_dir(data_dir), user)
    finally:
        db.engine.dispose()
    if record is None:
        return {}
    return {
        "type": "local",
        "_root": str(data_dir / "s3"),
        "_secret_access_key": record.secret_access_key,
    }


def main() -> int:
    data_dir = Path(os.environ[DATA_DIR_VARIABLE])
    database_url = os.environ[DATABASE_VARIABLE]
    try:
        request = json.load(sys.stdin)
    except ValueError:
        request = {}
    json.dump(
        answer(request if isinstance(request, dict) else {}, data_dir, database_url), sys.stdout
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
