"""The sandbox's system-call filter: no kernel keyrings.

The kernel keeps keyrings per uid, outside every namespace: a key a job stores in its
user keyring outlives its sandbox, and every later sandbox of the same uid finds it (a
job that filled its key quota did so for all its account's later jobs). So, as Docker's
default profile does, a sandbox may not call `add_key`, `keyctl` or `request_key`: they
fail with EPERM. Programs that use keyrings (Kerberos caches, some TLS engines) take that
as "no keyring" and carry on.

The filter is a classic BPF program (`struct sock_filter`) that bwrap loads just before
it runs the sandbox's first program (`--seccomp FD`, read from a pipe made for each
start); everything the sandbox runs inherits it and none can lift it. It checks the
system call's architecture first: the numbers differ between ABIs, and a process may
call the kernel through another one than its own (`int 0x80` gives i386's numbers on
x86_64), so each ABI the host's kernel runs has its own numbers blocked; the x32 ABI
(x86_64's numbers with bit 30 set), which nothing needs, is refused outright, and a
call through any other architecture fails with ENOSYS.
"""

from __future__ import annotations

import errno
import functools
import os
import platform
import struct

# Classic BPF (linux/filter.h, linux/bpf_common.h) and seccomp (linux/seccomp.h).
_LD_W_ABS = 0x00 | 0x00 | 0x20  # BPF_LD | BPF_W | BPF_ABS
_JEQ_K = 0x05 | 0x10 | 0x00  # BPF_JMP | BPF_JEQ | BPF_K
_JGE_K = 0x05 | 0x30 | 0x00  # BPF_JMP | BPF_JGE | BPF_K
_RET_K = 0x06 | 0x00  # BPF_RET | BPF_K
_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000
# struct seccomp_data: int nr; __u32 arch; ...
_NR = 0
_ARCH = 4
_X32_BIT = 0x40000000

# linux/audit.h: the machine (linux/elf-em.h) with its 64-bit and little-endian bits.
AUDIT_ARCH_X86_64 = 0xC000003E
AUDIT_ARCH_I386 = 0x40000003
AUDIT_ARCH_AARCH64 = 0xC00000B7
AUDIT_ARCH_ARM = 0x40000028
AUDIT_ARCH_RISCV64 = 0xC00000F3
AUDIT_ARCH_PPC64LE = 0xC0000015
AUDIT_ARCH_S390X = 0x80000016

# add_key, request_key, keyctl in each ABI's table.
KEY_SYSCALLS: dict[int, tuple[int, ...]] = {
    AUDIT_ARCH_X86_64: (248, 249, 250),  # arch/x86/entry/syscalls/syscall_64.tbl
    AUDIT_ARCH_I386: (286, 287, 288),  # syscall_32.tbl
    AUDIT_ARCH_AARCH64: (217, 218, 219),  # include/uapi/asm-generic/unistd.h
    AUDIT_ARCH_ARM: (309, 310, 311),  # arch/arm/tools/syscall.tbl
    AUDIT_ARCH_RISCV64: (217, 218, 219),  # asm-generic
    AUDIT_ARCH_PPC64LE: (269, 270, 271),  # arch/powerpc/kernel/syscalls/syscall.tbl
    AUDIT_ARCH_S390X: (278, 279, 280),  # arch/s390/kernel/syscalls/syscall.tbl
}
# The ABIs a host's kernel runs programs of: its own first, then its compat ones.
_ABIS = {
    "x86_64": (AUDIT_ARCH_X86_64, AUDIT_ARCH_I386),
    "aarch64": (AUDIT_ARCH_AARCH64, AUDIT_ARCH_ARM),
    "riscv64": (AUDIT_ARCH_RISCV64,),
    "ppc64le": (AUDIT_ARCH_PPC64LE,),
    "s390x": (AUDIT_ARCH_S390X,),
}


class SeccompError(Exception):
    """No filter can be made for this host; str() says why."""


def _insn(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def build(abis: tuple[int, ...], denied_errno: int = errno.EPERM) -> bytes:
    """The filter for a kernel running `abis`: their key system calls fail with
    `denied_errno`, x32's calls too, any other ABI's with ENOSYS; the rest are allowed."""
    deny = _RET_ERRNO | denied_errno
    # Laid out as: the architecture checks, "unknown ABI", then one block per ABI
    # (load the number, refuse x32, compare, allow), and a shared "deny" at the end.
    blocks: list[list[tuple[int, int, str | None, str | None]]] = []
    for abi in abis:
        block: list[tuple[int, int, str | None, str | None]] = [(_LD_W_ABS, _NR, None, None)]
        if abi == AUDIT_ARCH_X86_64:
            block.append((_JGE_K, _X32_BIT, "deny", None))
        block += [(_JEQ_K, nr, "deny", None) for nr in KEY_SYSCALLS[abi]]
        block.append((_RET_K, _RET_ALLOW, None, None))
        blocks.append(block)
    head_length = 1 + len(abis) + 1
    starts = []
    position = head_length
    for block in blocks:
        starts.append(position)
        position += len(block)
    deny_at = position
    program = [_insn(_LD_W_ABS, _ARCH)]
    for index, abi in enumerate(abis):
        here = 1 + index
        program.append(_insn(_JEQ_K, abi, jt=_jump(here, starts[index])))
    program.append(_insn(_RET_K, _RET_ERRNO | errno.ENOSYS))
    for start, block in zip(starts, blocks, strict=True):
        for offset, (code, k, jt, jf) in enumerate(block):
            here = start + offset
            program.append(
                _insn(
                    code,
                    k,
                    jt=_jump(here, deny_at) if jt else 0,
                    jf=_jump(here, deny_at) if jf else 0,
                )
            )
    program.append(_insn(_RET_K, deny))
    return b"".join(program)


def _jump(here: int, target: int) -> int:
    """A conditional jump's offset: counted from the instruction after it, one byte."""
    offset = target - here - 1
    if not 0 <= offset <= 255:
        raise SeccompError(f"a jump of {offset} instructions does not fit the filter")
    return offset


@functools.cache
def program() -> bytes:
    """The filter for this host's kernel."""
    machine = platform.machine()
    abis = _ABIS.get(machine)
    if abis is None:
        raise SeccompError(
            f"the job sandbox has no system-call filter for this host's architecture "
            f"({machine}); it knows {', '.join(sorted(_ABIS))}"
        )
    return build(abis)


def descriptor() -> int:
    """A new descriptor to read the filter from (a pipe holding it, its writing end
    closed), for one start of bwrap: each reads its own from the start. Not inherited
    unless passed on; the caller closes it once bwrap is started."""
    data = program()
    read, write = os.pipe()
    try:
        # Far below a pipe's buffer (64 KiB): the write never blocks.
        os.write(write, data)
    except BaseException:
        os.close(read)
        raise
    finally:
        os.close(write)
    return read
