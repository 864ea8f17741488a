"""The internal channel's signatures: what they cover, the replay window, replays."""

from __future__ import annotations

import pytest

from server.cluster.signing import REPLAY_WINDOW_S, SIGNATURE, ClusterSigner
from server.config import ConfigError, Settings
from wire.errors import OpError

pytestmark = pytest.mark.unit


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def test_a_signed_request_verifies_once() -> None:
    signer = ClusterSigner("s" * 32)
    headers = signer.sign("POST", "/internal/v1/request", b"{}")
    signer.verify("POST", "/internal/v1/request", headers, b"{}")
    with pytest.raises(OpError, match="replayed"):
        signer.verify("POST", "/internal/v1/request", headers, b"{}")


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [("GET", "/internal/v1/request", b"{}"), ("POST", "/internal/v1/channel", b"{}"),
     ("POST", "/internal/v1/request", b'{"op":"x"}')],
)  # fmt: skip
def test_the_signature_covers_method_path_and_body(method: str, path: str, body: bytes) -> None:
    signer = ClusterSigner("s" * 32)
    headers = signer.sign("POST", "/internal/v1/request", b"{}")
    with pytest.raises(OpError, match="bad cluster signature"):
        signer.verify(method, path, headers, body)


def test_another_secret_or_no_signature_is_refused() -> None:
    headers = ClusterSigner("a" * 32).sign("POST", "/p")
    with pytest.raises(OpError):
        ClusterSigner("b" * 32).verify("POST", "/p", headers)
    with pytest.raises(OpError, match="without"):
        ClusterSigner("b" * 32).verify("POST", "/p", {})
    with pytest.raises(OpError):
        ClusterSigner("a" * 32).verify("POST", "/p", {**headers, SIGNATURE: "0" * 64})


def test_outside_the_replay_window_is_refused() -> None:
    clock = Clock()
    signer = ClusterSigner("s" * 32, clock)
    headers = signer.sign("POST", "/p")
    clock.now += REPLAY_WINDOW_S + 1
    with pytest.raises(OpError, match="replay window"):
        signer.verify("POST", "/p", headers)


def test_redis_without_a_cluster_secret_refuses_to_start() -> None:
    with pytest.raises(ConfigError, match="RELAYDESK_CLUSTER_SECRET"):
        Settings(redis_url="redis://127.0.0.1:1/0").check()
    Settings().check()
    Settings(redis_url="redis://127.0.0.1:1/0", cluster_secret="x" * 16).check()


def test_the_internal_address_is_derived_from_the_bind_address() -> None:
    assert Settings(host="0.0.0.0", port=8400).advertised_url() not in {
        "http://0.0.0.0:8400",
        "http://:8400",
    }
    assert Settings(host="10.0.0.5", port=81).advertised_url() == "http://10.0.0.5:81"
    assert Settings(internal_url="http://a:1/").advertised_url() == "http://a:1"
