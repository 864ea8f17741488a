"""Initial schema: identity, conversations, relays, audit, messages, desktops.

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _timestamp() -> sa.DateTime:
    return sa.DateTime(timezone=True)


def _autoincrement_id() -> sa.types.TypeEngine[int]:
    return sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "audit_events",
        sa.Column("id", _autoincrement_id(), autoincrement=True, nullable=False),
        sa.Column("at", _timestamp(), nullable=False),
        sa.Column("op", sa.String(length=64), nullable=False),
        sa.Column("actor", sa.String(length=200), nullable=False),
        sa.Column("conversation_id", sa.String(length=32), nullable=True),
        sa.Column("relay_id", sa.String(length=32), nullable=True),
        sa.Column("desktop_session_id", sa.String(length=64), nullable=True),
        sa.Column("outcome", sa.String(length=64), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("source", sa.String(length=64), nullable=True),
        sa.Column("request_id", sa.String(length=64), nullable=True),
        sa.Column("details", sa.JSON(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_audit_events")),
    )
    op.create_index(op.f("ix_audit_events_at"), "audit_events", ["at"])
    op.create_index(op.f("ix_audit_events_relay_id"), "audit_events", ["relay_id"])

    op.create_table(
        "conversations",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("title", sa.String(length=200), nullable=False),
        sa.Column("created_at", _timestamp(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_conversations")),
    )
    op.create_index(op.f("ix_conversations_title"), "conversations", ["title"])

    op.create_table(
        "users",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("username", sa.String(length=64), nullable=False),
        sa.Column("password_hash", sa.String(length=255), nullable=False),
        sa.Column("is_admin", sa.Boolean(), nullable=False),
        sa.Column("created_at", _timestamp(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_users")),
        sa.UniqueConstraint("username", name=op.f("uq_users_username")),
    )
    op.create_table(
        "api_tokens",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("user_id", sa.String(length=32), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("created_at", _timestamp(), nullable=False),
        sa.Column("last_used_at", _timestamp(), nullable=True),
        sa.Column("revoked_at", _timestamp(), nullable=True),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_api_tokens_user_id_users"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_tokens")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_api_tokens_token_hash")),
    )
    op.create_index(op.f("ix_api_tokens_user_id"), "api_tokens", ["user_id"])

    op.create_table(
        "conversation_members",
        sa.Column("conversation_id", sa.String(length=32), nullable=False),
        sa.Column("user_id", sa.String(length=32), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.ForeignKeyConstraint(
            ["conversation_id"],
            ["conversations.id"],
            name=op.f("fk_conversation_members_conversation_id_conversations"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["user_id"],
            ["users.id"],
            name=op.f("fk_conversation_members_user_id_users"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("conversation_id", "user_id", name=op.f("pk_conversation_members")),
    )
    op.create_index(op.f("ix_conversation_members_user_id"), "conversation_members", ["user_id"])

    op.create_table(
        "login_links",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("user_id", sa.String(length=32), nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("created_at", _timestamp(), nullable=False),
        sa.Column("expires_at", _timestamp(), nullable=False),
        sa.Column("used_at", _timestamp(), nullable=True),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_login_links_user_id_users"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_login_links")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_login_links_token_hash")),
    )
    op.create_index(op.f("ix_login_links_user_id"), "login_links", ["user_id"])

    op.create_table(
        "messages",
        sa.Column("id", _autoincrement_id(), autoincrement=True, nullable=False),
        sa.Column("conversation_id", sa.String(length=32), nullable=False),
        sa.Column("author_id", sa.String(length=32), nullable=True),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("payload", sa.JSON(), nullable=True),
        sa.Column("created_at", _timestamp(), nullable=False),
        sa.ForeignKeyConstraint(
            ["author_id"],
            ["users.id"],
            name=op.f("fk_messages_author_id_users"),
            ondelete="SET NULL",
        ),
        sa.ForeignKeyConstraint(
            ["conversation_id"],
            ["conversations.id"],
            name=op.f("fk_messages_conversation_id_conversations"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_messages")),
    )
    op.create_index(op.f("ix_messages_conversation_id_id"), "messages", ["conversation_id", "id"])

    op.create_table(
        "relays",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("owner_id", sa.String(length=32), nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("token_revoked_at", _timestamp(), nullable=True),
        sa.Column("connected", sa.Boolean(), nullable=False),
        sa.Column("last_seen_at", _timestamp(), nullable=True),
        sa.Column("protocol_version", sa.Integer(), nullable=True),
        sa.Column("relay_version", sa.String(length=64), nullable=True),
        sa.Column("capabilities", sa.JSON(), nullable=False),
        sa.Column("created_at", _timestamp(), nullable=False),
        sa.ForeignKeyConstraint(["owner_id"], ["users.id"], name=op.f("fk_relays_owner_id_users")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_relays")),
        sa.UniqueConstraint("name", name=op.f("uq_relays_name")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_relays_token_hash")),
    )
    op.create_index(op.f("ix_relays_owner_id"), "relays", ["owner_id"])

    op.create_table(
        "web_sessions",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("user_id", sa.String(length=32), nullable=False),
        sa.Column("secret_hash", sa.String(length=64), nullable=False),
        sa.Column("created_at", _timestamp(), nullable=False),
        sa.Column("expires_at", _timestamp(), nullable=False),
        sa.ForeignKeyConstraint(
            ["user_id"],
            ["users.id"],
            name=op.f("fk_web_sessions_user_id_users"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_web_sessions")),
        sa.UniqueConstraint("secret_hash", name=op.f("uq_web_sessions_secret_hash")),
    )
    op.create_index(op.f("ix_web_sessions_expires_at"), "web_sessions", ["expires_at"])
    op.create_index(op.f("ix_web_sessions_user_id"), "web_sessions", ["user_id"])

    op.create_table(
        "desktops",
        sa.Column("relay_id", sa.String(length=32), nullable=False),
        sa.Column("desktop_session_id", sa.String(length=64), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("slot", sa.String(length=64), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("started_at", _timestamp(), nullable=True),
        sa.Column("started_by", sa.String(length=200), nullable=True),
        sa.Column("updated_at", _timestamp(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("geometry", sa.String(length=32), nullable=True),
        sa.Column("display", sa.String(length=32), nullable=True),
        sa.ForeignKeyConstraint(
            ["relay_id"],
            ["relays.id"],
            name=op.f("fk_desktops_relay_id_relays"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("relay_id", "desktop_session_id", name=op.f("pk_desktops")),
    )
    op.create_table(
        "relay_shares",
        sa.Column("relay_id", sa.String(length=32), nullable=False),
        sa.Column("conversation_id", sa.String(length=32), nullable=False),
        sa.ForeignKeyConstraint(
            ["conversation_id"],
            ["conversations.id"],
            name=op.f("fk_relay_shares_conversation_id_conversations"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["relay_id"],
            ["relays.id"],
            name=op.f("fk_relay_shares_relay_id_relays"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("relay_id", "conversation_id", name=op.f("pk_relay_shares")),
    )
    op.create_index(op.f("ix_relay_shares_conversation_id"), "relay_shares", ["conversation_id"])


def downgrade() -> None:
    # Dependents first; indexes go with their tables.
    for table in (
        "relay_shares",
        "desktops",
        "web_sessions",
        "relays",
        "messages",
        "login_links",
        "conversation_members",
        "api_tokens",
        "users",
        "conversations",
        "audit_events",
    ):
        op.drop_table(table)
