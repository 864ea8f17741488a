"""browser-use's Agent drives the browser a person watches in a relaydesk desktop, through the
server.

:func:`relaydesk_browser` is the whole configuration: browser-use's ``BrowserSession`` pointed
at the desktop's CDP endpoint (docs/browser.md, "The CDP endpoint") with an API token. The
page the agent works on is the one showing in the desktop's Chromium: the person watching the
viewer sees every step and can take control at any time (the agent's input is then refused
with ``takeover_active``; Stop closes its connection). ``no_viewport``: the agent leaves the
window's size as the person has it (browser-use would otherwise emulate a 1920x1080 page in
the person's browser). Needs ``pip install browser-use`` (Python >= 3.11; no browser download:
the browser is the desktop's), a model key for browser-use's chat model, and a relay started
with ``RELAYDESK_BROWSER_EVALUATE=1`` (browser-use runs its own script in the page).

  export RELAYDESK_API_TOKEN=rdk_... ANTHROPIC_API_KEY=...
  python examples/browser_use_agent.py --server http://127.0.0.1:8400 --conversation ID \\
      --relay RELAY --task "Order one item for Ada on http://example.test/form.html"

Prints the agent's final answer. Exit status: 0 the agent says it succeeded; 1 it did not, or
the server refused; 2 bad usage.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import Any

from browser_use import Agent, BrowserSession


def endpoint(server: str, conversation: str, relay: str, kind: str, slot: str) -> str:
    """The desktop's CDP endpoint (an http(s) URL: browser-use reads /json/version first)."""
    return f"{server.rstrip('/')}/api/v1/conversations/{conversation}/cdp/{relay}/{kind}/{slot}"


def relaydesk_browser(
    server: str,
    conversation: str,
    relay: str,
    token: str,
    kind: str = "virtual",
    slot: str = "main",
) -> BrowserSession:
    """browser-use's session on the desktop's own browser, through relaydesk."""
    return BrowserSession(
        cdp_url=endpoint(server, conversation, relay, kind, slot),
        headers={"Authorization": f"Bearer {token}"},
        keep_alive=False,  # the agent's end disconnects; the desktop's browser stays open
        no_viewport=True,
    )


def chat_model(name: str) -> Any:
    """browser-use's chat model for ``name`` (``claude-…`` or ``gpt-…``)."""
    if name.startswith("claude"):
        from browser_use import ChatAnthropic

        return ChatAnthropic(model=name)
    from browser_use import ChatOpenAI

    return ChatOpenAI(model=name)


async def run(args: argparse.Namespace, token: str) -> bool:
    session = relaydesk_browser(
        args.server, args.conversation, args.relay, token, args.kind, args.slot
    )
    agent = Agent(task=args.task, llm=chat_model(args.model), browser_session=session)
    history = await agent.run(max_steps=args.max_steps)
    print(history.final_result() or "")
    return bool(history.is_successful())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", required=True, help="relaydesk's address")
    parser.add_argument("--conversation", required=True, help="the desktop's conversation id")
    parser.add_argument("--relay", required=True, help="the relay running the desktop")
    parser.add_argument("--kind", default="virtual", help="the desktop's kind (virtual)")
    parser.add_argument("--slot", default="main", help="the desktop's slot (main)")
    parser.add_argument("--task", required=True, help="what the agent should do")
    parser.add_argument("--model", default="claude-sonnet-4-5", help="claude-… or gpt-…")
    parser.add_argument("--max-steps", type=int, default=25, help="the agent's step budget")
    args = parser.parse_args()
    token = os.environ.get("RELAYDESK_API_TOKEN")
    if not token:
        print("set RELAYDESK_API_TOKEN to an API token of the conversation", file=sys.stderr)
        return 2
    try:
        return 0 if asyncio.run(run(args, token)) else 1
    except Exception as err:  # the server's refusal, a model error: said, not a traceback
        print(f"failed: {type(err).__name__}: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
