"""Desktop profiles: what a desktop starts, as data (one TOML file per profile).

Built-in profiles live beside this module (``profiles/*.toml``); an operator adds or replaces
profiles with files of the same format in ``RELAYDESK_DESKTOP_PROFILES_DIR``. A profile lists
the Debian packages it needs (``scripts/install`` reads them), the programs that must be on
``PATH``, files to place in the home, session programs, the launchable apps (one list for the
panel, the menu, ``/desktop apps`` and ``desktop_launch``) and what starts with the desktop.
docs/desktops.md, "Profiles", describes the format.
"""

from __future__ import annotations

import logging
import re
import shutil
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from relay.desktops.user import DesktopUser, write_in_home
from wire.errors import ErrorCode, InvalidArgs, OpError
from wire.ops import ProfileInfo

logger = logging.getLogger(__name__)

BUILTIN_DIR: Final = Path(__file__).with_name("profiles")
DEFAULT_PROFILE: Final = "standard"
NAME_RE: Final = re.compile(r"^[a-z0-9][a-z0-9_-]{0,31}$")
ENTRIES_DIR: Final = ".local/share/applications"
MENU_FILE: Final = ".config/relaydesk/menu.csv"
# Apps' command lines are the profile author's; a start or launch only names an id.
_ENV_NAME_RE: Final = re.compile(r"^[A-Z_][A-Z0-9_]{0,63}$")
_LAUNCHERS_LINE_RE: Final = re.compile(r"^[ \t]*@LAUNCHERS@[ \t]*$", re.MULTILINE)


class ProfileError(ValueError):
    """A profile file that cannot be used (its path and what is wrong)."""


@dataclass(frozen=True)
class App:
    """A launchable application of a profile."""

    id: str
    name: str
    icon: str
    exec: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    # Whether its windows reach the accessibility bus (xterm's do not: nothing to wait for).
    accessible: bool = True

    @property
    def desktop_entry(self) -> str:
        """The desktop-entry id written into every home of the profile."""
        return f"relaydesk-{self.id}.desktop"

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "icon": self.icon,
            "desktop_entry": self.desktop_entry,
            "accessible": self.accessible,
        }


@dataclass(frozen=True)
class Profile:
    """One desktop profile (``profiles/<name>.toml``)."""

    name: str
    description: str
    directory: Path
    packages: tuple[str, ...]
    requires: tuple[str, ...]
    start: tuple[str, ...]
    env: Mapping[str, str]
    files: Mapping[str, str]
    programs: Mapping[str, tuple[str, ...]]
    apps: tuple[App, ...]
    # Session programs that do their work and exit (a wallpaper setter): reaped, not kept.
    once: frozenset[str] = frozenset()

    def missing(self) -> list[str]:
        """Required programs this host lacks (empty: the profile is available)."""
        return [program for program in self.requires if shutil.which(program) is None]

    def app(self, app_id: object) -> App:
        for app in self.apps:
            if app.id == app_id:
                return app
        ids = ", ".join(a.id for a in self.apps)
        raise InvalidArgs("app", f"not a launchable app of profile {self.name!r} ({ids})")

    def expand(self, argv: Sequence[str], home: Path) -> list[str]:
        return [_expand(word, home, self.directory) for word in argv]

    def startup(self, home: Path) -> list[tuple[str, list[str], dict[str, str]]]:
        """What starts with the desktop: (name, argv, extra env) in the profile's order."""
        out: list[tuple[str, list[str], dict[str, str]]] = []
        for item in self.start:
            if item in self.programs:
                out.append((item, self.expand(self.programs[item], home), {}))
            else:
                app = self.app(item)
                out.append((f"app:{app.id}", self.expand(app.exec, home), dict(app.env)))
        return out

    def status(self, default: bool) -> ProfileInfo:
        """What a relay tells about this profile (capability): available, or what is missing;
        ``default``: whether a start that names no profile gets it."""
        missing = self.missing()
        return {
            "name": self.name,
            "description": self.description,
            "available": not missing,
            "missing": missing,
            "default": default,
            "apps": [a.to_dict() for a in self.apps],
        }


def _expand(word: str, home: Path, directory: Path) -> str:
    return word.replace("{home}", str(home)).replace("{profile_dir}", str(directory))


def install_home_files(profile: Profile, home: Path, user: DesktopUser | None) -> None:
    """The profile's files, one desktop entry per app and the menu, written into ``home`` at
    every start (blocking)."""
    launchers = "\n".join(
        f"launcher_item_app = {home / ENTRIES_DIR / app.desktop_entry}" for app in profile.apps
    )
    menu = f"jgmenu --simple --at-pointer --icon-size=22 --csv-file={home / MENU_FILE}"
    for target, source in profile.files.items():
        text = (profile.directory / source).read_text(encoding="utf-8")
        text = fill_placeholders(text, launchers, menu)
        write_in_home(home, target, _expand(text, home, profile.directory).encode(), user)
    for app in profile.apps:
        entry = _desktop_entry(app, profile.expand(app.exec, home))
        write_in_home(home, f"{ENTRIES_DIR}/{app.desktop_entry}", entry.encode(), user)
    rows = "".join(
        f"{app.name},{_menu_command(profile.expand(app.exec, home))},{app.icon}\n"
        for app in profile.apps
    )
    write_in_home(home, MENU_FILE, rows.encode(), user)


