"""A complete computer-use loop with OpenAI's SDK over relaydesk's OpenAI door.

The model gets relaydesk's computer-use tool definition as it is, and every ``computer_call``
it answers with goes to the door verbatim; the door's answer is the ``computer_call_output``
(with a screenshot of the desktop after the action). relaydesk maps the clicks back from the
display, guards them with the last screenshot and refuses to run a call that carries
``pending_safety_checks``: those are for a person to decide (docs/computer-use.md).

  # with examples/computer_use_door.py beside this file
  pip install openai                    # the official SDK (not installed with relaydesk)
  export OPENAI_API_KEY=...  RELAYDESK_API_TOKEN=rdk_...
  python examples/openai_agent.py --server http://127.0.0.1:8400 --conversation ID \\
      --relay relay-1 "Open the editor, write a haiku and save it"
"""

from __future__ import annotations

import sys
from typing import Any, cast

import openai
from computer_use_door import ComputerUseDoor, command_line

MODEL = "computer-use-preview"


class Door(ComputerUseDoor):
    """relaydesk's OpenAI door for one desktop."""

    VENDOR = "openai"

    def tool(self) -> dict[str, Any]:
        return dict(self.tool_response().json())


def run(
    client: openai.OpenAI, door: Door, task: str, *, model: str = MODEL, max_turns: int = 30
) -> str:
    """The loop: ask, run every computer_call on the desktop, answer with its output, until the
    model stops calling. Returns the model's last words."""
    tool = door.tool()
    response = client.responses.create(
        model=model,
        tools=[cast(Any, tool)],
        truncation="auto",
        input=cast(Any, [{"role": "user", "content": task}]),
    )
    for _ in range(max_turns):
        calls = [item for item in response.output if item.type == "computer_call"]
        if not calls:
            return str(response.output_text)
        outputs: list[dict[str, Any]] = []
        for item in calls:
            answer = door.call(item.model_dump(exclude_none=True))
            if answer.get("is_error"):
                # A refusal: tell the model in words (a computer_call_output carries no text).
                print(f"refused: {answer.get('message') or answer.get('error')}", file=sys.stderr)
                raise SystemExit(1)
            print(f"{item.action.type if item.action else 'actions'}: ok", file=sys.stderr)
            outputs.append(answer)
        response = client.responses.create(
            model=model,
            tools=[cast(Any, tool)],
            truncation="auto",
            previous_response_id=response.id,
            input=cast(Any, outputs),
        )
    raise SystemExit("the model did not finish within the turns allowed")


def main() -> None:
    args, token = command_line(__doc__.split("\n")[0], MODEL)
    door = Door(args.server, args.conversation, args.relay, token, slot=args.slot)
    print(run(openai.OpenAI(), door, args.task, model=args.model))


if __name__ == "__main__":
    main()
