"""Operators' figures: the process's instruments (``instruments``) and ``GET /metrics``
(``endpoint``), answered to loopback clients or to the holder of ``RELAYDESK_METRICS_TOKEN``."""
