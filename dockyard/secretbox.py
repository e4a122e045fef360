"""Encryption of stored access-key secrets.

SigV4 verification needs the secret itself (it is an HMAC key), so secrets cannot be
stored as one-way hashes; they are encrypted with a master key that lives beside the
database in the data dir (mode 0600) or comes from DOCKYARD_MASTER_KEY.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken

MASTER_KEY_FILE = "master.key"


def write_private(path: Path, text: str) -> None:
    """Write a file readable by its owner only, without a window where it is wider."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    os.chmod(path, 0o600)


class SecretBox:
    def __init__(self, key: bytes) -> None:
        self._fernet = Fernet(key)
        self._key = key

    def derive_key(self, purpose: str) -> bytes:
        """A key of its own for `purpose` (an HMAC of the master key), so that what is
        signed for one use is never taken for another, and the master key itself signs
        nothing but the secrets it encrypts."""
        return hmac.new(self._key, f"dockyard:{purpose}".encode(), hashlib.sha256).digest()

    @classmethod
    def for_data_dir(cls, data_dir: Path) -> SecretBox:
        env = os.environ.get("DOCKYARD_MASTER_KEY")
        if env:
            return cls(env.encode())
        path = Path(data_dir) / MASTER_KEY_FILE
        if not path.exists():
            write_private(path, Fernet.generate_key().decode())
        return cls(path.read_text().strip().encode())

    def encrypt(self, secret: str) -> str:
        return self._fernet.encrypt(secret.encode()).decode()

    def decrypt(self, ciphertext: str) -> str:
        try:
            return self._fernet.decrypt(ciphertext.encode()).decode()
        except InvalidToken as exc:
            raise RuntimeError(
                "cannot decrypt a stored access key: the master key does not match the database"
            ) from exc
