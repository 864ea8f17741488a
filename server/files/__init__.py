"""Files between people, agents and desktops: the upload and download routes (docs/files.md)."""
