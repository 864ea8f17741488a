"""The client is its own distribution: ``pip install ./clients/python`` in an empty virtualenv
gives ``relaydesk_client`` and nothing of the server, and the quick start of docs/http-api.md
runs from there, as written, against a real server, relay and desktop."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from tests.client.test_quickstart import PNG_MAGIC, quick_start_python
from tests.e2e.viewer_stack import ViewerStack, viewer_stack
from tests.support.processes import scaled

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parents[2]
SERVER_PACKAGES = ("server", "relay", "wire", "migrations", "host_helper", "relaydesk")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ViewerStack]:
    async with viewer_stack(tmp_path_factory.mktemp("client-install")) as stack:
        yield stack


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without the checkout on the path: only the virtualenv's packages."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    return {**env, "PYTHONNOUSERSITE": "1", **extra}


def run(argv: list[str], cwd: Path, timeout_s: float, **env: str) -> str:
    done = subprocess.run(
        argv,
        cwd=cwd,
        env=clean_env(**env),
        capture_output=True,
        text=True,
        timeout=scaled(timeout_s),
        check=False,
    )
    assert done.returncode == 0, f"{argv}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def client_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An empty virtualenv with ``./clients/python`` installed (pinned by constraints.txt)."""
    venv = tmp_path_factory.mktemp("client-venv") / "venv"
    run([sys.executable, "-m", "venv", str(venv)], venv.parent, 120)
    python = venv / "bin" / "python"
    constraints = str(REPO_ROOT / "constraints.txt")
    pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    run([*pip, "-c", constraints, str(REPO_ROOT / "clients" / "python")], venv.parent, 300)
    return python


def test_it_installs_the_client_and_none_of_the_server(client_venv: Path) -> None:
    purelib = run(
        [str(client_venv), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        client_venv.parent,
        30,
    ).strip()
    names = {path.name for path in Path(purelib).iterdir()}
    assert "relaydesk_client" in names, sorted(names)
    assert not names & set(SERVER_PACKAGES), sorted(names & set(SERVER_PACKAGES))
    probe = (
        "import importlib.util, relaydesk_client; print(relaydesk_client.__file__); "
        f"print([n for n in {SERVER_PACKAGES!r} if importlib.util.find_spec(n)])"
    )
    where, found = run([str(client_venv), "-c", probe], client_venv.parent, 30).splitlines()
    assert where.startswith(purelib), where
    assert found == "[]", found


@pytest.mark.asyncio(loop_scope="module")
async def test_the_quick_start_runs_from_the_client_alone(
    stack: ViewerStack, client_venv: Path, tmp_path: Path
) -> None:
    script = tmp_path / "quickstart.py"
    script.write_text(quick_start_python())
    env = {"RELAYDESK_SERVER_URL": stack.url, "RELAYDESK_API_TOKEN": stack.seed.api_token}
    out = await asyncio.to_thread(run, [str(client_venv), str(script)], tmp_path, 120, **env)

    assert "watch it:" in out, out
    assert (tmp_path / "screen.png").read_bytes().startswith(PNG_MAGIC)
    audit = [row.op for row in await stack.app.state.parts.store.list_audit()]
    for op in ("start", "screen.screenshot", "screen.click", "screen.type", "screen.key"):
        assert any(name.endswith(op) for name in audit), (op, audit)
    live = await stack.action("desktop_list_active")
    assert live["desktops"] == []  # the quick start started its desktop, and stopped it
