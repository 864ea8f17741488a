"""Desktop audio on the relay: capture the null sink's monitor, encode Opus, fan out to channels.

One capture per desktop (``parec`` on ``relaydesk.monitor``, 48 kHz stereo s16le, 20 ms
frames) runs while at least one audio channel of that desktop is open: it starts with the first
listener and stops after the last. Every 20 ms frame is encoded once and handed to each
listener's bounded queue. A listener whose credit runs short loses its *oldest* packets (audio
that late is worthless), never stalls the capture or the other listeners, and never touches a
video channel's window: every listener is a channel of its own.

A channel ``DATA`` payload is one packet: :data:`PACKET_HEADER` (capture time in µs since the
epoch, sequence number) followed by one Opus packet.

``parec`` runs as the desktop's user (:class:`CaptureAccount`), never as a root relay: the sound
server's socket lies in a directory that user controls, so only that user ever connects to
it. It starts held (a shell waiting for one line) until it has joined the desktop's cgroup,
like every other process of that user (docs/audio.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import shutil
import signal
import struct
import subprocess
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import opuslib.api
import opuslib.constants as opus_const

from relay.config import DEFAULT_BITRATE
from relay.desktops.audio import (
    CHANNELS,
    MONITOR_SOURCE,
    SAMPLE_RATE,
    display_number,
    pulse_server,
    runtime_dir,
)
from relay.desktops.user import DesktopUser
from wire.errors import ChannelCloseCode, ErrorCode, OpError
from wire.frames import Payload
from wire.ids import ChannelId
from wire.ops import ChannelOpenResult, RelayRow

if TYPE_CHECKING:
    from relay.link import ServerLink

log = logging.getLogger(__name__)

FRAME_MS: Final = 20
FRAME_SAMPLES: Final = SAMPLE_RATE * FRAME_MS // 1000  # per channel
FRAME_BYTES: Final = FRAME_SAMPLES * CHANNELS * 2  # s16le
PACKET_HEADER: Final = struct.Struct(">QI")  # capture time (µs, wall clock), sequence
MAX_PACKET: Final = 1500
# Per listener: 15 packets = 300 ms; older audio is dropped rather than played late.
QUEUE_PACKETS: Final = 15
CAPTURE_STOP_S: Final = 2.0
PAREC_BINARY: Final = "parec"
PAREC_ARGS: Final = (
    "--raw",
    "--format=s16le",
    f"--rate={SAMPLE_RATE}",
    f"--channels={CHANNELS}",
    f"--latency-msec={FRAME_MS}",
    "-d",
    MONITOR_SOURCE,
)
# The capture waits for one line on its standard input, written once it is in the desktop's
# cgroup; a relay gone before leaves the pipe without a writer and parec never runs.
_HOLD: Final = ("/bin/sh", "-c", 'read -r go || exit 0; exec "$@" </dev/null', "relaydesk-held")


@dataclass(frozen=True)
class CaptureAccount:
    """Who a desktop's capture runs as (None: the relay's own user, a relay that is not root),
    and how its process joins the desktop's cgroup (None: it has none)."""

    user: DesktopUser | None = None
    join: Callable[[int], Awaitable[bool]] | None = None


AccountOf = Callable[[RelayRow], Awaitable[CaptureAccount]]
# Takes each captured frame as it is (s16le stereo, 20 ms) with its capture time (µs, wall
# clock): a desktop's recording (relay/recording).
PcmSink = Callable[[bytes, int], None]


async def relay_account(row: RelayRow) -> CaptureAccount:
    """The capture runs as the relay's own user (a relay that is not root; tests)."""
    return CaptureAccount()


class OpusFailed(OpError):
    """libopus refused a call; carries its negative status."""

    def __init__(self, what: str, status: int) -> None:
        self.status = status
        super().__init__(ErrorCode.INTERNAL, f"{what} failed (libopus status {status})")


