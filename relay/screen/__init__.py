"""Desktop screen I/O, one implementation for every display relaydesk drives.

XTEST and pyautogui input, the keys table, mss capture and the stale-screen guard check,
behind :class:`relay.screen.service.ScreenService`; the relay runs it for its desktops and
the host helper for the host's real screen. See ``docs/screen-tool.md``.
"""
