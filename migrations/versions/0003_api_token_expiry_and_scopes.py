"""API token expiry and scopes (``api_tokens.expires_at``, ``read_only``, ``conversation_id``).

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Tokens made before this revision keep working as they did: no expiry, no scope.
    op.add_column("api_tokens", sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True))
    op.add_column(
        "api_tokens",
        sa.Column("read_only", sa.Boolean(), server_default=sa.false(), nullable=False),
    )
    # A plain id, no foreign key: SQLite cannot add one to an existing table without
    # re-creating it. A token scoped to a conversation that is gone reaches nothing.
    op.add_column("api_tokens", sa.Column("conversation_id", sa.String(32), nullable=True))


def downgrade() -> None:
    # A plain DROP COLUMN (SQLite 3.35+), as in 0002.
    op.drop_column("api_tokens", "conversation_id")
    op.drop_column("api_tokens", "read_only")
    op.drop_column("api_tokens", "expires_at")
