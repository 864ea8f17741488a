"""Starting one virtual desktop: Xvfb, a private D-Bus, a window manager, x11vnc, websockify,
autocutsel and the start-up apps, each in its own process group, each probed until ready."""

from __future__ import annotations

import asyncio
import functools
import importlib.util
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Final, Protocol

import aiohttp

from relay.browser.pipe import HOLDER_NAME, spawn_with_devtools
from relay.desktops.config import DesktopSettings
from relay.desktops.credentials import (
    PRIVATE_FILE_MODE,
    VNC_PASSWD_NAME,
    XAUTHORITY_NAME,
    DesktopCredentials,
    display_entries,
    private_dir,
    write_desktop_files,
)
from relay.desktops.displays import clean_stale_x_locks, free_ports
from relay.desktops.probe import (
    LOOPBACK,
    ProbeFailed,
    poll_until_ready,
    probe_chain,
    rfb_banner_tcp,
)
from relay.desktops.process import ChildProcess, DesktopProcesses, run_to_completion
from relay.desktops.profiles import Profile, install_home_files
from relay.desktops.user import DesktopUser, write_in_home
from relay.desktops.validation import StartRequest
from wire.errors import ErrorCode, OpError

logger = logging.getLogger(__name__)

# The X server keeps its locks and sockets here whatever TMPDIR says.
# Only these variables of the relay reach desktop apps: the relay's own secrets (tokens in
# RELAYDESK_*) and its DISPLAY/D-Bus/XDG session must never leak into a desktop agents drive.
_INHERITED_ENV = frozenset({"PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ"})
# Every app exposes its accessibility tree (docs/accessibility.md, "Set-up").
_ACCESSIBILITY_ENV = {
    "GTK_MODULES": "gail:atk-bridge",
    "ACCESSIBILITY_ENABLED": "1",
    "QT_ACCESSIBILITY": "1",
    "QT_LINUX_ACCESSIBILITY_ALWAYS_ON": "1",
}
A11Y_BUS_CHILD: Final = "a11y-bus"
# The accessibility bus's launcher (Debian's at-spi2-core); started with the session so the
# first accessibility call does not wait for D-Bus to activate it.
A11Y_BUS_LAUNCHERS = (
    "/usr/libexec/at-spi-bus-launcher",
    "/usr/lib/at-spi2-core/at-spi-bus-launcher",
)
# websockify without numpy, which it would import to unmask what clients send (input events
# and update requests, a few bytes each; viewers' pictures flow the other way, unmasked): it
# then listens in about half the time, on the critical path of a desktop's start, and each
# desktop's websockify and the worker it forks per connection are ~14 MB smaller.
WEBSOCKIFY_MAIN: Final = (
    "import sys; sys.modules['numpy'] = None; sys.argv[0] = 'websockify'; "
    "from websockify.websocketproxy import websockify_init; websockify_init()"
)
# How long after it starts a run-once program is waited for (beside the readiness probe).
ONE_SHOT_WAIT_S = 2.0
# How often autocutsel looks at the cut buffer (its default is 500 ms): a viewer's paste waits
# for the desktop's CLIPBOARD to hold the text before its V press, so this is that wait.
AUTOCUTSEL_PAUSE_MS = 50
_ONE_SHOT_POLL_S = 0.02


class AudioStarter(Protocol):
    """Hook for audio (later work: PulseAudio with a null sink).

    Starts what the desktop needs into ``procs`` and returns extra env (``PULSE_SERVER``).
    """

    async def __call__(
        self,
        req: StartRequest,
        env: dict[str, str],
        procs: DesktopProcesses,
        user: DesktopUser | None = None,
        log: IO[bytes] | None = None,
    ) -> dict[str, str]: ...

    @property
    def runtime_root(self) -> Path:
        """Parent of the sound servers' per-display runtime directories (removed with their
        desktops)."""
        ...


# Chromium-based browsers and Electron apps expose their web content only with this flag
# (docs/accessibility.md): every one relaydesk starts gets it.
RENDERER_A11Y_FLAG: Final = "--force-renderer-accessibility"
CHROMIUM_FAMILY: Final = frozenset(
    {
        "chromium",
        "chromium-browser",
        "google-chrome",
        "google-chrome-stable",
        "chrome",
        "brave-browser",
        "microsoft-edge",
        "electron",
        "code",
        "codium",
    }
)


