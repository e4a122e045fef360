"""The billing ledger: every upfront fee and billed second, per account (spec §6).

What is charged, and how much, is decided in `domain.billing`; this records it.
Amounts are exact decimals stored as text, so sums never drift.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from sqlalchemy import select
from sqlalchemy.orm import Session

from dockyard.domain.billing import Charge
from dockyard.store.tables import LedgerEntry


def record(
    session: Session,
    *,
    account_id: str,
    region: str,
    kind: Charge,
    resource_arn: str,
    amount: Decimal,
    currency: str,
    description: str,
    now: datetime,
) -> None:
    session.add(
        LedgerEntry(
            account_id=account_id,
            region=region,
            kind=kind.value,
            resource_arn=resource_arn,
            amount=str(amount),
            currency=currency,
            description=description,
            created_at=now,
        )
    )


def spent(session: Session, account_id: str) -> Decimal:
    amounts = session.scalars(
        select(LedgerEntry.amount).where(LedgerEntry.account_id == account_id)
    )
    return sum((Decimal(amount) for amount in amounts), Decimal("0"))
