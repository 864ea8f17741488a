"""Sound for virtual desktops: one private PulseAudio server per desktop, a null sink as default.

The server runs in its own process group inside the desktop's process set, so it stops with
the desktop; it is *not* essential: when it dies the watchdog reports ``audio_failed`` and the
picture keeps going. Its runtime directory is derived from the X display number (unique on a
host while the desktop lives), so the capture side (``relay/audio.py``) finds the socket from the
status row alone and no host path ever travels in a row.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import stat
import subprocess
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import IO

from relay.desktops.displays import x_display_alive
from relay.desktops.probe import ProbeFailed, poll_until_ready
from relay.desktops.process import ChildProcess, DesktopProcesses, run_to_completion
from relay.desktops.user import DesktopUser
from relay.desktops.validation import StartRequest

logger = logging.getLogger(__name__)

AUDIO_ENV = "RELAYDESK_DESKTOP_AUDIO"
PULSEAUDIO_BINARY_ENV = "RELAYDESK_PULSEAUDIO_BINARY"
PROCESS_NAME = "pulseaudio"
KEEPALIVE_NAME = "pulse-keepalive"
SINK_NAME = "relaydesk"
MONITOR_SOURCE = f"{SINK_NAME}.monitor"
SAMPLE_RATE = 48_000
CHANNELS = 2

# Row reasons (``audio_reason``) when a desktop runs without sound.
REASON_NOT_REQUESTED = "not requested"
REASON_UNAVAILABLE = "audio is not available on this relay"
REASON_NOT_STARTED = "the sound server did not start"
REASON_FAILED = "audio_failed"

# The native protocol loads last: once its socket accepts, the null sink exists.
_DEFAULT_PA = """\
load-module module-null-sink sink_name={sink} rate={rate} channels={channels} \
sink_properties=device.description=relaydesk
set-default-sink {sink}
load-module module-native-protocol-unix socket={socket} auth-anonymous=1
"""
_KEPT_ENV = ("PATH", "LANG", "LANGUAGE", "TZ", "DBUS_SESSION_BUS_ADDRESS")


class AudioMode(StrEnum):
    """``RELAYDESK_DESKTOP_AUDIO``: whether desktops get sound when the caller does not say."""

    DEFAULT = "default"  # on unless a start says ``audio: false`` (and PulseAudio is installed)
    OPTIONAL = "optional"  # only for starts that say ``audio: true``
    OFF = "off"  # never


def default_runtime_root() -> Path:
    """Per-user parent of the desktops' PulseAudio runtime dirs (sockets need short paths)."""
    return Path(tempfile.gettempdir()) / f"relaydesk-pulse-{os.getuid()}"


@dataclass(frozen=True)
class AudioSettings:
    """How the relay gives its desktops sound."""

    mode: AudioMode = AudioMode.DEFAULT
    binary: str = "pulseaudio"
    pacat_binary: str = "pacat"
    runtime_root: Path = field(default_factory=default_runtime_root)
    start_timeout_s: float = 5.0

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> AudioSettings:
        env = os.environ if environ is None else environ
        raw = env.get(AUDIO_ENV, "").strip().lower() or AudioMode.DEFAULT.value
        try:
            mode = AudioMode(raw)
        except ValueError:
            logger.warning("%s=%r is not one of default|optional|off; using off", AUDIO_ENV, raw)
            mode = AudioMode.OFF
        return cls(mode=mode, binary=env.get(PULSEAUDIO_BINARY_ENV, "").strip() or "pulseaudio")

    def unavailable_reason(self) -> str | None:
        """Why this relay cannot give desktops sound (None: it can)."""
        if self.mode is AudioMode.OFF:
            return "audio is disabled on this relay"
        if shutil.which(self.binary) is None:
            return "PulseAudio is not installed on this relay"
        return None

    @property
    def available(self) -> bool:
        return self.unavailable_reason() is None

    @property
    def default_on(self) -> bool:
        return self.available and self.mode is AudioMode.DEFAULT


