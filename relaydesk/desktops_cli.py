"""``relaydesk desktops list|stop``: desktops through the server's HTTP API, like the dock.

Every call is a typed action with an API token, so it passes the same roles, audit and
compare-and-stop as the web UI and agents. Exit status: 0 done, 1 refused or failed (the
message says why), 2 bad usage.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from relaydesk import tables
from wire.errors import ErrorCode, RelaydeskError

# The HTTP client (httpx) is imported when a command runs: every `relaydesk relay` start parses
# this command line too, and would otherwise import it for nothing.
if TYPE_CHECKING:
    from relaydesk.client import DesktopRow, RelaydeskClient
    from relaydesk.saved import SavedClient

# The names relaydesk_client.settings defines (importing it here would import httpx).
TOKEN_ENV = "RELAYDESK_API_TOKEN"  # noqa: S105 - a variable's name
SERVER_ENV = "RELAYDESK_SERVER_URL"


def _say_deprecated(message: str) -> None:
    print(f"relaydesk: {message}", file=sys.stderr)


def env(name: str) -> str:
    """A setting from the environment; a former name still works and is named on stderr."""
    from relaydesk_client.settings import env_setting

    return env_setting(name, warn=_say_deprecated)


class UsageError(RelaydeskError):
    """The command cannot run as given; the message says what to change."""

    code = ErrorCode.INVALID_ARGS


def add_desktops(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "desktops",
        help="list and stop desktops through the server's API (needs an API token)",
        description="List and stop desktops the way the dock does: through the server's HTTP "
        f"API with an API token (--token-file, or {TOKEN_ENV}; `relaydesk admin create-token "
        "USER` makes one), under the same roles, audit and compare-and-stop.",
    )
    dsub = p.add_subparsers(dest="desktops_command", required=True, metavar="COMMAND")
    li = dsub.add_parser(
        "list",
        help="desktops running in a conversation",
        description="Desktops running in a conversation, as a table. With --pool: the warm "
        "pools of the conversation's relays instead (operators: an admin account's token).",
    )
    li.add_argument(
        "--pool",
        action="store_true",
        help="show each relay's warm pool instead (RELAYDESK_POOL on the relay): ready and "
        "starting desktops per profile, the pool's size and geometry, and how many starts it "
        "served (hits) or found empty (misses); needs an admin account's token",
    )
    _common(li)
    li.set_defaults(func=lambda args: _run_list(args))
    st = dsub.add_parser(
        "stop",
        help="stop the desktop in a relay's slot (only the session you name or see)",
        description="Stop the desktop in RELAY's SLOT. The stop names the session it saw (or "
        "--session): if a newer desktop took the slot meanwhile, nothing is stopped.",
    )
    st.add_argument("relay", help="relay name or id, as `desktops list` shows it")
    st.add_argument("slot", nargs="?", default="main", help="the desktop's slot (default main)")
    st.add_argument("--kind", default="virtual", help="virtual (default) or local")
    st.add_argument("--session", default=None, help="stop only this desktop_session_id")
    _common(st)
    st.set_defaults(func=lambda args: _run(_stop, args))


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--server",
        default=None,
        help=f"the server's URL ({SERVER_ENV}, else RELAYDESK_PUBLIC_URL, else the one "
        "relaydesk up saved in the data directory, else http://127.0.0.1:8400)",
    )
    p.add_argument("--token-file", default=None, help=f"file holding an API token ({TOKEN_ENV})")
    p.add_argument(
        "--conversation",
        default=None,
        help="conversation id (RELAYDESK_CONVERSATION_ID, else the one relaydesk up saved; "
        "may be left out when the token's user is in one conversation)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object (for scripts)")


def server_url(args: argparse.Namespace) -> str:
    """``--server``, else the environment, else where ``relaydesk up`` last served, else the
    local default."""
    saved = load_saved()
    return (
        args.server
        or env(SERVER_ENV)
        or os.environ.get("RELAYDESK_PUBLIC_URL")
        or (saved.server_url if saved else "")
        or "http://127.0.0.1:8400"
    )


def load_saved() -> SavedClient | None:
    """What ``relaydesk up`` saved under the data directory (``relaydesk.saved``)."""
    from relaydesk import saved

    return saved.load()


def saved_for(args: argparse.Namespace) -> SavedClient | None:
    """The saved settings when this command talks to the saved server (its token and
    conversation are never sent anywhere else)."""
    from relaydesk.saved import same_server

    saved = load_saved()
    return saved if saved is not None and same_server(server_url(args), saved) else None


def api_token(args: argparse.Namespace) -> str:
    """The API token from ``--token-file``, else ``RELAYDESK_API_TOKEN``, else the one
    ``relaydesk up`` saved for this server; ``UsageError`` if none."""
    if args.token_file:
        try:
            token = Path(args.token_file).read_text(encoding="utf-8").strip()
        except OSError as err:
            raise UsageError(f"--token-file {args.token_file}: {err.strerror}") from None
    else:
        token = env(TOKEN_ENV) or ((saved := saved_for(args)) and saved.api_token) or ""
    if not token:
        raise UsageError(
            f"no API token: use --token-file FILE or set {TOKEN_ENV} "
            "(relaydesk up saves one for its own server)"
        )
    return token


def _conversation(client: RelaydeskClient, args: argparse.Namespace) -> str:
    saved = saved_for(args)
    chosen = args.conversation or os.environ.get("RELAYDESK_CONVERSATION_ID")
    chosen = chosen or (saved.conversation_id if saved else None)
    if chosen:
        return str(chosen)
    conversations = client.conversations()
    if len(conversations) == 1:
        return conversations[0]["conversation_id"]
    names = ", ".join(f"{c['conversation_id']} ({c['title']})" for c in conversations)
    raise UsageError(f"name a conversation with --conversation: {names or 'none visible'}")


def _list(client: RelaydeskClient, args: argparse.Namespace) -> Any:
    return client.desktops(_conversation(client, args))


def _pools(client: RelaydeskClient, args: argparse.Namespace) -> Any:
    """One row per relay and profile of the conversation's warm pools."""
    pools = client.action("desktop_pool", _conversation(client, args))["pools"]
    if args.json:
        return pools
    return [
        {
            "relay": pool["relay"],
            "hits": pool["hits"],
            "misses": pool["misses"],
            "geometry": pool["geometry"],
            **entry,
        }
        for pool in pools
        for entry in pool["profiles"] or [{}]
    ]