def accessible_argv(argv: Sequence[str]) -> list[str]:
    """``argv`` with the renderer accessibility flag when it starts a Chromium-based app."""
    words = list(argv)
    if (
        words
        and Path(words[0]).name in CHROMIUM_FAMILY
        and not any(
            w.startswith(RENDERER_A11Y_FLAG) or w == "--disable-renderer-accessibility"
            for w in words
        )
    ):
        words.insert(1, RENDERER_A11Y_FLAG)
    return words


def missing_binaries(config: DesktopSettings | None = None) -> list[str]:
    """What a virtual desktop needs but this host lacks (empty: the capability is available)."""
    cfg = config or DesktopSettings()
    missing = [b for b in (cfg.xvfb_binary, cfg.x11vnc_binary) if shutil.which(b) is None]
    if importlib.util.find_spec("websockify") is None:
        missing.append("websockify")
    if not (cfg.novnc_dir / "vnc.html").is_file():
        missing.append("noVNC")
    return missing


def desktop_env(
    display: int, dbus_address: str | None, xauthority: Path | None = None
) -> dict[str, str]:
    """Environment of every desktop child: a filtered copy of ours plus this display and the
    desktop's own authority file."""
    env = {k: v for k, v in os.environ.items() if k in _INHERITED_ENV or k.startswith("LC_")}
    env.update(_ACCESSIBILITY_ENV)
    env["DISPLAY"] = f":{display}"
    if xauthority is not None:
        env["XAUTHORITY"] = str(xauthority)
    if dbus_address:
        env["DBUS_SESSION_BUS_ADDRESS"] = dbus_address
    return env


def _open_log(path: Path) -> IO[bytes]:
    private_dir(path.parent)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE_MODE)
    os.fchmod(fd, PRIVATE_FILE_MODE)  # a log of an earlier run may have been more open
    return os.fdopen(fd, "wb")


async def read_line(fd: int, deadline: float, what: str) -> str:
    """Read one line a child writes to ``fd`` (its readiness signal); EOF means it died.

    The caller keeps ownership of ``fd``; a duplicate is handed to the event loop.
    """
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    pipe = os.fdopen(os.dup(fd), "rb", buffering=0)
    transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), pipe)
    try:
        async with asyncio.timeout(max(deadline - time.monotonic(), 0.0)):
            line = await reader.readline()
    except TimeoutError:
        raise ProbeFailed(f"{what} not ready in time") from None
    finally:
        transport.close()
    if not line.endswith(b"\n"):
        raise ProbeFailed(f"{what} exited before it was ready")
    return line.decode("ascii", "replace").strip()


@dataclass(frozen=True)
class SessionSetup:
    """Who a desktop's session runs as, its home and its profile (None: the relay's own
    environment, no profile)."""

    profile: Profile | None = None
    home: Path | None = None
    user: DesktopUser | None = None
    tmp: Path | None = None

    def env(self) -> dict[str, str]:
        """What the session's programs get on top of the desktop's environment."""
        env: dict[str, str] = {}
        if self.home is not None:
            env["HOME"] = str(self.home)
        if self.tmp is not None:
            env["TMPDIR"] = str(self.tmp)
        if self.user is not None:
            env.update(self.user.env())
        if self.profile is not None:
            env.update(self.profile.env)
        return env


@dataclass
class LaunchedDesktop:
    """Processes and endpoints of a desktop that answered every readiness probe."""

    display: int
    vnc_port: int
    websockify_port: int
    dbus_address: str | None
    processes: DesktopProcesses
    credentials: DesktopCredentials
    extra_env: dict[str, str] = field(default_factory=dict)
    # What the session's programs run with (apps launched later get the same).
    session_env: dict[str, str] = field(default_factory=dict)

    @property
    def vnc_secret(self) -> bytes:
        """What x11vnc demands (VNC authentication); the relay answers it for viewers."""
        return self.credentials.vnc_secret


@dataclass(frozen=True)
class _Private:
    """A desktop's private directory and the secrets its files hold."""

    directory: Path
    credentials: DesktopCredentials

    @property
    def xauthority(self) -> Path:
        return self.directory / XAUTHORITY_NAME

    @property
    def vnc_passwd(self) -> Path:
        return self.directory / VNC_PASSWD_NAME


