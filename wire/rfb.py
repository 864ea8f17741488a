"""The RFB (VNC) security handshake, sans-I/O: VNC authentication and security type None.

The relay authenticates to a desktop's x11vnc with that desktop's VNC secret
(:class:`VncClientHandshake`), then presents security type None to the viewer on the other side
of the channel (:class:`NoneSecurityServer`), then copies bytes. Both machines take received
bytes (``receive_data``), say what to send (``data_to_send``), and once ``done`` hand back the
bytes that arrived after the handshake (``leftover``), which belong to the RFB session itself.
Nothing here touches a socket. Every refusal raises :class:`wire.errors.RfbHandshakeError`.

VNC authentication is DES-ECB of a 16-byte challenge with the secret (at most 8 bytes, zero
padded) as the key, each key byte bit-reversed (the VNC reference code's DES reads key bits in
the opposite order). ``-rfbauth`` files store the secret DES-encrypted the same way with a
fixed, public key: obfuscation against a casual look, not protection; the file's mode is.
"""

from __future__ import annotations

import re
import struct
from enum import Enum, auto
from typing import Final

from cryptography.hazmat.decrepit.ciphers.algorithms import TripleDES
from cryptography.hazmat.primitives.ciphers import Cipher, modes

from wire.errors import RfbHandshakeError

VERSION_LEN: Final = 12
RFB_3_8: Final = b"RFB 003.008\n"
SECURITY_NONE: Final = 1
SECURITY_VNC_AUTH: Final = 2
CHALLENGE_LEN: Final = 16
SECRET_LEN: Final = 8
# libvncserver's vncpasswd key (d3des.c), as the VNC code writes it.
RFBAUTH_FILE_KEY: Final = bytes([23, 82, 107, 6, 35, 78, 88, 7])
# A refusal's reason string longer than this is not waited for.
MAX_REASON: Final = 4096
_VERSION_RE: Final = re.compile(rb"RFB ([0-9]{3})\.([0-9]{3})\n")
_U32: Final = struct.Struct(">I")
# What each viewer version gets once it chose None (3.3: the server names the type itself).
_VIEWER_VERSIONS: Final = {(3, 3), (3, 7), (3, 8)}


def _reverse_bits(byte: int) -> int:
    return int(f"{byte:08b}"[::-1], 2)


def _vnc_des(key: bytes, data: bytes) -> bytes:
    """DES-ECB of ``data`` under a VNC-style key (≤ 8 bytes, zero padded, bits reversed)."""
    if len(key) > SECRET_LEN:
        raise ValueError(f"a VNC secret has at most {SECRET_LEN} bytes")
    des_key = bytes(_reverse_bits(b) for b in key.ljust(SECRET_LEN, b"\0"))
    # Triple DES with K1 = K2 = K3 is single DES.
    encryptor = Cipher(TripleDES(des_key * 3), modes.ECB()).encryptor()  # noqa: S305 - RFB's scheme
    return encryptor.update(data) + encryptor.finalize()


def vnc_auth_response(secret: bytes, challenge: bytes) -> bytes:
    """The answer to a VNC authentication challenge (16 bytes) for ``secret`` (≤ 8 bytes)."""
    if len(challenge) != CHALLENGE_LEN:
        raise ValueError(f"a VNC challenge has {CHALLENGE_LEN} bytes, not {len(challenge)}")
    return _vnc_des(secret, challenge)


def rfbauth_file_bytes(secret: bytes) -> bytes:
    """Contents of an x11vnc ``-rfbauth`` file holding ``secret`` (≤ 8 bytes, no NUL byte:
    the VNC code reads the stored secret as a C string)."""
    if b"\0" in secret:
        raise ValueError("a VNC secret cannot contain a NUL byte")
    return _vnc_des(RFBAUTH_FILE_KEY, secret.ljust(SECRET_LEN, b"\0"))


def parse_version(data: bytes) -> tuple[int, int]:
    """``RFB 003.008\\n`` → (3, 8); anything else is a handshake error."""
    match = _VERSION_RE.fullmatch(data)
    if match is None:
        raise RfbHandshakeError(f"not an RFB version message: {data[:VERSION_LEN]!r}")
    return int(match[1]), int(match[2])


