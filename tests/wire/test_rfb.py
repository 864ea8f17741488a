"""The RFB security handshake machines: byte vectors, chunking, refusals, and a fuzzer."""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.examples import examples
from tests.support.processes import scaled
from wire.errors import RelaydeskError, RfbHandshakeError
from wire.rfb import (
    RFB_3_8,
    RFBAUTH_FILE_KEY,
    NoneSecurityServer,
    VncClientHandshake,
    rfbauth_file_bytes,
    vnc_auth_response,
)

pytestmark = [pytest.mark.unit, pytest.mark.timeout(scaled(60))]

FUZZ = settings(
    max_examples=examples(1000), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
SECRET = b"s3cr3t!x"
CHALLENGE = bytes(range(16))


def u32(value: int) -> bytes:
    return struct.pack(">I", value)


def server_script(secret: bytes = SECRET, result: int = 0) -> list[bytes]:
    """What a VNC server sends, step by step, to a client that answers correctly."""
    return [RFB_3_8, b"\x02\x01\x02", CHALLENGE, u32(result)]


def run_client(chunks: list[bytes], secret: bytes = SECRET) -> tuple[VncClientHandshake, bytes]:
    """Feed ``chunks`` until the handshake is done; returns the client and all it sent."""
    client = VncClientHandshake(secret)
    sent = b""
    for chunk in chunks:
        if client.done:
            break
        client.receive_data(chunk)
        sent += client.data_to_send()
    return client, sent


# -- DES ------------------------------------------------------------------------------------


def test_rfbauth_file_matches_vncpasswd() -> None:
    # The vncpasswd file of "password", as x11vnc -storepasswd and TigerVNC's vncpasswd write it.
    assert rfbauth_file_bytes(b"password").hex() == "dbd83cfd727a1458"


def test_auth_response_is_des_of_both_blocks_with_the_reversed_key() -> None:
    # ECB: each 8-byte half is the vncpasswd encryption of that half under the fixed key.
    doubled = vnc_auth_response(RFBAUTH_FILE_KEY, b"password" * 2)
    assert doubled.hex() == "dbd83cfd727a1458" * 2


def test_short_secret_is_zero_padded() -> None:
    assert vnc_auth_response(b"ab", CHALLENGE) == vnc_auth_response(b"ab\0\0\0\0\0\0", CHALLENGE)
    assert vnc_auth_response(b"ab", CHALLENGE) != vnc_auth_response(b"ac", CHALLENGE)


@pytest.mark.parametrize("challenge", [b"", b"x" * 15, b"x" * 17])
def test_challenge_must_be_16_bytes(challenge: bytes) -> None:
    with pytest.raises(ValueError, match="16 bytes"):
        vnc_auth_response(SECRET, challenge)


def test_secret_with_nul_cannot_be_stored() -> None:
    with pytest.raises(ValueError, match="NUL"):
        rfbauth_file_bytes(b"ab\0cd")


# -- client: authenticating to x11vnc ------------------------------------------------------


def test_client_byte_vector() -> None:
    client, sent = run_client(server_script())
    assert client.done
    assert sent == RFB_3_8 + b"\x02" + vnc_auth_response(SECRET, CHALLENGE)
    assert client.leftover == b""


def test_client_one_byte_at_a_time_keeps_leftover() -> None:
    stream = b"".join(server_script())
    client, sent = run_client([bytes([b]) for b in stream])
    assert client.done
    assert sent == RFB_3_8 + b"\x02" + vnc_auth_response(SECRET, CHALLENGE)
    assert client.leftover == b""
    done, _ = run_client([stream[:-1], stream[-1:] + b"\x00\x10rest"])
    assert done.leftover == b"\x00\x10rest"


def test_client_with_its_version_first_sends_it_once_before_the_banner() -> None:
    client = VncClientHandshake(SECRET, version_first=True)
    first = client.data_to_send()
    assert first == RFB_3_8  # before any byte of the server
    sent = b""
    for chunk in server_script():
        client.receive_data(chunk)
        sent += client.data_to_send()
    assert client.done
    assert sent == b"\x02" + vnc_auth_response(SECRET, CHALLENGE)


def test_client_wrong_secret_reports_the_server_reason() -> None:
    client = VncClientHandshake(SECRET)
    with pytest.raises(RfbHandshakeError, match="VNC authentication failed: Bad password"):
        client.receive_data(b"".join(server_script(result=1)) + u32(12) + b"Bad password")
    assert not client.done and client.leftover == b""


def test_client_refuses_a_server_offering_only_none() -> None:
    with pytest.raises(RfbHandshakeError, match="does not offer VNC authentication"):
        run_client([RFB_3_8, b"\x01\x01"])


def test_client_reports_a_refused_connection() -> None:
    with pytest.raises(RfbHandshakeError, match="refused the connection: too many"):
        run_client([RFB_3_8, b"\x00" + u32(8) + b"too many"])


@pytest.mark.parametrize("banner", [b"RFB 003.003\n", b"RFB 003.007\n", b"HTTP/1.1 200\n"])
def test_client_needs_rfb_3_8(banner: bytes) -> None:
    with pytest.raises(RfbHandshakeError):
        run_client([banner])


def test_client_rejects_bad_secrets() -> None:
    for secret in (b"", b"123456789"):
        with pytest.raises(ValueError, match="1 to 8 bytes"):
            VncClientHandshake(secret)


# -- server: security None towards the viewer ----------------------------------------------


def run_server(chunks: list[bytes]) -> tuple[NoneSecurityServer, bytes]:
    server = NoneSecurityServer()
    sent = server.data_to_send()
    for chunk in chunks:
        server.receive_data(chunk)
        sent += server.data_to_send()
    return server, sent


def test_server_3_8_byte_vector() -> None:
    server, sent = run_server([b"RFB 003.008\n", b"\x01\x01"])
    assert server.done
    assert sent == RFB_3_8 + b"\x01\x01" + u32(0)
    assert server.leftover == b"\x01"  # the viewer's ClientInit, pipelined


def test_server_3_7_has_no_security_result() -> None:
    server, sent = run_server([b"RFB 003.007\n\x01"])
    assert server.done
    assert sent == RFB_3_8 + b"\x01\x01"


def test_server_3_3_names_the_type() -> None:
    server, sent = run_server([b"RFB 003.003\n"])
    assert server.done and server.client_version == (3, 3)
    assert sent == RFB_3_8 + u32(1)


def test_server_refuses_other_security_types() -> None:
    with pytest.raises(RfbHandshakeError, match="chose security type 2"):
        run_server([b"RFB 003.008\n\x02"])


@pytest.mark.parametrize("version", [b"RFB 003.005\n", b"RFB 004.000\n", b"GET / HTTP/1.\n"])
def test_server_refuses_unknown_versions(version: bytes) -> None:
    with pytest.raises(RfbHandshakeError):
        run_server([version])


# -- fuzz ------------------------------------------------------------------------------------


@FUZZ
@given(st.binary(max_size=200), st.integers(min_value=1, max_value=17))
def test_fuzz_client_only_raises_handshake_errors(data: bytes, step: int) -> None:
    client = VncClientHandshake(SECRET)
    error: RfbHandshakeError | None = None
    try:
        for start in range(0, len(data), step):
            if client.done:
                break
            client.receive_data(data[start : start + step])
            client.data_to_send()
    except RfbHandshakeError as err:
        error = err
    assert error is None or (isinstance(error, RelaydeskError) and error.reason)


@FUZZ
@given(st.binary(max_size=200), st.integers(min_value=1, max_value=17))
def test_fuzz_server_only_raises_handshake_errors(data: bytes, step: int) -> None:
    server = NoneSecurityServer()
    error: RfbHandshakeError | None = None
    try:
        for start in range(0, len(data), step):
            if server.done:
                break
            server.receive_data(data[start : start + step])
            server.data_to_send()
    except RfbHandshakeError as err:
        error = err
    assert error is None or error.reason


@FUZZ
@given(st.lists(st.integers(min_value=1, max_value=40), max_size=10), st.binary(max_size=50))
def test_fuzz_any_chunking_gives_the_same_bytes(cuts: list[int], tail: bytes) -> None:
    stream = b"".join(server_script()) + tail
    chunks, position = [], 0
    for cut in cuts:
        chunks.append(stream[position : position + cut])
        position += cut
    chunks.append(stream[position:])
    client, sent = run_client([c for c in chunks if c])
    fed = b"".join(chunks[: _chunks_fed(chunks, len(stream) - len(tail))])
    assert client.done
    assert sent == RFB_3_8 + b"\x02" + vnc_auth_response(SECRET, CHALLENGE)
    assert client.leftover == fed[len(stream) - len(tail) :]


def _chunks_fed(chunks: list[bytes], handshake_len: int) -> int:
    """How many chunks it takes to cover the handshake's ``handshake_len`` bytes."""
    total = 0
    for index, chunk in enumerate(chunks):
        total += len(chunk)
        if total >= handshake_len:
            return index + 1
    return len(chunks)
