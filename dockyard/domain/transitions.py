"""Checked status transitions: every status change goes through one table per resource.

An illegal transition is a bug in dockyard, not a user error, so it raises.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from typing import Generic, TypeVar

S = TypeVar("S", bound=Enum)


class IllegalTransition(RuntimeError):
    pass


class Transitions(Generic[S]):
    def __init__(self, resource: str, table: Mapping[S, frozenset[S]]) -> None:
        self.resource = resource
        self.table = table

    def allowed(self, old: S, new: S) -> bool:
        return old == new or new in self.table.get(old, frozenset())

    def check(self, old: S, new: S) -> S:
        if not self.allowed(old, new):
            raise IllegalTransition(f"{self.resource} cannot go from {old.value} to {new.value}")
        return new
