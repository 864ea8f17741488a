"""A complete computer-use loop with Anthropic's SDK over relaydesk's Anthropic door.

The model gets relaydesk's ``computer`` tool definition as it is, and every ``tool_use`` block
it answers with goes to the door verbatim; the door's answer is the ``tool_result``. relaydesk
scales the screenshots, maps the clicks back, guards them with the last screenshot and says
whether each input took effect (docs/computer-use.md).

  # with examples/computer_use_door.py beside this file
  pip install anthropic                 # the official SDK (not installed with relaydesk)
  export ANTHROPIC_API_KEY=...  RELAYDESK_API_TOKEN=rdk_...
  python examples/anthropic_agent.py --server http://127.0.0.1:8400 --conversation ID \\
      --relay relay-1 "Open the editor, write a haiku and save it"

Exit status: 0 the model finished; 1 relaydesk refused a call or the turns ran out.
"""

from __future__ import annotations

import sys
from typing import Any, cast

import anthropic
from computer_use_door import ComputerUseDoor, command_line

MODEL = "claude-sonnet-5-5"
MAX_TOKENS = 2048


class Door(ComputerUseDoor):
    """relaydesk's Anthropic door for one desktop."""

    VENDOR = "anthropic"

    def tool(self) -> tuple[dict[str, Any], str]:
        """The tool definition to send the model, and the beta flag it needs."""
        response = self.tool_response()
        return response.json(), response.headers["x-anthropic-beta"]


def run(
    client: anthropic.Anthropic, door: Door, task: str, *, model: str = MODEL, max_turns: int = 30
) -> str:
    """The loop: ask, run every tool call on the desktop, answer with the results, until the
    model stops asking. Returns the model's last words."""
    tool, beta = door.tool()
    messages: list[dict[str, Any]] = [{"role": "user", "content": task}]
    for _ in range(max_turns):
        reply = client.beta.messages.create(
            model=model,
            max_tokens=MAX_TOKENS,
            tools=[cast(Any, tool)],
            messages=cast(Any, messages),
            betas=[beta],
        )
        messages.append({"role": "assistant", "content": [b.model_dump() for b in reply.content]})
        calls = [block for block in reply.content if block.type == "tool_use"]
        if not calls:
            return " ".join(b.text for b in reply.content if b.type == "text")
        results = []
        for block in calls:
            answer = door.call(dict(block.input))
            print(f"{block.input.get('action')}: {_said(answer)}", file=sys.stderr)
            results.append(
                {
                    "type": "tool_result",
                    "tool_use_id": block.id,
                    "content": answer["content"],
                    "is_error": answer["is_error"],
                }
            )
        messages.append({"role": "user", "content": results})
    raise SystemExit("the model did not finish within the turns allowed")


def _said(answer: dict[str, Any]) -> str:
    texts = [b["text"] for b in answer.get("content", []) if b.get("type") == "text"]
    images = sum(1 for b in answer.get("content", []) if b.get("type") == "image")
    return " ".join(texts) + (f" [{images} image]" if images else "")


def main() -> None:
    args, token = command_line(__doc__.split("\n")[0], MODEL)
    door = Door(args.server, args.conversation, args.relay, token, slot=args.slot)
    print(run(anthropic.Anthropic(), door, args.task, model=args.model))


if __name__ == "__main__":
    main()
