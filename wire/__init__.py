"""relaydesk's wire protocol v1: messages, channel frames and the sans-I/O connection."""
