"""Sandbox users unique on this host, whichever data dir gives them out.

Each account's code runs as a sandbox user of its own (`LocalBackend.sandbox_uid`). The
kernel keeps some things per uid whatever namespace a process is in - the user and
session keyrings, the count of processes, inotify instances and user namespaces, POSIX
message queue bytes - so two servers on one host whose data dirs both numbered their
users from 2,100,000,000 up gave their tenants the same uid: one server's tenant read a
key another server's had stored. So the uids come from one registry per host
(`/var/lib/dockyard/sandbox-uids`, root's alone), changed under a lock: an entry per
(data dir, account), the data dir named by its real path and by a random token the
registry leaves in it (`sandbox/host-uids-token`; an inode number is reused at once by
a directory made where one was deleted), so a data dir keeps its users across restarts
and a new one made at a deleted one's path does not inherit them.

An entry whose data dir is gone frees its uid for reuse (tests make hundreds of data
dirs): a sandbox user's files all live in its data dir (its instances' trees; its
`/tmp` and `/dev/shm` are file systems of each sandbox's own), so they went with it. A
uid is not reused while any process on the host still runs as it (an agent whose data
dir was deleted under it), so no live process shares it with its next owner.

A data dir from before the registry kept its uids in `<data-dir>/sandbox/uids`: the
first to register keeps each of its uids that no other data dir has registered (its warm
pools' running sandboxes go on as before); one that another took first gets a new uid.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from dockyard.compute.wire.private_files import write_private

# Far above any uid a distribution or a person hands out, below 2^31 (some tools still
# read uids as signed 32-bit numbers).
BASE = 2_100_000_000
COUNT = 40_000_000
REGISTRY = Path("/var/lib/dockyard/sandbox-uids")
# Where the registry is instead, for a host whose /var/lib cannot hold it.
REGISTRY_ENV = "DOCKYARD_SANDBOX_UIDS_DIR"
# The data dir's token, under it.
TOKEN = Path("sandbox") / "host-uids-token"


class SandboxUidError(Exception):
    """No sandbox user can be given out; str() says why."""


@dataclass(frozen=True)
class Entry:
    uid: int
    data_dir: str
    account: str
    token: str

    def current(self) -> bool:
        """Whether its data dir is still there (the same directory, not a new one)."""
        return _token(Path(self.data_dir)) == self.token


def registry() -> SandboxUids:
    """This host's registry."""
    return SandboxUids(Path(os.environ.get(REGISTRY_ENV) or REGISTRY))


class SandboxUids:
    """The registry at `path`."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def uid(self, data_dir: Path, account: str, legacy: Path | None = None) -> int:
        """The sandbox user of `account` under `data_dir`: the same on every call while
        the data dir lasts, no other (data dir, account)'s on this host. `legacy` is the
        file an older dockyard kept the data dir's uid for the account in: kept in step,
        and its uid kept if no other data dir has it."""
        real = os.path.realpath(data_dir)
        name = _entry_name(real, account)
        found = self._read(self.path / name)
        if found is not None and found.data_dir == real and found.account == account:
            if found.current():
                return found.uid
        with self._locked():
            uid = self._allocate(real, account, name, _legacy_uid(legacy))
        if legacy is not None and _legacy_uid(legacy) != uid:
            legacy.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            write_private(legacy, str(uid))
        return uid

    def entries(self) -> list[Entry]:
        if not self.path.is_dir():
            return []
        found = []
        for path in self.path.iterdir():
            if not path.name.startswith("."):
                entry = self._read(path)
                if entry is not None:
                    found.append(entry)
        return found

    # -- under the lock -------------------------------------------------------------------

    def _allocate(self, real: str, account: str, name: str, preferred: int | None) -> int:
        token = _token(Path(real))
        mine = self._read(self.path / name)
        if token is not None and mine is not None and mine.token == token:
            if mine.data_dir == real and mine.account == account:
                return mine.uid  # registered by another process meanwhile
        if token is None:
            token = secrets.token_hex(16)
            try:
                (Path(real) / TOKEN).parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                write_private(Path(real) / TOKEN, token)
            except OSError as exc:
                raise SandboxUidError(f"cannot mark the data dir {real}: {exc}") from exc
        running = users_running()
        taken: set[int] = set()
        for entry in self.entries():
            if entry.current():
                taken.add(entry.uid)
            elif entry.uid in running:
                taken.add(entry.uid)  # gone, but a process of it still runs
            else:
                (self.path / _entry_name(entry.data_dir, entry.account)).unlink(missing_ok=True)
        if preferred is not None and preferred not in taken:
            uid = preferred
        else:
            uid = _lowest_free(taken | running)
        record = {"uid": uid, "data_dir": real, "account": account, "token": token}
        write_private(self.path / name, json.dumps(record))
        return uid

    @contextmanager
    def _locked(self) -> Iterator[None]:
        try:
            self.path.mkdir(mode=0o700, parents=True, exist_ok=True)
            os.chmod(self.path, 0o700)
            lock = open(self.path / ".lock", "a")  # noqa: SIM115 - closed below
        except OSError as exc:
            raise SandboxUidError(
                f"cannot keep this host's sandbox users in {self.path} ({exc}); "
                f"set {REGISTRY_ENV} to a directory root may write"
            ) from exc
        with lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield

    @staticmethod
    def _read(path: Path) -> Entry | None:
        try:
            record = json.loads(path.read_text())
            return Entry(
                uid=int(record["uid"]),
                data_dir=str(record["data_dir"]),
                account=str(record["account"]),
                token=str(record["token"]),
            )
        except (OSError, ValueError, KeyError, TypeError):
            return None


def _token(data_dir: Path) -> str | None:
    try:
        return (data_dir / TOKEN).read_text().strip() or None
    except OSError:
        return None


def _entry_name(real: str, account: str) -> str:
    return hashlib.sha256(f"{real}\0{account}".encode()).hexdigest()[:40]


def _legacy_uid(path: Path | None) -> int | None:
    if path is None:
        return None
    try:
        uid = int(path.read_text())
    except (OSError, ValueError):
        return None
    return uid if BASE <= uid < BASE + COUNT else None


def _lowest_free(taken: set[int]) -> int:
    uid = BASE
    for used in sorted(u for u in taken if u >= BASE):
        if used > uid:
            break
        uid = used + 1
    if uid >= BASE + COUNT:
        raise SandboxUidError("every sandbox uid of this host is taken")
    return uid


def users_running() -> set[int]:
    """The uids (real, effective, saved or file system) any process on this host runs
    as, in the sandbox users' range."""
    found: set[int] = set()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/status", "rb") as status:
                for line in status:
                    if line.startswith(b"Uid:"):
                        found.update(int(u) for u in line.split()[1:])
                        break
        except OSError:
            continue
    return {uid for uid in found if BASE <= uid < BASE + COUNT}
