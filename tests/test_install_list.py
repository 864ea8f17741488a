"""``scripts/install`` provides every program, GObject typelib and system Python module that the
code and the tests load: each comes from a Debian package the script names, from a package one
of those depends on, or from an essential package. A machine where something was installed by
hand passes the suite; a fresh one would not — this test is what catches it here.

Programs are found two ways: by the patterns the code uses to name them (``shutil.which("…")``,
``binary: str = "…"`` settings, ``gi.require_version``) and from ``LAUNCHED`` below, the
programs started by argument vector.
"""

from __future__ import annotations

import functools
import glob
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parent.parent
SOURCES = ("relay", "server", "host_helper", "relaydesk", "wire", "tests", "benchmarks")

# Started by argument vector in relay/, tests/support/ and benchmarks/ (the patterns below find
# the rest). Keep in step with what the code starts.
LAUNCHED = {
    "Xvfb",
    "x11vnc",
    "openbox",
    "xterm",
    "autocutsel",
    "dbus-daemon",
    "pulseaudio",
    "pacat",
    "xdotool",
    "xclip",
    "wmctrl",
    "xwininfo",
    "xprop",
    "sox",
    "redis-server",
    "haproxy",
    "tint2",
    "jgmenu",
    "hsetroot",
    "pcmanfm",
    "mousepad",
    "gtk3-demo",
    "setpriv",
    "runuser",
    "useradd",
    "initdb",
    "pg_ctl",
    "postgres",
    "docker",
    "debootstrap",
    "criu",
    "unshare",
    "setsid",
    "node",
    "npm",
}
# Programs found by pattern that are optional choices, never required (screenshot helpers the
# code detects, other people's agents named in examples).
OPTIONAL = {
    "uv",
    "xv",
    "xdg-open",
    "wl-paste",
    "spectacle",
    "rustc",
    "keyring",
    "grim",
    "gnome-screenshot",
    "gm",
    "eog",
    "display",
    "npx",
    "gemini",
    "claude",
    "brave-browser",
}
# Modules the accessibility worker and test apps import from the system's Python.
SYSTEM_MODULES = {"gi": "python3-gi", "PyQt5": "python3-pyqt5"}

_WHICH = re.compile(r"""which\(\s*["']([\w.+-]+)["']\s*\)""")
_BINARY = re.compile(r"""\bbinary:\s*str\s*=\s*["']([\w.+-]+)["']""")
_TYPELIB = re.compile(r"""require_version\(\s*["'](\w+)["']\s*,\s*["']([\d.]+)["']\s*\)""")


def _source_text() -> str:
    files = [p for top in SOURCES for p in (REPO / top).rglob("*.py")]
    return "\n".join(p.read_text(encoding="utf-8", errors="replace") for p in files)


def named_packages() -> set[str]:
    """Every package ``scripts/install`` may install (its arrays, comments dropped)."""
    script = (REPO / "scripts" / "install").read_text(encoding="utf-8")
    body = script.split("system_packages=(", 1)[1].split("\n)\n", 1)[0]
    names = {w for line in body.splitlines() for w in line.split("#", 1)[0].split()}
    names.update(re.findall(r"wanted\+=\(([\w.+-]+)\)", script))
    names.update(re.findall(r"python_packages=\(([^)]*)\)", script)[0].split())
    return names


@functools.cache
def provided_packages() -> frozenset[str]:
    """Named packages, what they depend on (recursively), and the essential ones."""
    listing = subprocess.run(
        ["dpkg-query", "-W", "-f=${Package}\t${Depends},${Pre-Depends}\t${Essential}\n"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    depends: dict[str, list[str]] = {}
    seen: set[str] = set()
    for line in listing.splitlines():
        name, needs, essential = line.split("\t")
        alternatives = needs.replace("|", ",").split(",")
        depends[name] = [a.strip().split(" ", 1)[0].split(":", 1)[0] for a in alternatives]
        if essential == "yes":
            seen.add(name)
    todo = list(named_packages())
    while todo:
        name = todo.pop()
        if name and name not in seen:
            seen.add(name)
            todo.extend(depends.get(name, []))
    return frozenset(seen)


def owners(paths: list[str]) -> dict[str, str]:
    """The Debian package that installed each path (merged-/usr spellings tried), one query."""
    spellings: dict[str, str] = {}
    for path in paths:
        for p in (path, os.path.realpath(path)):
            spellings[p] = path
            spellings[p.removeprefix("/usr") if p.startswith("/usr/") else "/usr" + p] = path
    done = subprocess.run(["dpkg", "-S", *spellings], capture_output=True, text=True)
    found: dict[str, str] = {}
    for line in done.stdout.splitlines():
        package, _, spelled = line.partition(": ")
        if spelled in spellings and not package.startswith("diversion"):
            found.setdefault(spellings[spelled], package.split(",")[0].split(":")[0].strip())
    return found


def find_program(name: str) -> str | None:
    found = shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin")
    if found is None:
        found = next(iter(sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))), None)
    return found


def programs() -> set[str]:
    text = _source_text()
    return (LAUNCHED | set(_WHICH.findall(text)) | set(_BINARY.findall(text))) - OPTIONAL


def typelibs() -> set[str]:
    return {f"{name}-{version}.typelib" for name, version in _TYPELIB.findall(_source_text())}


def test_every_program_comes_from_a_package_the_install_script_provides() -> None:
    located = {name: find_program(name) for name in sorted(programs())}
    packages = owners([path for path in located.values() if path])
    problems = []
    for name, path in located.items():
        if path is None:
            problems.append(f"{name}: not installed")
        elif path in packages and packages[path] not in provided_packages():
            problems.append(f"{name}: from {packages[path]}, which scripts/install does not name")
        # a path no package owns comes from the virtualenv or npm, installed from their locks
    assert not problems, "add these to scripts/install:\n" + "\n".join(problems)


def test_every_typelib_comes_from_a_package_the_install_script_provides() -> None:
    assert typelibs() >= {"Atspi-2.0.typelib", "Gtk-3.0.typelib"}
    found = {t: glob.glob(f"/usr/lib/*/girepository-1.0/{t}") for t in sorted(typelibs())}
    packages = owners([paths[0] for paths in found.values() if paths])
    problems = [
        f"{typelib}: {packages.get(paths[0]) if paths else 'not installed'}"
        for typelib, paths in found.items()
        if not paths or packages.get(paths[0]) not in provided_packages()
    ]
    assert not problems, "add these typelibs' packages to scripts/install:\n" + "\n".join(problems)


@pytest.mark.parametrize(("module", "package"), sorted(SYSTEM_MODULES.items()))
def test_system_python_modules_come_from_named_packages(module: str, package: str) -> None:
    assert package in named_packages()
    done = subprocess.run(
        ["/usr/bin/python3", "-c", f"import {module}; print({module}.__file__)"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    path = done.stdout.strip()
    assert owners([path]).get(path) in provided_packages()


def test_the_patterns_find_what_the_code_names() -> None:
    """The scan is not empty by accident: it finds settings and checks the code has today."""
    found = programs()
    assert {"Xvfb", "x11vnc", "pulseaudio", "dbus-daemon", "haproxy"} <= found
    assert "gi" in _source_text() and "PyQt5" in _source_text()