def runtime_dir(display: int, root: Path | None = None) -> Path:
    return (root or default_runtime_root()) / f"display-{display}"


def socket_path(display: int, root: Path | None = None) -> Path:
    return runtime_dir(display, root) / "native"


def pulse_server(display: int, root: Path | None = None) -> str:
    """``PULSE_SERVER`` of the desktop on ``display``."""
    return f"unix:{socket_path(display, root)}"


def stale_runtime_dirs(root: Path) -> list[Path]:
    """``display-N`` directories under ``root`` whose display no X server holds.

    A relay killed during a start may leave one; a directory whose display is live belongs to
    a running desktop (perhaps another relay's) and is kept.
    """
    stale = []
    for path in root.glob("display-*"):
        number = path.name.removeprefix("display-")
        if number.isdigit() and not x_display_alive(int(number)):
            stale.append(path)
    return stale


def display_number(display: str) -> int:
    """``":12"`` → 12 (raises ``ValueError`` for anything else)."""
    if not display.startswith(":") or not display[1:].isdigit():
        raise ValueError(f"not a local display: {display[:20]!r}")
    return int(display[1:])


def audio_lost(processes: DesktopProcesses) -> bool:
    """True when the desktop had a sound server and it is no longer running."""
    child = processes.find(PROCESS_NAME)
    return child is not None and not child.is_alive()


def audio_outcome(requested: bool, has_starter: bool, extra_env: Mapping[str, str]) -> str | None:
    """The row's ``audio_reason``: None when the desktop has sound, else why not."""
    if "PULSE_SERVER" in extra_env:
        return None
    if not requested:
        return REASON_NOT_REQUESTED
    return REASON_NOT_STARTED if has_starter else REASON_UNAVAILABLE


def _private_dir(path: Path, mode: int = 0o700) -> None:
    """Create ``path`` (``mode``) or accept it only if it is ours; tighten it to ``mode``."""
    path.mkdir(mode=mode, parents=True, exist_ok=True)
    info = path.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        raise OSError(f"{path.name}: not a directory of ours")
    if stat.S_IMODE(info.st_mode) != mode:
        path.chmod(mode)


def _write_then_hand_over(
    directory: Path, name: str, data: bytes, user: DesktopUser | None
) -> None:
    """Write ``directory/name`` while the directory is still the relay's (0700), then give
    file and directory to ``user``, through descriptors: once the user owns the directory the
    relay never touches a path inside it again (a link planted there is never followed)."""
    dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
        fd = os.open(name, flags, 0o600, dir_fd=dir_fd)
        try:
            os.write(fd, data)
            if user is not None:
                os.fchown(fd, user.uid, user.gid)
        finally:
            os.close(fd)
        if user is not None:
            os.fchown(dir_fd, user.uid, user.gid)
    finally:
        os.close(dir_fd)


