"""A tree walked one component at a time by descriptor, never through a link: what
unpacking hostile archives rests on - a tenant's source archive (`agent.files`) and an
image's layers (`images.layers`). Whatever the archive put in the tree (a link where
a directory should be, a file) stops the walk with an OSError (ELOOP, ENOTDIR): it is
never followed out of the tree.
"""

from __future__ import annotations

import os

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def path_parts(name: str, refuse: type[Exception]) -> list[str]:
    """An archive member's path as components, `refuse` raised for one that would lead
    out of the tree (absolute, `..`, a NUL)."""
    if name.startswith("/") or "\0" in name:
        raise refuse(f"{name!r} is an absolute path")
    parts = [part for part in name.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise refuse(f"{name!r} leads out of the tree")
    return parts


def open_dirs(top: int, parts: list[str]) -> int:
    """A new descriptor of the existing directory `parts` below `top`; OSError if a
    component is missing or not a real directory."""
    return _walk(top, parts, make=False)


def make_dirs(top: int, parts: list[str]) -> int:
    """As `open_dirs`, making the directories that are missing (mode 0755)."""
    return _walk(top, parts, make=True)


def _walk(top: int, parts: list[str], make: bool) -> int:
    fd = os.dup(top)
    try:
        for part in parts:
            if make:
                try:
                    os.mkdir(part, 0o755, dir_fd=fd)
                except FileExistsError:
                    pass  # a directory already, or whatever open refuses next
            inner = os.open(part, DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = inner
    except BaseException:
        os.close(fd)
        raise
    return fd
