"""The internal channel's signatures: what they cover (the target replica too), the replay
window, replays."""

from __future__ import annotations

import pytest

from server.cluster.signing import REPLAY_WINDOW_S, SIGNATURE, ClusterSigner, LocalNonces
from server.config import ConfigError, Settings
from wire.errors import OpError

pytestmark = pytest.mark.unit

R1, R2 = "http://10.0.0.1:8400", "http://10.0.0.2:8400"


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


async def test_a_signed_request_verifies_once() -> None:
    signer = ClusterSigner("s" * 32)
    headers = signer.sign("POST", "/internal/v1/request", b"{}", target=R2)
    await signer.verify("POST", "/internal/v1/request", headers, b"{}", target=R2)
    with pytest.raises(OpError, match="replayed"):
        await signer.verify("POST", "/internal/v1/request", headers, b"{}", target=R2)


@pytest.mark.parametrize(
    ("method", "path", "body", "target"),
    [
        ("GET", "/internal/v1/request", b"{}", R2),
        ("POST", "/internal/v1/channel", b"{}", R2),
        ("POST", "/internal/v1/request", b'{"op":"x"}', R2),
        ("POST", "/internal/v1/request", b"{}", R1),
    ],
)
async def test_the_signature_covers_method_path_target_and_body(
    method: str, path: str, body: bytes, target: str
) -> None:
    signer = ClusterSigner("s" * 32)
    headers = signer.sign("POST", "/internal/v1/request", b"{}", target=R2)
    with pytest.raises(OpError, match="bad cluster signature"):
        await signer.verify(method, path, headers, body, target=target)


async def test_a_request_meant_for_another_replica_spends_no_nonce() -> None:
    """Refused by the wrong replica before its nonce is written: the right one still takes it."""
    nonces = LocalNonces()
    r1, r2 = ClusterSigner("s" * 32, nonces=nonces), ClusterSigner("s" * 32, nonces=nonces)
    headers = r1.sign("GET", "/p", target=R2)
    with pytest.raises(OpError, match="another replica"):
        await r1.verify("GET", "/p", headers, target=R1)
    await r2.verify("GET", "/p", headers, target=R2)


async def test_the_target_is_compared_as_an_address() -> None:
    signer = ClusterSigner("s" * 32)
    headers = signer.sign("GET", "/p", target="HTTP://10.0.0.2:8400/")
    await signer.verify("GET", "/p", headers, target=R2)


async def test_another_secret_or_no_signature_is_refused() -> None:
    headers = ClusterSigner("a" * 32).sign("POST", "/p", target=R1)
    with pytest.raises(OpError):
        await ClusterSigner("b" * 32).verify("POST", "/p", headers, target=R1)
    with pytest.raises(OpError, match="without"):
        await ClusterSigner("b" * 32).verify("POST", "/p", {}, target=R1)
    with pytest.raises(OpError):
        await ClusterSigner("a" * 32).verify(
            "POST", "/p", {**headers, SIGNATURE: "0" * 64}, target=R1
        )


async def test_outside_the_replay_window_is_refused() -> None:
    clock = Clock()
    signer = ClusterSigner("s" * 32, clock)
    headers = signer.sign("POST", "/p", target=R1)
    clock.now += REPLAY_WINDOW_S + 1
    with pytest.raises(OpError, match="replay window"):
        await signer.verify("POST", "/p", headers, target=R1)


async def test_a_nonce_is_remembered_for_twice_the_window() -> None:
    """A timestamp up to the window ahead is valid until the window has passed after it."""
    clock = Clock()
    nonces = LocalNonces(clock)
    sender, receiver = ClusterSigner("s" * 32, clock), ClusterSigner("s" * 32, clock, nonces)
    clock.now += REPLAY_WINDOW_S - 1  # the sender's clock runs behind the receiver's
    headers = sender.sign("GET", "/p", target=R1)
    clock.now -= REPLAY_WINDOW_S - 1
    await receiver.verify("GET", "/p", headers, target=R1)
    clock.now += 2 * REPLAY_WINDOW_S - 2
    with pytest.raises(OpError, match="replayed"):
        await receiver.verify("GET", "/p", headers, target=R1)


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
