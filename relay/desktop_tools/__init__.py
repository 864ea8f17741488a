"""Desktop tools: window management, the clipboard, and (opt-in) shell and file commands,
run in a relay's virtual desktop as its user (docs/desktop-tools.md).

| module | concept |
|---|---|
| ``settings.py`` | ``DesktopToolSettings`` (``RELAYDESK_CUA_SHELL``) |
| ``session.py`` | ``DesktopSession``: a running desktop's display, user and environment |
| ``run.py`` | one command in a desktop: its own process group, output capped, time limited |
| ``windows.py`` | top-level windows through EWMH (python-xlib), and the window operations |
| ``clipboard.py`` | the CLIPBOARD selection through ``xclip`` |
| ``files.py`` / ``file_child.py`` | file commands, run by a small Python child as the user |
| ``service.py`` | ``DesktopTools``: what the op handlers call |
"""
