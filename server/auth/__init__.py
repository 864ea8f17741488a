"""Authentication: passwords, tokens, sessions, CSRF and the login endpoints."""

from __future__ import annotations