class ProcessStart:
    """Builds one desktop; on any failure it stops every group it started before raising."""

    def __init__(
        self,
        config: DesktopSettings,
        http: aiohttp.ClientSession,
        audio: AudioStarter | None = None,
    ) -> None:
        self._config = config
        self._http = http
        self._audio = audio

    async def launch(
        self,
        req: StartRequest,
        log_name: str,
        private: Path,
        procs: DesktopProcesses | None = None,
        session: SessionSetup | None = None,
        on_display: Callable[[int], None] | None = None,
    ) -> LaunchedDesktop:
        """Start a desktop whose private files go to the directory ``private``; its children
        join ``procs`` (whose ``on_add`` sees each one as it starts); ``on_display`` hears the
        display number as soon as Xvfb reports it."""
        procs = DesktopProcesses() if procs is None else procs
        session = session or SessionSetup()
        log_path = self._config.log_dir / f"{log_name}.log"
        log = _open_log(log_path)
        credentials = DesktopCredentials.new()
        private_files = _Private(private, credentials)
        try:
            # Files are made to the end even when the start is cancelled meanwhile: a thread
            # still writing after the caller's clean-up would leave them behind.
            await run_to_completion(asyncio.to_thread(write_desktop_files, private, credentials))
            await run_to_completion(asyncio.to_thread(_prepare_home, session, credentials))
            return await self._launch(req, procs, log, private_files, session, on_display)
        except BaseException as err:
            # Cleanup must finish even when the start itself was cancelled.
            await run_to_completion(procs.stop(self._config.stop_grace_s))
            if isinstance(err, ProbeFailed | OSError):
                logger.warning(
                    "desktop %s failed to start: %s; children's output:\n%s",
                    req.slot,
                    err,
                    _tail(log_path),
                )
                raise OpError(ErrorCode.START_FAILED, f"desktop did not start: {err}") from err
            raise
        finally:
            log.close()

    async def _launch(
        self,
        req: StartRequest,
        procs: DesktopProcesses,
        log: IO[bytes],
        private: _Private,
        session: SessionSetup,
        on_display: Callable[[int], None] | None,
    ) -> LaunchedDesktop:
        deadline = time.monotonic() + self._config.start_timeout_s
        clean_stale_x_locks()
        vnc_port, ws_port = free_ports(2)
        fds: list[int] = []
        try:
            # websockify and D-Bus do not need the display: they start while Xvfb comes up.
            fds.append(xvfb_fd := self._spawn_xvfb(req, procs, log, private.xauthority))
            dbus_fd = self._spawn_dbus(procs, log, session)
            fds.extend([dbus_fd] if dbus_fd is not None else [])
            self._spawn_websockify(procs, ws_port, vnc_port)
            display = _display_number(await read_line(xvfb_fd, deadline, "Xvfb"))
            dbus_address = await read_line(dbus_fd, deadline, "dbus-daemon") if dbus_fd else None
        finally:
            for fd in fds:
                os.close(fd)
        if on_display is not None:
            on_display(display)
        env = desktop_env(display, dbus_address, private.xauthority)
        self._spawn_x11vnc(procs, env, display, vnc_port, log, private)
        # The chain (x11vnc through websockify) needs neither the sound server nor the
        # session: it is probed while they start.
        ready = asyncio.create_task(
            self._await_ready(procs, vnc_port, ws_port, deadline), name="desktop-ready"
        )
        try:
            extra, one_shots = await self._start_session(req, procs, env, log, session)
            one_shots_until = min(time.monotonic() + ONE_SHOT_WAIT_S, deadline)
            await ready
        finally:
            ready.cancel()  # done already, unless the start failed or was cancelled first
            await asyncio.gather(ready, return_exceptions=True)
        await _reap_one_shots(procs, one_shots, one_shots_until)
        return LaunchedDesktop(
            display,
            vnc_port,
            ws_port,
            dbus_address,
            procs,
            private.credentials,
            dict(extra),
            dict(env),
        )

    async def _start_session(
        self,
        req: StartRequest,
        procs: DesktopProcesses,
        env: dict[str, str],
        log: IO[bytes],
        session: SessionSetup,
    ) -> tuple[dict[str, str], list[ChildProcess]]:
        """The sound server, then the session's programs, with ``env`` (completed in place).

        Returns what the sound server added to the environment and the run-once programs."""
        if session.home is not None:
            env["XAUTHORITY"] = str(session.home / HOME_XAUTHORITY)
        env.update(session.env())
        extra = (
            await self._audio(req, env, procs, user=session.user, log=log)
            if (req.audio and self._audio)
            else {}
        )
        env.update(extra)
        return extra, self._spawn_session(req, procs, env, log, session)

    def _spawn_xvfb(
        self, req: StartRequest, procs: DesktopProcesses, log: IO[bytes], xauthority: Path
    ) -> int:
        read_fd, write_fd = os.pipe()
        # -auth: only clients presenting the desktop's cookie may connect (no host access list).
        argv = [
            self._config.xvfb_binary,
            "-displayfd",
            str(write_fd),
            "-screen",
            "0",
            f"{req.geometry}x{req.depth}",
            "-nolisten",
            "tcp",
            "-noreset",
            "-auth",
            str(xauthority),
        ]
        try:
            procs.add(_spawn("Xvfb", argv, base_env(), True, log, (write_fd,)))
        except OSError:
            os.close(read_fd)
            raise
        finally:
            os.close(write_fd)
        return read_fd

    def _spawn_dbus(
        self, procs: DesktopProcesses, log: IO[bytes], session: SessionSetup
    ) -> int | None:
        if shutil.which(self._config.dbus_binary) is None:
            logger.info("no %s: desktop runs without a session bus", self._config.dbus_binary)
            return None
        read_fd, write_fd = os.pipe()
        argv = [
            self._config.dbus_binary,
            "--session",
            "--nofork",
            "--nopidfile",
            f"--print-address={write_fd}",
        ]
        try:
            env = base_env() | session.env()
            procs.add(_spawn("dbus-daemon", argv, env, False, log, (write_fd,), user=session.user))
        except OSError:
            os.close(read_fd)
            raise
        finally:
            os.close(write_fd)
        return read_fd

    def _spawn_websockify(self, procs: DesktopProcesses, ws_port: int, vnc_port: int) -> None:
        argv = [
            sys.executable,
            "-c",
            WEBSOCKIFY_MAIN,
            "--web",
            str(self._config.novnc_dir),
            "--file-only",
            f"{LOOPBACK}:{ws_port}",
            f"{LOOPBACK}:{vnc_port}",
        ]
        # websockify logs every connection (the watchdog makes one per interval): not kept.
        procs.add(_spawn("websockify", argv, base_env(), True, None, ()))

    def _spawn_x11vnc(
        self,
        procs: DesktopProcesses,
        env: dict[str, str],
        display: int,
        port: int,
        log: IO[bytes],
        private: _Private,
    ) -> None:
        # -rfbauth: VNC authentication with the desktop's secret, read from a 0600 file.
        argv = [
            self._config.x11vnc_binary,
            "-display",
            f":{display}",
            "-auth",
            str(private.xauthority),
            "-rfbauth",
            str(private.vnc_passwd),
            "-localhost",
            "-noipv6",
            "-shared",
            "-forever",
            "-quiet",
            "-rfbport",
            str(port),
            # -noprimary: a selection on the desktop is not sent to viewers as the clipboard.
            "-noprimary",
            *self._config.x11vnc_flags,
        ]
        # x11vnc spends ~250 ms on SIGTERM restoring settings of a display that is going away.
        procs.add(_spawn("x11vnc", argv, env, True, log, (), stop_signal=signal.SIGKILL))

    def _spawn_session(
        self,
        req: StartRequest,
        procs: DesktopProcesses,
        env: dict[str, str],
        log: IO[bytes],
        session: SessionSetup,
    ) -> list[ChildProcess]:
        """Window manager, clipboard bridge, the profile's programs and the start-up apps:
        useful but not essential, and never waited for (readiness is the display's).

        Returns the profile's run-once programs, for ``_reap_one_shots``."""
        optional: list[tuple[str, Sequence[str], dict[str, str]]] = []
        launcher = next((p for p in A11Y_BUS_LAUNCHERS if os.access(p, os.X_OK)), None)
        if launcher is not None and "DBUS_SESSION_BUS_ADDRESS" in env:
            optional.append((A11Y_BUS_CHILD, [launcher, "--launch-immediately", "--a11y=1"], {}))
        if self._config.window_manager:
            optional.append(("wm", self._config.window_manager, {}))
        if shutil.which(self._config.clipboard_binary):
            # CLIPBOARD only: a selection (PRIMARY) stays a selection, never the clipboard.
            # x11vnc writes a viewer's clipboard to the cut buffer, which autocutsel polls.
            pause = str(AUTOCUTSEL_PAUSE_MS)
            optional.append(("autocutsel", [self._config.clipboard_binary, "-pause", pause], {}))
        if session.profile is not None and session.home is not None:
            optional.extend(session.profile.startup(session.home))
        optional.extend((f"app:{words[0]}", words, {}) for words in req.apps)
        once = session.profile.once if session.profile is not None else frozenset()
        one_shots: list[ChildProcess] = []
        for name, argv, extra in optional:
            try:
                child = spawn_with_devtools(
                    accessible_argv(argv),
                    functools.partial(_spawn_app, name, env | extra, log, session.user),
                    functools.partial(_spawn_holder, procs, log),
                    self._config.state_dir,
                )
            except OSError as err:
                logger.warning("desktop %s: %s not started: %s", req.slot, name, err)
                continue
            procs.add(child)
            if name in once:
                one_shots.append(child)
        return one_shots

    async def _await_ready(
        self, procs: DesktopProcesses, vnc_port: int, ws_port: int, deadline: float
    ) -> None:
        """Probe the whole chain: vnc.html and the RFB banner through websockify.

        The banner can only come from x11vnc, so one chain probe proves x11vnc is ready too;
        a separate direct probe would cost one more x11vnc greeting (~0.1-0.25 s).
        """
        timeout = self._config.probe_timeout_s

        async def chain() -> None:
            result = await probe_chain(self._http, ws_port, timeout)
            if not result.ok:
                raise ProbeFailed(result.reason or "probe failed")

        def essentials_alive() -> bool:
            return not procs.dead_essentials()

        try:
            await poll_until_ready(chain, deadline, "desktop", essentials_alive)
        except ProbeFailed:
            if dead := procs.dead_essentials():
                raise ProbeFailed(f"exited during start: {', '.join(dead)}") from None
            # Name the culprit: x11vnc if it does not greet directly, else websockify.
            await _direct_banner(vnc_port, timeout)
            raise


