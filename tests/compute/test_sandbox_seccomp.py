"""The sandbox's system-call filter (`sandbox.seccomp`), loaded into a child process
directly (tests/e2e/test_sandbox_host.py attacks it from inside a real job)."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

from dockyard.compute.sandbox import seccomp as sandbox_seccomp

pytestmark = pytest.mark.skipif(
    platform.machine() != "x86_64", reason="the child below uses x86_64's numbers"
)

# Loads the filter read from stdin into itself, then reports what each call answers.
CHILD = """
import ctypes, os, struct, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
data = sys.stdin.buffer.read()
buffer = ctypes.create_string_buffer(data, len(data))
prog = struct.pack("HxxxxxxQ", len(data) // 8, ctypes.addressof(buffer))
assert libc.prctl(38, 1, 0, 0, 0) == 0  # PR_SET_NO_NEW_PRIVS
# PR_SET_SECCOMP, SECCOMP_MODE_FILTER
assert libc.prctl(22, 2, ctypes.c_char_p(prog), 0, 0) == 0, ctypes.get_errno()
for name, nr, args in [
    ("keyctl", 250, (0, -4, 1)),
    ("add_key", 248, (b"user", b"k", b"v", 1, -4)),
    ("request_key", 249, (b"user", b"k", None, 0)),
    ("x32-getpid", 39 | 0x40000000, ()),
    ("getpid", 39, ()),
]:
    args = [ctypes.c_long(a) if isinstance(a, int) else a for a in args]
    got = libc.syscall(ctypes.c_long(nr), *args)
    print(name, os.strerror(ctypes.get_errno()) if got == -1 else "ok")
"""


def _under(program: bytes) -> dict[str, str]:
    child = subprocess.run(
        [sys.executable, "-c", CHILD], input=program, capture_output=True, check=True
    )
    lines = child.stdout.decode().splitlines()
    return {name: answer for name, _, answer in (line.partition(" ") for line in lines)}


def test_key_calls_fail_and_everything_else_runs() -> None:
    got = _under(sandbox_seccomp.program())
    assert got == {
        "keyctl": "Operation not permitted",
        "add_key": "Operation not permitted",
        "request_key": "Operation not permitted",
        "x32-getpid": "Operation not permitted",
        "getpid": "ok",
    }


def test_the_program_is_what_the_kernel_takes() -> None:
    program = sandbox_seccomp.program()
    assert len(program) % 8 == 0 and len(program) // 8 < 4096  # BPF_MAXINSNS
    # Every known ABI at once still fits one-byte jumps.
    everything = tuple(sandbox_seccomp.KEY_SYSCALLS)
    assert len(sandbox_seccomp.build(everything)) // 8 > len(program) // 8


def test_an_unknown_architecture_gets_no_sandbox(monkeypatch: pytest.MonkeyPatch) -> None:
    sandbox_seccomp.program.cache_clear()
    monkeypatch.setattr(platform, "machine", lambda: "vax")
    try:
        with pytest.raises(sandbox_seccomp.SeccompError, match="vax"):
            sandbox_seccomp.program()
    finally:
        sandbox_seccomp.program.cache_clear()


def test_each_start_reads_the_whole_filter_from_its_own_descriptor() -> None:
    first, second = sandbox_seccomp.descriptor(), sandbox_seccomp.descriptor()
    try:
        assert not os.get_inheritable(first)
        assert os.read(first, 1 << 16) == sandbox_seccomp.program()
        assert os.read(second, 1 << 16) == sandbox_seccomp.program()
        assert os.read(first, 1) == b""  # its writing end is closed: bwrap sees the end
    finally:
        os.close(first)
        os.close(second)