class PulseAudioStarter:
    """The launcher's ``AudioStarter``: a PulseAudio server with a null sink for one desktop.

    Never fails the desktop: on any problem it logs, stops what it started and returns no
    ``PULSE_SERVER`` (the row then says ``audio: false`` with a reason).
    """

    def __init__(self, settings: AudioSettings | None = None) -> None:
        self.settings = settings or AudioSettings.from_env()

    async def __call__(
        self,
        req: StartRequest,
        env: dict[str, str],
        procs: DesktopProcesses,
        user: DesktopUser | None = None,
        log: IO[bytes] | None = None,
    ) -> dict[str, str]:
        try:
            display = display_number(env.get("DISPLAY", ""))
            return await self._start(display, env, procs, user, log)
        except (OSError, ValueError, ProbeFailed) as err:
            logger.warning("desktop %s: audio not started: %s", req.slot, err)
            if (child := procs.find(PROCESS_NAME)) is not None:
                child.kill()
            return {}

    async def _start(
        self,
        display: int,
        env: Mapping[str, str],
        procs: DesktopProcesses,
        user: DesktopUser | None,
        log: IO[bytes] | None,
    ) -> dict[str, str]:
        deadline = time.monotonic() + self.settings.start_timeout_s
        # Made to the end even when the start is cancelled: its clean-up removes it by display.
        directory = await run_to_completion(asyncio.to_thread(self._prepare, display, user))
        # Its output goes to the desktop's log in the relay's private directory: the relay
        # never opens a file inside a directory the desktop user owns.
        child = procs.add(
            ChildProcess.spawn(
                PROCESS_NAME,
                self._argv(directory),
                env=self._env(directory, env),
                essential=False,
                output=log if log is not None else subprocess.DEVNULL,
                user=user,
                held=True,
            )
        )
        sock = directory / "native"

        async def accepts() -> None:
            _, writer = await asyncio.open_unix_connection(str(sock))
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

        await poll_until_ready(accepts, deadline, "pulseaudio", child.is_alive)
        self._spawn_keepalive(directory, env, procs, user)
        logger.info("desktop :%d has sound (PulseAudio pid %d)", display, child.pid)
        return {"PULSE_SERVER": f"unix:{sock}"}

    def _spawn_keepalive(
        self,
        directory: Path,
        env: Mapping[str, str],
        procs: DesktopProcesses,
        user: DesktopUser | None,
    ) -> None:
        """A silent stream that keeps the null sink rendering.

        An idle null sink takes 1.5-2 s to start rendering for its first client; with this
        stream a capture starts in ~10 ms and a new sound is heard at once.
        """
        argv = [
            self.settings.pacat_binary,
            "--raw",
            "--format=s16le",
            f"--rate={SAMPLE_RATE}",
            f"--channels={CHANNELS}",
            "--latency-msec=100",
            "--client-name=relaydesk-keepalive",
            "/dev/zero",
        ]
        env = self._env(directory, env) | {"PULSE_SERVER": f"unix:{directory / 'native'}"}
        try:
            procs.add(
                ChildProcess.spawn(
                    KEEPALIVE_NAME, argv, env=env, essential=False, user=user, held=True
                )
            )
        except OSError as err:
            logger.info("no keep-alive stream (%s): captures start slower", err)

    @property
    def runtime_root(self) -> Path:
        return self.settings.runtime_root

    def _prepare(self, display: int, user: DesktopUser | None = None) -> Path:
        """A fresh private runtime dir with the server's ``default.pa``; with a desktop user,
        the dir is that user's (the server runs as it) and its parent only traversable."""
        root = self.settings.runtime_root
        _private_dir(root, 0o711 if user is not None else 0o700)
        directory = runtime_dir(display, root)
        # Whatever is here belongs to an earlier desktop on this display, which is gone: our
        # Xvfb just bound the display's socket, so nobody else holds the display now.
        shutil.rmtree(directory, ignore_errors=True)
        _private_dir(directory)
        script = _DEFAULT_PA.format(
            sink=SINK_NAME, rate=SAMPLE_RATE, channels=CHANNELS, socket=directory / "native"
        )
        _write_then_hand_over(directory, "default.pa", script.encode(), user)
        return directory

    def _argv(self, directory: Path) -> list[str]:
        return [
            self.settings.binary,
            "--daemonize=no",
            "--exit-idle-time=-1",
            "--system=false",
            "-n",
            "-F",
            str(directory / "default.pa"),
            "--use-pid-file=no",
            "--log-target=stderr",
            "--log-level=error",
        ]

    @staticmethod
    def _env(directory: Path, env: Mapping[str, str]) -> dict[str, str]:
        private = {k: v for k, v in env.items() if k in _KEPT_ENV or k.startswith("LC_")}
        return private | {
            "HOME": str(directory),
            "XDG_RUNTIME_DIR": str(directory),
            "XDG_CONFIG_HOME": str(directory / "config"),
            "PULSE_RUNTIME_PATH": str(directory),
            "PULSE_STATE_PATH": str(directory / "state"),
        }