def _opus_functions() -> dict[str, Any]:
    """libopus entry points with explicit pointer-sized signatures.

    ``CDLL[name]`` hands out a fresh function object each time, so these declarations never
    touch the ones opuslib keeps for itself. Without them ctypes would pass and return the
    encoder pointer as a C ``int`` and cut an encoder allocated above 4 GiB in half.
    """
    lib = opuslib.api.libopus
    spec: dict[str, tuple[list[Any], Any]] = {
        "opus_encoder_get_size": ([ctypes.c_int], ctypes.c_int),
        "opus_encoder_create": (
            [ctypes.c_int32, ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_int)],
            ctypes.c_void_p,
        ),
        "opus_encoder_init": (
            [ctypes.c_void_p, ctypes.c_int32, ctypes.c_int, ctypes.c_int],
            ctypes.c_int,
        ),
        "opus_encode": (
            [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_int32],
            ctypes.c_int32,
        ),
        # Variadic in C; every request relaydesk sends takes exactly one opus_int32.
        "opus_encoder_ctl": ([ctypes.c_void_p, ctypes.c_int, ctypes.c_int32], ctypes.c_int),
        "opus_encoder_destroy": ([ctypes.c_void_p], None),
    }
    functions: dict[str, Any] = {}
    for name, (argtypes, restype) in spec.items():
        function = lib[name]
        function.argtypes = argtypes
        function.restype = restype
        functions[name] = function
    return functions


_OPUS: Final = _opus_functions()


class OpusEncoder:
    """One libopus encoder (48 kHz stereo by default); :meth:`close` releases it."""

    def __init__(self, state: int, *, owned: bool, channels: int) -> None:
        self._state: int | None = state
        self._owned = owned
        self.channels = channels
        self._out = ctypes.create_string_buffer(MAX_PACKET)

    @classmethod
    def create(
        cls,
        sample_rate: int = SAMPLE_RATE,
        channels: int = CHANNELS,
        application: int = opus_const.APPLICATION_RESTRICTED_LOWDELAY,
    ) -> OpusEncoder:
        """Allocate with ``opus_encoder_create`` (libopus owns the memory)."""
        status = ctypes.c_int(0)
        state = _OPUS["opus_encoder_create"](
            sample_rate, channels, application, ctypes.byref(status)
        )
        if status.value != opus_const.OK or not state:
            raise OpusFailed("opus_encoder_create", status.value)
        return cls(int(state), owned=True, channels=channels)

    @staticmethod
    def size(channels: int = CHANNELS) -> int:
        """Bytes an encoder state needs (for :meth:`init_at`)."""
        return int(_OPUS["opus_encoder_get_size"](channels))

    @classmethod
    def init_at(
        cls,
        address: int,
        sample_rate: int = SAMPLE_RATE,
        channels: int = CHANNELS,
        application: int = opus_const.APPLICATION_RESTRICTED_LOWDELAY,
    ) -> OpusEncoder:
        """Initialise an encoder in caller-owned memory at ``address`` (:meth:`size` bytes)."""
        status = int(_OPUS["opus_encoder_init"](address, sample_rate, channels, application))
        if status != opus_const.OK:
            raise OpusFailed("opus_encoder_init", status)
        return cls(address, owned=False, channels=channels)

    @property
    def address(self) -> int:
        if self._state is None:
            raise ValueError("encoder is closed")
        return self._state

    def ctl(self, request: int, value: int) -> None:
        status = int(_OPUS["opus_encoder_ctl"](self.address, request, value))
        if status != opus_const.OK:
            raise OpusFailed(f"opus_encoder_ctl({request})", status)

    def set_bitrate(self, bits_per_second: int) -> None:
        self.ctl(opus_const.SET_BITRATE_REQUEST, bits_per_second)

    def encode(self, pcm: bytes, frame_samples: int = FRAME_SAMPLES) -> bytes:
        """One Opus packet from ``frame_samples`` interleaved s16 samples per channel."""
        if len(pcm) != frame_samples * self.channels * 2:
            raise ValueError(f"expected {frame_samples} samples per channel")
        size = int(_OPUS["opus_encode"](self.address, pcm, frame_samples, self._out, MAX_PACKET))
        if size < 0:
            raise OpusFailed("opus_encode", size)
        return self._out.raw[:size]

    def close(self) -> None:
        """Destroy the encoder (memory from :meth:`init_at` stays the caller's)."""
        state, self._state = self._state, None
        if state is not None and self._owned:
            _OPUS["opus_encoder_destroy"](state)

    def __enter__(self) -> OpusEncoder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def frame_packet(captured_us: int, sequence: int, opus: bytes) -> bytes:
    """The channel payload of one encoded frame."""
    return PACKET_HEADER.pack(captured_us, sequence & 0xFFFFFFFF) + opus


