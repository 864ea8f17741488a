"""The desktop's browser over the DevTools protocol (CDP), on a pipe only the relay holds
(docs/browser.md)."""
