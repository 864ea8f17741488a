"""Disabled users (``users.disabled_at``) and co-located relays (``relays.co_located``).

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("users", sa.Column("disabled_at", sa.DateTime(timezone=True), nullable=True))
    op.add_column(
        "relays", sa.Column("co_located", sa.Boolean(), server_default=sa.false(), nullable=False)
    )


def downgrade() -> None:
    # A plain DROP COLUMN (SQLite 3.35+), not batch mode: batch mode would re-create
    # ``users``, which other tables reference with foreign keys enforced.
    op.drop_column("relays", "co_located")
    op.drop_column("users", "disabled_at")
