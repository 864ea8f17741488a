"""relaydesk's command line: the composition root that wires server, relay and host helper."""
