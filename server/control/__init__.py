"""Who is in control of a desktop: people's takeover, agents' grants and Stop (docs/control.md).

Agent input paths call :func:`server.control.gate.admit_agent_input` (or the
:func:`server.control.gate.agent_input` context manager) before any input event.
"""