def fill_placeholders(text: str, launchers: str, menu: str) -> str:
    """``@LAUNCHERS@`` (only on a line of its own) and ``@MENU@`` filled in.

    The launcher block is several lines: replaced anywhere else (a comment that mentions it),
    its later lines would stand outside the comment and add launchers a second time.
    """
    text = _LAUNCHERS_LINE_RE.sub(lambda _: launchers, text)
    return text.replace("@MENU@", menu)


def _desktop_entry(app: App, argv: list[str]) -> str:
    env = " ".join(f"{k}={v}" for k, v in app.env.items())
    command = " ".join(_quote_exec(word) for word in argv)
    return (
        "[Desktop Entry]\nType=Application\n"
        f"Name={app.name}\nIcon={app.icon}\n"
        f"Exec={'env ' + env + ' ' if env else ''}{command}\n"
    )


def _quote_exec(word: str) -> str:
    if re.fullmatch(r"[A-Za-z0-9_./=:,+-]+", word):
        return word
    return '"' + re.sub(r'(["`$\\])', r"\\\1", word) + '"'


def _menu_command(argv: list[str]) -> str:
    return " ".join(_quote_exec(word) for word in argv).replace(",", " ")


# -- loading ---------------------------------------------------------------------------------


def load_profiles(extra_dir: Path | None = None) -> dict[str, Profile]:
    """Built-in profiles, then the operator's (same name: the operator's wins); a broken file
    is logged and skipped (blocking)."""
    profiles: dict[str, Profile] = {}
    for directory in (BUILTIN_DIR, extra_dir):
        if directory is None or not directory.is_dir():
            continue
        for path in sorted(directory.glob("*.toml")):
            try:
                profiles[path.stem] = parse_profile(path)
            except ProfileError as err:
                logger.warning("desktop profile skipped: %s", err)
    return profiles


def parse_profile(path: Path) -> Profile:
    """Read one profile file; raises ``ProfileError``."""
    if not NAME_RE.fullmatch(path.stem):
        raise ProfileError(f"{path.name}: name must match {NAME_RE.pattern}")
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
        raise ProfileError(f"{path.name}: {err}") from err
    try:
        return _build(path, data)
    except (KeyError, TypeError, ValueError) as err:
        raise ProfileError(f"{path.name}: {err}") from err


def _build(path: Path, data: dict[str, Any]) -> Profile:
    programs = {str(k): _words(v["exec"]) for k, v in data.get("programs", {}).items()}
    once = frozenset(str(k) for k, v in data.get("programs", {}).items() if v.get("once") is True)
    apps = tuple(_app(item) for item in data.get("apps", []))
    profile = Profile(
        name=path.stem,
        description=str(data.get("description", "")),
        directory=path.parent,
        packages=_strings(data.get("packages", [])),
        requires=_strings(data.get("requires", [])),
        start=_strings(data.get("start", [])),
        env=_env(data.get("env", {})),
        files={str(k): str(v) for k, v in data.get("files", {}).items()},
        programs=programs,
        apps=apps,
        once=once,
    )
    for item in profile.start:
        if item not in programs and item not in {a.id for a in apps}:
            raise ValueError(f"start names {item!r}, neither a program nor an app")
    for target in profile.files:
        if target.startswith("/") or ".." in target.split("/"):
            raise ValueError(f"file {target!r} must be relative to the home")
    return profile


def _app(item: dict[str, Any]) -> App:
    app_id = str(item["id"])
    if not NAME_RE.fullmatch(app_id):
        raise ValueError(f"app id {app_id!r} must match {NAME_RE.pattern}")
    accessible = item.get("accessible", True)
    if not isinstance(accessible, bool):
        raise ValueError(f"app {app_id!r}: accessible must be true or false")
    return App(
        app_id,
        str(item["name"]),
        str(item.get("icon", "application-x-executable")),
        _words(item["exec"]),
        _env(item.get("env", {})),
        accessible,
    )


def _words(value: object) -> tuple[str, ...]:
    words = _strings(value)
    if not words:
        raise ValueError("exec must be a non-empty list of words")
    return words


def _strings(value: object) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise TypeError("expected a list of strings")
    return tuple(value)


def _env(value: object) -> dict[str, str]:
    if not isinstance(value, dict):
        raise TypeError("env must be a table")
    env = {str(k): str(v) for k, v in value.items()}
    if bad := [k for k in env if not _ENV_NAME_RE.fullmatch(k)]:
        raise ValueError(f"bad environment variable name {bad[0]!r}")
    return env


def choose(profiles: Mapping[str, Profile], name: object) -> Profile:
    """The profile a start names; unknown → ``invalid_args``, unavailable → ``unavailable``."""
    if not isinstance(name, str) or name not in profiles:
        known = ", ".join(sorted(profiles))
        raise InvalidArgs("profile", f"unknown profile {str(name)[:40]!r}; this relay has {known}")
    profile = profiles[name]
    if missing := profile.missing():
        raise OpError(
            ErrorCode.UNAVAILABLE,
            f"profile {name!r} is unavailable on this relay: missing {', '.join(missing)} "
            "(scripts/install installs them)",
            {"field": "profile", "missing": missing},
        )
    return profile