def parse_packet(payload: bytes) -> tuple[int, int, bytes]:
    """``(captured_us, sequence, opus)`` of a channel payload (raises ``ValueError``)."""
    if len(payload) < PACKET_HEADER.size:
        raise ValueError("audio packet shorter than its header")
    captured_us, sequence = PACKET_HEADER.unpack_from(payload)
    return captured_us, sequence, payload[PACKET_HEADER.size :]


class AudioChannel:
    """One listener: a relay channel fed from a bounded, drop-oldest packet queue."""

    def __init__(
        self,
        channel_id: ChannelId,
        link: ServerLink,
        on_close: Callable[[AudioChannel], None],
        max_packets: int = QUEUE_PACKETS,
    ) -> None:
        self.channel_id = channel_id
        self._link = link
        self._on_close = on_close
        self._queue: deque[bytes] = deque(maxlen=max_packets)
        self._wake = asyncio.Event()
        self._closed = False
        self._task: asyncio.Task[None] | None = None
        self.sent = 0
        self.dropped = 0

    @property
    def queued(self) -> int:
        return len(self._queue)

    def start(self) -> None:
        self._task = asyncio.create_task(self._pump(), name=f"audio-{self.channel_id}")

    def push(self, packet: bytes) -> None:
        """Queue a packet; a full queue forgets its oldest one."""
        if self._closed:
            return
        if len(self._queue) == self._queue.maxlen:
            self.dropped += 1
        self._queue.append(packet)
        self._wake.set()

    def feed(self, payload: Payload) -> None:
        """Audio flows one way: whatever the server sends is acknowledged and dropped."""
        self._link.connection.consumed(self.channel_id, len(payload))

    def credit_arrived(self) -> None:
        self._wake.set()

    async def _pump(self) -> None:
        try:
            while not self._closed:
                head = self._queue[0] if self._queue else None
                # One packet per DATA frame: a packet waits for credit for all of it.
                if head is None or self._link.connection.send_window(self.channel_id) < len(head):
                    self._wake.clear()
                    await self._wake.wait()
                    continue
                packet = self._queue.popleft()
                self._link.connection.send_data(self.channel_id, packet)
                self.sent += 1
                await self._link.flush()
        except (ConnectionError, OSError) as err:
            log.info("audio channel %d: link gone (%s)", self.channel_id, err)
            await self.close(ChannelCloseCode.RELAY_GONE, "connection lost", tell_peer=False)

    async def close(self, code: ChannelCloseCode, reason: str, *, tell_peer: bool = True) -> None:
        """Stop sending; tell the server unless it closed first (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self._queue.clear()
        self._wake.set()
        self._link.forget_channel(self.channel_id)
        self._on_close(self)
        if tell_peer and self._link.connection.close_channel(self.channel_id, code, reason):
            with contextlib.suppress(Exception):
                await self._link.flush()
        task = self._task
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


@dataclass
class CaptureStats:
    frames: int = 0
    encoded_bytes: int = 0


class DesktopAudio:
    """The capture of one desktop and the listeners it fans out to."""

    def __init__(
        self,
        desktop_session_id: str,
        display: int,
        bitrate: int,
        account: CaptureAccount | None = None,
    ) -> None:
        self.desktop_session_id = desktop_session_id
        self.display = display
        self.bitrate = bitrate
        self.account = account or CaptureAccount()
        self.listeners: set[AudioChannel] = set()
        self.sinks: set[PcmSink] = set()
        self.stats = CaptureStats()
        self._task: asyncio.Task[None] | None = None
        self._process: tuple[subprocess.Popen[bytes], int] | None = None
        self._pipe: asyncio.BaseTransport | None = None
        self._ending = False

    @property
    def capturing(self) -> bool:
        return self._task is not None and not self._task.done()

    def add(self, listener: AudioChannel) -> None:
        self.listeners.add(listener)
        if not self.capturing:
            self._task = asyncio.create_task(
                self._capture(), name=f"audio-capture-{self.desktop_session_id[:8]}"
            )

    def remove(self, listener: AudioChannel) -> None:
        self.listeners.discard(listener)

    def add_sink(self, sink: PcmSink) -> None:
        """Hand every captured frame to ``sink`` too (the capture runs while it is there)."""
        self.sinks.add(sink)
        if not self.capturing:
            self._task = asyncio.create_task(
                self._capture(), name=f"audio-capture-{self.desktop_session_id[:8]}"
            )

    @property
    def used(self) -> bool:
        return bool(self.listeners or self.sinks)

    async def stop(self) -> None:
        """End the capture (the capture task kills ``parec``); bounded wait."""
        task, self._task = self._task, None
        if task is not None and not task.done():
            if not self._ending:  # an ending capture is still telling its listeners why
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                await asyncio.wait_for(task, CAPTURE_STOP_S)

    async def _capture(self) -> None:
        reason = "the desktop's sound server stopped"
        try:
            with OpusEncoder.create() as encoder:
                encoder.set_bitrate(self.bitrate)
                await self._run(encoder)
        except OSError as err:
            log.warning("audio capture of :%d could not start: %s", self.display, err)
            reason = "audio capture could not start"
        except OpError as err:
            log.error("audio capture of :%d: %s", self.display, err.message)
            reason = "audio encoder failed"
        finally:
            await self._kill_parec()
        # Only an unexpected end gets here (a stop cancels the task): tell every listener.
        self._ending = True
        for listener in list(self.listeners):
            await listener.close(ChannelCloseCode.TARGET_CLOSED, reason)

    async def _run(self, encoder: OpusEncoder) -> None:
        stdout = await self._start_parec()
        log.info("audio capture of :%d started", self.display)
        sequence = 0
        while True:
            try:
                pcm = await stdout.readexactly(FRAME_BYTES)
            except asyncio.IncompleteReadError:
                log.info("audio capture of :%d ended (parec exited)", self.display)
                return
            captured_us = time.time_ns() // 1000
            self.stats.frames += 1
            for sink in list(self.sinks):
                sink(pcm, captured_us)
            if not self.listeners:
                continue  # only a recording takes this desktop's sound: no Opus needed
            packet = frame_packet(captured_us, sequence, encoder.encode(pcm))
            sequence += 1
            self.stats.encoded_bytes += len(packet)
            for listener in self.listeners:
                listener.push(packet)

    async def _start_parec(self) -> asyncio.StreamReader:
        """``parec`` as the desktop's user, released once it is in the desktop's cgroup; its
        output as a stream."""
        parec = shutil.which(PAREC_BINARY)
        if parec is None:
            raise FileNotFoundError(f"{PAREC_BINARY} is not installed")
        argv = [*_HOLD, parec, *PAREC_ARGS]
        process, hold_write = _spawn_held(argv, self._env(), self.account.user)
        self._process = (process, hold_write)
        try:
            join = self.account.join
            if join is not None and not await join(process.pid):
                raise OSError("the desktop stopped")
            os.write(hold_write, b"go\n")
        finally:
            os.close(hold_write)
        reader, self._pipe = await _stream_of(process)
        return reader

    def _env(self) -> dict[str, str]:
        # The client's own files (cookie, configuration) stay in the desktop's runtime dir,
        # like the sound server's: nothing of the relay's account is read or written.
        directory = str(runtime_dir(self.display))
        return {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "PULSE_SERVER": pulse_server(self.display),
            "HOME": directory,
            "XDG_RUNTIME_DIR": directory,
            "XDG_CONFIG_HOME": f"{directory}/config",
            "PULSE_RUNTIME_PATH": directory,
            "PULSE_STATE_PATH": f"{directory}/state",
        }

    async def _kill_parec(self) -> None:
        started, self._process = self._process, None
        if started is None:
            return
        process = started[0]
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            await asyncio.to_thread(process.wait, CAPTURE_STOP_S)
        # The transport owns the output pipe and closes it (never the file itself: the
        # loop would later close a descriptor number another file may have by then).
        pipe, self._pipe = self._pipe, None
        if pipe is not None:
            pipe.close()
        elif process.stdout is not None:  # never handed to the loop
            process.stdout.close()


def _spawn_held(
    argv: list[str], env: dict[str, str], user: DesktopUser | None
) -> tuple[subprocess.Popen[bytes], int]:
    """Start the held ``argv`` as ``user`` (blocking; the relay's event loop may not drop
    privileges for a child): the process and the write end of its hold pipe."""
    hold_read, hold_write = os.pipe()
    try:
        process = subprocess.Popen(
            argv,
            stdin=hold_read,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
            cwd="/",
            close_fds=True,
            **(user.popen_kwargs() if user is not None else {}),
        )
    except BaseException:
        os.close(hold_write)
        raise
    finally:
        os.close(hold_read)
    return process, hold_write


async def _stream_of(
    process: subprocess.Popen[bytes],
) -> tuple[asyncio.StreamReader, asyncio.BaseTransport]:
    """``process``'s standard output as an asyncio stream, and the transport that owns it."""
    assert process.stdout is not None
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=FRAME_BYTES * 4)
    transport, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), process.stdout
    )
    return reader, transport


