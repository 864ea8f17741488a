"""Desktop audio end to end: a tone in a real desktop, heard through the server's audio socket.

One run, one stack (in-process server, real relay process, real desktop with PulseAudio):

- capture → listener latency p50/p99 from the capture timestamps carried in every packet (relay
  and listener share this host's clock; the listener sits one loopback hop behind the server);
- relay CPU for one stream (the relay process and its ``parec``), against the same relay idle;
- bytes per second on the audio socket at the chosen bitrate, against the baseline of raw PCM
  (48 kHz x 2 channels x 16 bit = 192 000 B/s).

The helpers (tone player, listener, decoder, FFT peak) are shared with the audio tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import opuslib
import psutil

from benchmarks.common import parser, percentile
from relay.audio import FRAME_SAMPLES, parse_packet
from relay.desktops.audio import CHANNELS, SAMPLE_RATE, display_number, pulse_server

RAW_PCM_BYTES_PER_S = SAMPLE_RATE * CHANNELS * 2


def play_tone(
    display: str,
    seconds: float,
    hz: float = 440.0,
    volume: float = 0.5,
    *,
    sound_root: Path | None = None,
    via: Sequence[str] = (),
) -> list[subprocess.Popen[bytes]]:
    """``sox`` synthesises a sine on this host, ``pacat`` plays it into the desktop's default
    (null) sink: here, or through ``via`` (``docker exec -i CONTAINER``) where the desktop
    runs, its relay keeping the sound servers under ``sound_root`` there."""
    server = pulse_server(display_number(display), sound_root)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PULSE_SERVER": server}
    sox = subprocess.Popen(
        [
            "sox",
            "-q",
            "-n",
            "-t",
            "raw",
            "-r",
            str(SAMPLE_RATE),
            "-c",
            str(CHANNELS),
            "-b",
            "16",
            "-e",
            "signed-integer",
            "-",
            "synth",
            f"{seconds}",
            "sine",
            f"{hz}",
            "vol",
            f"{volume}",
        ],
        stdout=subprocess.PIPE,
        env=env,
    )
    assert sox.stdout is not None
    pacat = [
        "pacat",
        "--raw",
        "--format=s16le",
        f"--rate={SAMPLE_RATE}",
        f"--channels={CHANNELS}",
        "--latency-msec=20",
    ]
    if via:
        pacat = [*via, "env", f"PULSE_SERVER={server}", *pacat]
    player = subprocess.Popen(pacat, stdin=sox.stdout, env=env)
    sox.stdout.close()
    return [sox, player]


@contextlib.contextmanager
def tone(
    display: str,
    seconds: float,
    hz: float = 440.0,
    *,
    sound_root: Path | None = None,
    via: Sequence[str] = (),
) -> Iterator[None]:
    """Play a tone for the duration of the block (or ``seconds``), then stop: the synthesiser,
    whose end ends the player (also one through ``via``, which a kill here would not reach)."""
    synthesiser, player = play_tone(display, seconds, hz, sound_root=sound_root, via=via)
    try:
        yield
    finally:
        if synthesiser.poll() is None:
            synthesiser.kill()
        synthesiser.wait(10)
        try:
            player.wait(5)
        except subprocess.TimeoutExpired:
            player.kill()
            player.wait(10)


class Decoder:
    """Opus packets of the audio socket → interleaved int16 PCM."""

    def __init__(self) -> None:
        self._decoder = opuslib.Decoder(SAMPLE_RATE, CHANNELS)

    def decode(self, opus: bytes) -> np.ndarray:
        pcm = self._decoder.decode(opus, FRAME_SAMPLES)
        return np.frombuffer(pcm, dtype="<i2")


def peak_hz(pcm: np.ndarray) -> float:
    """Frequency of the strongest FFT bin of the left channel (interleaved stereo input)."""
    left = pcm[::CHANNELS].astype(np.float64)
    spectrum = np.abs(np.fft.rfft(left * np.hanning(len(left))))
    spectrum[0] = 0.0
    return float(np.fft.rfftfreq(len(left), 1 / SAMPLE_RATE)[int(np.argmax(spectrum))])


@dataclass
class Heard:
    """What a listener received."""

    packets: int = 0
    bytes: int = 0
    latencies_ms: list[float] = field(default_factory=list)
    sequences: list[int] = field(default_factory=list)


@contextlib.asynccontextmanager
async def listener(url: str) -> AsyncIterator[aiohttp.ClientWebSocketResponse]:
    async with (
        aiohttp.ClientSession() as session,
        session.ws_connect(url, protocols=("binary",), max_msg_size=1 << 16) as ws,
    ):
        yield ws


def note(heard: Heard, payload: bytes) -> bytes:
    """Record one message (size, latency, sequence); return its Opus packet."""
    captured_us, sequence, opus = parse_packet(payload)
    heard.packets += 1
    heard.bytes += len(payload)
    heard.latencies_ms.append((time.time_ns() // 1000 - captured_us) / 1000)
    heard.sequences.append(sequence)
    return opus


async def receive_for(ws: aiohttp.ClientWebSocketResponse, seconds: float) -> Heard:
    heard = Heard()
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        try:
            message = await asyncio.wait_for(ws.receive(), left)
        except TimeoutError:
            break
        if message.type != aiohttp.WSMsgType.BINARY:
            raise RuntimeError(f"audio socket ended: {ws.close_code} {message.extra}")
        note(heard, message.data)
    return heard


def cpu_seconds(process: psutil.Process) -> float:
    """CPU of ``process`` and its live children (``parec``)."""
    total = sum(process.cpu_times()[:2])
    for child in process.children(recursive=True):
        with contextlib.suppress(psutil.NoSuchProcess):
            if child.name() == "parec":
                total += sum(child.cpu_times()[:2])
    return total


async def rfb_rate(stack: Any, desktop: Any, seconds: float) -> float:
    """Full-screen video throughput (MB/s) of one viewer stream through the server."""
    from benchmarks.bench_viewer import throughput
    from benchmarks.rfb import RFBClient, WebSocketTransport

    client = RFBClient(await WebSocketTransport.connect(stack.socket_url(desktop)))
    await asyncio.wait_for(client.handshake(), 10)
    try:
        rate, _ = await throughput(client, seconds)
    finally:
        await client.close()
    return float(rate)


async def video_with_and_without_audio(
    stack: Any, desktop: Any, rounds: int, seconds: float = 0.5
) -> dict[bool, list[float]]:
    """Video throughput with and without an audio listener, in interleaved A/B/B/A rounds so
    that drift on a shared machine hits both sides alike."""
    url = stack.socket_url(desktop).removesuffix("websockify") + "audio"
    rates: dict[bool, list[float]] = {False: [], True: []}
    for audio_on in (False, True, True, False) * rounds:
        if not audio_on:
            rates[False].append(await rfb_rate(stack, desktop, seconds))
            continue
        async with listener(url) as ws:
            first = await asyncio.wait_for(ws.receive(), 5)
            assert first.type == aiohttp.WSMsgType.BINARY, "audio flows"
            rates[True].append(await rfb_rate(stack, desktop, seconds))
            assert (await ws.receive()).type == aiohttp.WSMsgType.BINARY, "audio still on"
    return rates


async def run(quick: bool) -> int:
    from tests.e2e.viewer_stack import viewer_stack

    seconds = 1.0 if quick else 10.0
    with tempfile.TemporaryDirectory(prefix="relaydesk-bench-audio-") as tmp:
        async with viewer_stack(Path(tmp)) as stack:
            desktop = await stack.start_desktop()
            url = stack.socket_url(desktop).removesuffix("websockify") + "audio"
            relay = psutil.Process(stack.relay.pid)
            idle_before = cpu_seconds(relay)
            await asyncio.sleep(seconds)  # the idle baseline is a measured interval, not a wait
            idle = cpu_seconds(relay) - idle_before
            with tone(desktop.display, seconds + 30):
                async with listener(url) as ws:
                    await receive_for(ws, 0.5)  # capture start-up is not steady state
                    busy_before = cpu_seconds(relay)
                    heard = await receive_for(ws, seconds)
                    busy = cpu_seconds(relay) - busy_before
                rates = await video_with_and_without_audio(stack, desktop, 1 if quick else 4)
            report(heard, seconds, idle, busy)
            off, on = statistics.median(rates[False]), statistics.median(rates[True])
            print(
                f"video throughput: audio off {off:.1f} MB/s, on {on:.1f} MB/s "
                f"(ratio on/off {on / off:.2f}; target >= 0.90)"
            )
    return 0


def report(heard: Heard, seconds: float, idle_cpu: float, busy_cpu: float) -> None:
    if not heard.packets:
        print("no audio packets received")
        return
    rate = heard.bytes / seconds
    p50 = percentile(heard.latencies_ms, 0.5)
    p99 = percentile(heard.latencies_ms, 0.99)
    print(f"packets {heard.packets} in {seconds:.1f} s ({heard.packets / seconds:.1f}/s)")
    print(f"capture -> listener latency p50 {p50:.2f} ms  p99 {p99:.2f} ms")
    print(
        f"relay CPU: one stream {busy_cpu / seconds * 100:.2f} % of a core, "
        f"idle {idle_cpu / seconds * 100:.2f} %"
    )
    print(
        f"audio socket {rate / 1000:.1f} kB/s vs raw PCM {RAW_PCM_BYTES_PER_S / 1000:.1f} kB/s "
        f"(ratio {rate / RAW_PCM_BYTES_PER_S:.3f}, {RAW_PCM_BYTES_PER_S / rate:.1f}x smaller)"
    )


def main() -> int:
    args = parser(__doc__ or "").parse_args()
    os.environ.setdefault("RELAYDESK_LOG_LEVEL", "warning")
    return asyncio.run(run(args.quick))


if __name__ == "__main__":
    sys.exit(main())
