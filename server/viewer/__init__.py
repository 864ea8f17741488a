"""Viewing desktops: viewer capabilities, the viewer page and the VNC stream proxy."""