class AudioStreams:
    """The relay's audio channels by desktop session (``channel.open {type: audio}``)."""

    def __init__(
        self, bitrate: int = DEFAULT_BITRATE, account_of: AccountOf = relay_account
    ) -> None:
        self.bitrate = bitrate
        # Who each desktop's capture runs as (the relay's desktop account when it is root).
        self.account_of = account_of
        self.desktops: dict[str, DesktopAudio] = {}
        self._stopping: set[asyncio.Task[None]] = set()

    async def open_channel(
        self, link: ServerLink, channel_id: ChannelId, row: RelayRow
    ) -> ChannelOpenResult:
        """Attach a listener to the desktop of ``row``; refuse a desktop without sound."""
        if not row.get("audio"):
            why = row.get("audio_reason") or "not requested"
            raise OpError(
                ErrorCode.UNAVAILABLE, f"this desktop has no audio ({why})", {"audio": False}
            )
        desktop = await self._desktop(row)
        session_id = desktop.desktop_session_id
        listener = AudioChannel(channel_id, link, self._listener_closed(desktop))
        link.start_channel(listener)
        desktop.add(listener)
        log.info(
            "audio listener %d on desktop %s… (%d)",
            channel_id,
            session_id[:8],
            len(desktop.listeners),
        )
        return {
            "channel_id": channel_id,
            "sample_rate": SAMPLE_RATE,
            "channels": CHANNELS,
            "frame_ms": FRAME_MS,
            "bitrate": self.bitrate,
        }

    async def _desktop(self, row: RelayRow) -> DesktopAudio:
        session_id = row["desktop_session_id"]
        desktop = self.desktops.get(session_id)
        if desktop is None:
            display = display_number(str(row.get("display") or ""))
            account = await self.account_of(row)
            desktop = self.desktops.get(session_id)  # another caller may have made it meanwhile
            if desktop is None:
                desktop = DesktopAudio(session_id, display, self.bitrate, account)
                self.desktops[session_id] = desktop
        return desktop

    async def record(self, row: RelayRow, sink: PcmSink) -> Callable[[], None]:
        """Hand the sound of ``row``'s desktop to ``sink`` (a recording); the answer ends it.
        A desktop without sound is refused like a listener."""
        if not row.get("audio"):
            raise OpError(ErrorCode.UNAVAILABLE, "this desktop has no audio", {"audio": False})
        desktop = await self._desktop(row)
        desktop.add_sink(sink)

        def end() -> None:
            desktop.sinks.discard(sink)
            self._release(desktop)

        return end

    def _listener_closed(self, desktop: DesktopAudio) -> Callable[[AudioChannel], None]:
        def closed(listener: AudioChannel) -> None:
            desktop.remove(listener)
            self._release(desktop)

        return closed

    def _release(self, desktop: DesktopAudio) -> None:
        """Nobody listens and nothing records: stop capturing (no CPU spent on unheard audio)."""
        if desktop.used:
            return
        if self.desktops.get(desktop.desktop_session_id) is desktop:
            del self.desktops[desktop.desktop_session_id]
        task = asyncio.create_task(desktop.stop())
        self._stopping.add(task)
        task.add_done_callback(self._stopping.discard)

    def capturing(self, desktop_session_id: str) -> bool:
        desktop = self.desktops.get(desktop_session_id)
        return desktop is not None and desktop.capturing

    async def aclose(self) -> None:
        """Stop every capture (relay shutdown)."""
        for desktop in list(self.desktops.values()):
            await desktop.stop()
        self.desktops.clear()
        if self._stopping:
            await asyncio.gather(*self._stopping, return_exceptions=True)
