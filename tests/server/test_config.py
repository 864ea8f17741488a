"""Where the server says it is reached (the prefix of the ``viewer_url`` agents are given)."""

from __future__ import annotations

import pytest

from server.config import Settings

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("host", "port", "public_url", "expected"),
    [
        ("127.0.0.1", 8400, "", "http://127.0.0.1:8400"),
        ("127.0.0.1", 9123, "https://desk.example.org/", "https://desk.example.org"),
        ("::1", 8400, "", "http://[::1]:8400"),
        ("0.0.0.0", 8400, "", ""),  # a wildcard names no host to reach
        ("0.0.0.0", 8400, "https://desk.example.org", "https://desk.example.org"),
    ],
)
def test_the_public_base_url_is_the_public_url_else_the_listen_address(
    host: str, port: int, public_url: str, expected: str
) -> None:
    settings = Settings(host=host, port=port, public_url=public_url)
    assert settings.public_base_url() == expected
