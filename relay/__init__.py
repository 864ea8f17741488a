"""The relay: dials out to the server and runs desktops."""

__version__ = "0.1.0"
