"""``relaydesk`` command line: ``up``, ``server``, ``relay``, ``host-helper``, ``db``, ``admin``,
``desktops``, ``files``, ``mcp``."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from relaydesk import admin_cli, desktops_cli, files_cli, logs, mcp_cli, recordings_cli

EPILOG = """\
Configuration comes from RELAYDESK_* environment variables (RELAYDESK_DATABASE_URL,
RELAYDESK_DATA_DIR, RELAYDESK_REDIS_URL, RELAYDESK_RELAY_TOKEN, ...); flags win over them.
See docs/configuration.md for the full list.
"""


def _add_up(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "up",
        help="all-in-one on this machine: server + relay + virtual desktops (SQLite)",
        description=(
            "Migrate a SQLite database under the data directory, create (once) an admin user, "
            "a conversation and a relay, start the server and a relay connected to it, and "
            "print the URL with a one-time login link. Ctrl-C stops both."
        ),
    )
    p.add_argument("--host", default=None, help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=None, help="port to bind (default 8400)")
    p.add_argument(
        "--keep-desktops",
        action="store_true",
        help="leave desktops running when relaydesk up stops (default: stop them)",
    )
    p.set_defaults(func=_cmd_up)


def _add_server(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "server",
        help="run the central server (HTTP API, web UI, relay endpoint)",
        description="Run the server. It migrates the database on start unless "
        "RELAYDESK_MIGRATE_ON_START=0. Binds loopback unless --host says otherwise.",
    )
    p.add_argument(
        "--host", default=None, help="address to bind (RELAYDESK_HOST, default 127.0.0.1)"
    )
    p.add_argument("--port", type=int, default=None, help="port (RELAYDESK_PORT, default 8400)")
    p.set_defaults(func=_cmd_server)


def _add_relay(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "relay",
        help="run a relay that dials out to a server and runs desktops",
        description="Connect to the server (reconnecting with backoff) and run desktops for it. "
        "The relay token comes from --token-file or RELAYDESK_RELAY_TOKEN.",
    )
    p.add_argument(
        "--server",
        default=None,
        help="server URL, e.g. https://desk.example.org (RELAYDESK_SERVER_URL)",
    )
    p.add_argument("--token-file", default=None, help="file holding the relay token")
    p.add_argument(
        "--stop-desktops-on-exit",
        action="store_true",
        help="stop this relay's desktops when it exits (default: leave them running; "
        "a restarted relay re-adopts them)",
    )
    p.set_defaults(func=_cmd_relay)


def _add_host_helper(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "host-helper",
        help="share this host's real screen with the local relay",
        description="Run the host helper. Every request must carry RELAYDESK_HOST_HELPER_TOKEN; "
        "it refuses to start without one. Binds loopback by default.",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8401, help="port (default 8401)")
    p.add_argument("--display", default=None, help="X display to share (default: $DISPLAY)")
    p.add_argument(
        "--allow-remote-desktop",
        action="store_true",
        help="allow the relay to share this screen (or RELAYDESK_ALLOW_REMOTE_DESKTOP=1); "
        "without it every start is refused",
    )
    p.add_argument(
        "--input-backend",
        metavar="NAME",
        default=os.environ.get("RELAYDESK_INPUT_BACKEND") or "xtest",
        help="how screen actions send input: xtest (X displays, the default) or pyautogui "
        "(a screen that is not an X display; needs pyautogui installed) "
        "(or RELAYDESK_INPUT_BACKEND)",
    )
    p.set_defaults(func=_cmd_host_helper)


def _add_db(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("db", help="database maintenance", description="Database maintenance.")
    dbsub = p.add_subparsers(dest="db_command", required=True, metavar="COMMAND")
    up = dbsub.add_parser(
        "upgrade",
        help="migrate the database to the newest schema",
        description="Apply every pending migration to RELAYDESK_DATABASE_URL (idempotent).",
    )
    up.set_defaults(func=_cmd_db_upgrade)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="relaydesk",
        description="Live Linux desktops in the browser for people and AI agents.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action=_VersionAction, help="print the version and exit")
    parser.add_argument("--log-level", default=None, help="debug, info, warning (default info)")
    parser.add_argument(
        "--log-format",
        choices=["text", "json"],
        default=None,
        help="log line format (RELAYDESK_LOG_FORMAT, default text)",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in (
        _add_up,
        _add_server,
        _add_relay,
        _add_host_helper,
        _add_db,
        admin_cli.add_admin,
        desktops_cli.add_desktops,
        files_cli.add_files,
        recordings_cli.add_recordings,
        mcp_cli.add_mcp,
    ):
        add(sub)
    return parser


def _cmd_up(args: argparse.Namespace) -> int:
    from relaydesk.up import run_up

    return run_up(args.host, args.port, keep_desktops=args.keep_desktops)


def _cmd_server(args: argparse.Namespace) -> int:
    from relaydesk.run import run_server

    return run_server(args.host, args.port)


def _cmd_relay(args: argparse.Namespace) -> int:
    from relaydesk.run import run_relay

    return run_relay(args.server, args.token_file, stop_desktops=args.stop_desktops_on_exit)


def _cmd_host_helper(args: argparse.Namespace) -> int:
    from relaydesk.run import run_host_helper

    return run_host_helper(
        args.host,
        args.port,
        args.display,
        allow_remote_desktop=args.allow_remote_desktop,
        input_backend=args.input_backend,
    )


class _VersionAction(argparse.Action):
    """``--version``, looked up only when asked: importlib.metadata reads every installed
    distribution, a cost every start of a relay or server would pay for nothing."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        print(f"relaydesk {version()}")
        parser.exit()


def version() -> str:
    """The installed relaydesk version."""
    import importlib.metadata

    try:
        return importlib.metadata.version("relaydesk")
    except importlib.metadata.PackageNotFoundError:
        from relay import __version__

        return __version__


def _cmd_db_upgrade(args: argparse.Namespace) -> int:
    from server.config import database_url_from_env
    from server.db.migrate import current_revision, head_revision, upgrade

    url = database_url_from_env()
    where = admin_cli.describe_database(url)
    before = asyncio.run(current_revision(url))
    asyncio.run(upgrade(url))
    after = head_revision()
    if before == after:
        print(f"database {where} is already at the newest schema ({after})", file=sys.stderr)
    else:
        print(f"database {where} upgraded from {before or 'empty'} to {after}", file=sys.stderr)
    return 0


# Files relaydesk creates (database, keys, state, logs, desktops' private files) are the
# running user's alone; directories made before this are tightened where they are opened.
PRIVATE_UMASK = 0o077


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    os.umask(PRIVATE_UMASK)
    logs.configure(args.command, args.log_level, args.log_format)
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        return func(args)
    except KeyboardInterrupt:
        return 130
