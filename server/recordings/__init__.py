"""Recordings of desktops: segments from relays, their manifest, timeline, video and export
(docs/recording.md)."""