async def _reap_one_shots(
    procs: DesktopProcesses, one_shots: list[ChildProcess], until: float
) -> None:
    """Collect run-once programs (a wallpaper setter) that have exited, and drop them from the
    desktop's processes: otherwise each stays a zombie until the desktop stops. One still
    running at ``until`` stays in the set and stops with the desktop."""
    pending = list(one_shots)
    while pending:
        for child in [c for c in pending if c.returncode() is not None]:  # poll() reaps
            pending.remove(child)
            procs.children.remove(child)
        if not pending or time.monotonic() >= until:
            return
        await asyncio.sleep(_ONE_SHOT_POLL_S)


async def _direct_banner(vnc_port: int, timeout_s: float) -> None:
    try:
        await rfb_banner_tcp(vnc_port, timeout_s)
    except (OSError, ProbeFailed, TimeoutError) as err:
        raise ProbeFailed(f"x11vnc not answering: {err or type(err).__name__}") from None


def _tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def _display_number(line: str) -> int:
    if not line.isdigit():
        raise ProbeFailed(f"Xvfb reported an unexpected display {line[:20]!r}")
    return int(line)


def base_env() -> dict[str, str]:
    """The relay's environment, filtered: what its own helper processes get."""
    return {k: v for k, v in os.environ.items() if k in _INHERITED_ENV or k.startswith("LC_")}


