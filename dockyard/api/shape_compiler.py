"""Turning a botocore shape into a tree of small closures, once per shape.

Validation (`shapes`) and serialisation (`serialise`) both walk a shape tree on every
request; compiling the walk into closures once keeps the per-request cost to a few
microseconds. Recursive shapes are compiled once and linked through a forwarding cell.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Any

from botocore.model import Shape


class Compiler:
    """Builds one node per shape name for one top-level shape, linking cycles via cells."""

    def __init__(self, build: Callable[[Shape, Compiler], Callable[..., Any]]) -> None:
        self._build = build
        self._done: dict[str, Callable[..., Any]] = {}
        self._open: dict[str, list[Callable[..., Any] | None]] = {}

    def node(self, shape: Shape) -> Callable[..., Any]:
        name = shape.name
        done = self._done.get(name)
        if done is not None:
            return done
        cell = self._open.get(name)
        if cell is not None:  # a recursive shape: call through the cell filled in below
            return _forwarder(cell)
        cell = self._open[name] = [None]
        try:
            built = self._build(shape, self)
        finally:
            del self._open[name]
        cell[0] = built
        self._done[name] = built
        return built


def _forwarder(cell: list[Callable[..., Any] | None]) -> Callable[..., Any]:
    def forward(*args: Any) -> Any:
        target = cell[0]
        assert target is not None
        return target(*args)

    return forward


_LOCK = threading.Lock()


def cached(
    cache: weakref.WeakKeyDictionary[Shape, Any],
    shape: Shape,
    build: Callable[[Shape, Compiler], Any],
) -> Any:
    # Keyed by the shape object: dockyard holds its ServiceModels for the process's life
    # and botocore caches operation models and their input/output shapes on them.
    node = cache.get(shape)
    if node is None:
        with _LOCK:
            node = cache.get(shape)
            if node is None:
                node = Compiler(build).node(shape)
                cache[shape] = node
    return node


def bounds(shape: Shape) -> tuple[Any, Any]:
    return shape.metadata.get("min"), shape.metadata.get("max")