def _run_list(args: argparse.Namespace) -> int:
    if args.pool:
        return run_api(_pools, args, lambda result: tables.render("pool", None, result))
    return _run(_list, args)


def _stop(client: RelaydeskClient, args: argparse.Namespace) -> Any:
    from relaydesk.client import ApiError

    conversation = _conversation(client, args)
    shared = client.get(f"/api/v1/conversations/{conversation}")["relays"]
    if not any(args.relay in (r["name"], r["relay_id"]) for r in shared):
        known = ", ".join(r["name"] for r in shared) or "none"
        raise ApiError(
            404,
            ErrorCode.RELAY_NOT_FOUND,
            f"no relay named {args.relay!r} is shared with this conversation; it has: {known}",
            {},
        )
    rows = client.desktops(conversation)
    row = next((r for r in rows if _is_target(r, args)), None)
    if row is None:
        raise ApiError(
            404,
            ErrorCode.NOT_RUNNING,
            f"no {args.kind} desktop is running in slot {args.slot!r} of relay {args.relay!r}",
            {},
        )
    target: DesktopRow = {**row, "desktop_session_id": args.session or row["desktop_session_id"]}
    stopped = client.stop(conversation, target)
    return {
        "stopped": stopped,
        "relay": row.get("relay_name", row["relay_id"]),
        "kind": row["kind"],
        "slot": row["slot"],
        "desktop_session_id": target["desktop_session_id"],
    }


def _is_target(row: DesktopRow, args: argparse.Namespace) -> bool:
    relay = args.relay in (row.get("relay_name"), row.get("relay_id"))
    return relay and (row.get("kind"), row.get("slot")) == (args.kind, args.slot)


def run_api(call: Any, args: argparse.Namespace, render: Callable[[Any], str]) -> int:
    """Run ``call(client, args)`` against the server; print its result (``--json``, or
    ``render``); exit 2 on bad usage, 1 with a one-line reason when it cannot be done."""
    import httpx

    from relaydesk.client import ApiError, RelaydeskClient

    try:
        with RelaydeskClient(server_url(args), api_token(args)) as client:
            result = call(client, args)
    except UsageError as err:
        print(f"relaydesk: {err}", file=sys.stderr)
        return 2
    except ApiError as err:
        print(f"relaydesk: {err.message} ({err.status} {err.code})", file=sys.stderr)
        return 1
    except httpx.HTTPError as err:
        print(f"relaydesk: cannot reach the server at {server_url(args)}: {err}", file=sys.stderr)
        return 1
    except OSError as err:  # a local file (relaydesk files)
        print(f"relaydesk: {err}", file=sys.stderr)
        return 1
    print(json.dumps(result, default=str) if args.json else render(result))
    return 0


def _run(call: Any, args: argparse.Namespace) -> int:
    return run_api(call, args, lambda result: tables.render("desktops", None, result))
