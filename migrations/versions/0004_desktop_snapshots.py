"""Desktop snapshots (``desktop_snapshots``): a snapshot's metadata, owned by a conversation.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-03
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "desktop_snapshots",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("conversation_id", sa.String(length=32), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("relay_id", sa.String(length=32), nullable=False),
        sa.Column("profile", sa.String(length=64), nullable=True),
        sa.Column("geometry", sa.String(length=32), nullable=False),
        sa.Column("depth", sa.Integer(), nullable=False),
        sa.Column("apps", sa.JSON(), nullable=False),
        sa.Column("windows", sa.JSON(), nullable=False),
        sa.Column("size_bytes", sa.BigInteger(), nullable=False),
        sa.Column("created_by", sa.String(length=200), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["conversation_id"],
            ["conversations.id"],
            name=op.f("fk_desktop_snapshots_conversation_id_conversations"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["relay_id"],
            ["relays.id"],
            name=op.f("fk_desktop_snapshots_relay_id_relays"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_desktop_snapshots")),
        sa.UniqueConstraint(
            "conversation_id", "name", name=op.f("uq_desktop_snapshots_conversation_id_name")
        ),
    )
    op.create_index(
        op.f("ix_desktop_snapshots_conversation_id"), "desktop_snapshots", ["conversation_id"]
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_desktop_snapshots_conversation_id"), "desktop_snapshots")
    op.drop_table("desktop_snapshots")
