"""Operators' figures: the process's instruments (``instruments``) and ``GET /metrics``
(``endpoint``), answered only to the holder of ``RELAYDESK_METRICS_TOKEN``."""
