"""Recording desktops from their own framebuffer into video segments (docs/recording.md)."""
