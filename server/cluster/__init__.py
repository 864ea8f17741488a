"""Several server replicas on one PostgreSQL and one Redis.

How they share relays and streams: docs/architecture.md, "One machine, many machines".
"""
