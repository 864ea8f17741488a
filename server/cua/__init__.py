"""Cua's computer-server protocol per desktop, over the typed actions (docs/cua.md)."""
