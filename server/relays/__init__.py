"""Relay connections: the ``/relay/v1/connect`` endpoint, links and the router."""
