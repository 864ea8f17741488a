"""The host helper: shares a relay host's real screen with its relay, behind a token."""