class _Buffered:
    """Bytes in, bytes out; the subclasses consume the input in steps of known size."""

    def __init__(self) -> None:
        self._in = bytearray()
        self._out = bytearray()
        self.done = False

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Feed bytes the peer sent; raises :class:`RfbHandshakeError` on a refusal."""
        if self.done:
            raise RfbHandshakeError("the RFB handshake is already complete")
        self._in += data
        while not self.done and self._step():
            pass

    def data_to_send(self) -> bytes:
        """Bytes to send to the peer now (empty when there are none)."""
        out, self._out = bytes(self._out), bytearray()
        return out

    @property
    def leftover(self) -> bytes:
        """Bytes received after the handshake: the start of the RFB session."""
        return bytes(self._in) if self.done else b""

    def _step(self) -> bool:
        raise NotImplementedError

    def _take(self, size: int) -> bytes | None:
        if len(self._in) < size:
            return None
        taken = bytes(self._in[:size])
        del self._in[:size]
        return taken

    def _reason(self) -> str | None:
        """A u32-length reason string, once it has fully arrived."""
        if len(self._in) < _U32.size:
            return None
        (length,) = _U32.unpack_from(self._in)
        if length > MAX_REASON:
            return "(reason too long)"
        raw = self._take(_U32.size + length)
        return None if raw is None else raw[_U32.size :].decode("utf-8", "replace")


class _Client(Enum):
    VERSION = auto()
    SECURITY_TYPES = auto()
    REFUSED = auto()
    CHALLENGE = auto()
    RESULT = auto()
    FAILED = auto()


class VncClientHandshake(_Buffered):
    """Authenticates to a VNC server (RFB 3.8, security type 2) with a shared secret."""

    def __init__(self, secret: bytes, *, version_first: bool = False) -> None:
        """``version_first``: the client's version is ready to send before the server's banner
        arrives: libvncserver (x11vnc) waits up to 100 ms for a new client's first bytes (a
        WebSocket client speaks first) before it sends its banner, and a version ends that
        wait (docs/desktops.md, "x11vnc flags")."""
        super().__init__()
        if not 0 < len(secret) <= SECRET_LEN:
            raise ValueError(f"a VNC secret has 1 to {SECRET_LEN} bytes")
        self._secret = secret
        self._state = _Client.VERSION
        self._version_sent = version_first
        if version_first:
            self._out += RFB_3_8

    def _step(self) -> bool:
        handlers = {
            _Client.VERSION: self._on_version,
            _Client.SECURITY_TYPES: self._on_security_types,
            _Client.REFUSED: self._on_refused,
            _Client.CHALLENGE: self._on_challenge,
            _Client.RESULT: self._on_result,
            _Client.FAILED: self._on_failed,
        }
        return handlers[self._state]()

    def _on_version(self) -> bool:
        if (raw := self._take(VERSION_LEN)) is None:
            return False
        if parse_version(raw) < (3, 8):
            raise RfbHandshakeError(f"the VNC server speaks {raw.strip()!r}; 3.8 is required")
        if not self._version_sent:
            self._out += RFB_3_8
        self._state = _Client.SECURITY_TYPES
        return True

    def _on_security_types(self) -> bool:
        if not self._in or (raw := self._take(1 + self._in[0])) is None:
            return False
        count, offered = raw[0], raw[1:]
        if count == 0:
            self._state = _Client.REFUSED
        elif SECURITY_VNC_AUTH not in offered:
            raise RfbHandshakeError(f"the VNC server does not offer VNC authentication {offered!r}")
        else:
            self._out.append(SECURITY_VNC_AUTH)
            self._state = _Client.CHALLENGE
        return True

    def _on_refused(self) -> bool:
        if (reason := self._reason()) is None:
            return False
        raise RfbHandshakeError(f"the VNC server refused the connection: {reason}")

    def _on_challenge(self) -> bool:
        if (challenge := self._take(CHALLENGE_LEN)) is None:
            return False
        self._out += vnc_auth_response(self._secret, challenge)
        self._state = _Client.RESULT
        return True

    def _on_result(self) -> bool:
        if (raw := self._take(_U32.size)) is None:
            return False
        if _U32.unpack(raw)[0] != 0:
            self._state = _Client.FAILED
        else:
            self.done = True
        return True

    def _on_failed(self) -> bool:
        if (reason := self._reason()) is None:
            return False
        raise RfbHandshakeError(f"VNC authentication failed: {reason}")


class NoneSecurityServer(_Buffered):
    """Speaks the server side of the handshake to a viewer, offering security type None.

    Viewers of RFB 3.3, 3.7 and 3.8 are accepted. 3.3: the server names the type (u32 1) and
    the session follows. 3.7: the viewer chooses None and the session follows. 3.8: the
    viewer chooses None and gets SecurityResult OK.
    """

    def __init__(self) -> None:
        super().__init__()
        self._out += RFB_3_8
        self.client_version: tuple[int, int] | None = None

    def _step(self) -> bool:
        if self.client_version is None:
            return self._on_version()
        return self._on_choice()

    def _on_version(self) -> bool:
        if (raw := self._take(VERSION_LEN)) is None:
            return False
        version = parse_version(raw)
        if version not in _VIEWER_VERSIONS:
            raise RfbHandshakeError(f"unsupported RFB version {raw.strip()!r} from the viewer")
        self.client_version = version
        if version == (3, 3):
            self._out += _U32.pack(SECURITY_NONE)
            self.done = True
        else:
            self._out += bytes([1, SECURITY_NONE])
        return True

    def _on_choice(self) -> bool:
        if (raw := self._take(1)) is None:
            return False
        if raw[0] != SECURITY_NONE:
            raise RfbHandshakeError(f"the viewer chose security type {raw[0]}, not None")
        if self.client_version == (3, 8):
            self._out += _U32.pack(0)
        self.done = True
        return True
