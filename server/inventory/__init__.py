"""The server's canonical inventory of desktops."""