def _spawn(
    name: str,
    argv: Sequence[str],
    env: dict[str, str],
    essential: bool,
    log: IO[bytes] | None,
    pass_fds: Sequence[int],
    stop_signal: int = signal.SIGTERM,
    user: DesktopUser | None = None,
) -> ChildProcess:
    output: IO[bytes] | int = log if log is not None else subprocess.DEVNULL
    # Held until the desktop's processes record it (DesktopProcesses.add): a relay killed in
    # between leaves no program running that the state file does not name.
    return ChildProcess.spawn(
        name,
        argv,
        env=env,
        essential=essential,
        pass_fds=pass_fds,
        output=output,
        stop_signal=stop_signal,
        user=user,
        held=True,
    )


def _spawn_app(
    name: str,
    env: dict[str, str],
    log: IO[bytes],
    user: DesktopUser | None,
    argv: Sequence[str],
    pass_fds: Sequence[int],
) -> ChildProcess:
    return _spawn(name, argv, env, False, log, pass_fds, user=user)


def _spawn_holder(
    procs: DesktopProcesses, log: IO[bytes], argv: Sequence[str], pass_fds: Sequence[int]
) -> ChildProcess:
    """A browser's DevTools holder: the relay's user, one of the desktop's processes."""
    return procs.add(_spawn(HOLDER_NAME, argv, base_env(), False, log, pass_fds))


HOME_XAUTHORITY = ".Xauthority"


def _prepare_home(session: SessionSetup, credentials: DesktopCredentials) -> None:
    """The session's copy of the X cookie and the profile's files, in its home (blocking)."""
    if session.home is None:
        return
    cookie = display_entries("", credentials.x_cookie)
    write_in_home(session.home, HOME_XAUTHORITY, cookie, session.user)
    if session.profile is not None:
        install_home_files(session.profile, session.home, session.user)
