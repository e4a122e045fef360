"""Every query of a resource starts scoped to the account and region that own it.

One place for the rule that an account never sees another's resources: services
build their queries on `owned(Model, account_id, region)` and narrow from there.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Select, select


def owned(model: Any, account_id: str, region: str) -> Select[Any]:
    """SELECT model rows of one account in one region (add `.where(...)` to narrow)."""
    return select(model).where(model.account_id == account_id, model.region == region)
