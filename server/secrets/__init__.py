"""Secrets: API tokens, login links and passwords, minted and hashed."""
