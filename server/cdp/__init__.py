"""The CDP endpoint: agent frameworks drive the desktop's own browser (docs/browser.md)."""
