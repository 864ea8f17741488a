"""Desktops in containers (``kind: docker``): the launcher (``launcher.py``) and what it
runs on (docs/docker.md, "Desktops in containers")."""
