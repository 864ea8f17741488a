"""Persistence: SQLAlchemy models, Alembic upgrades and the ``Store`` seam."""

from __future__ import annotations
