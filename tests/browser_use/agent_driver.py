"""browser-use's Agent on a relaydesk desktop's browser, configured as
examples/browser_use_agent.py configures it, with a scripted model (run under .venv-browser-use).

The model is the one seam faked: no model service is reachable here. It reads the browser
state browser-use sends it, as a model would, and answers browser-use's own action format:
open the page, type a name into the customer field, press the order button, then report
whether the page says the order was placed. Everything else is browser-use's own code
talking CDP to relaydesk's endpoint.

  agent_driver.py SERVER CONVERSATION RELAY PAGE_URL     (RELAYDESK_API_TOKEN in the env)

Prints one JSON line: the agent's final answer, whether it succeeded, the actions it ran, and
the errors browser-use recorded.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))

from browser_use import Agent
from browser_use.llm.views import ChatInvokeCompletion
from browser_use_agent import relaydesk_browser

NAME = "Ada"


class ScriptedModel:
    """browser-use's chat model protocol, answered from the state it is shown."""

    model = provider = name = model_name = "scripted"

    def __init__(self, page: str) -> None:
        self.page = page
        self.step = 0

    async def ainvoke(
        self, messages: list[Any], output_format: Any = None, **_: Any
    ) -> ChatInvokeCompletion[Any]:
        state = "\n".join(str(getattr(m, "text", "") or "") for m in messages)
        self.step += 1
        if self.step == 1:
            actions: list[dict[str, Any]] = [{"navigate": {"url": self.page}}]
        elif self.step == 2:
            field = _index(state, r"\[(\d+)\]<input[^\n]*customer")
            actions = [{"input": {"index": field, "text": NAME}}]
        elif self.step == 3:
            actions = [{"click": {"index": _index(state, r"\[(\d+)\]<button[^\n]*submit")}}]
        else:
            placed = f"Ordered: {NAME}" in state
            actions = [{"done": {"text": "placed" if placed else "not placed", "success": placed}}]
        answer = {"thinking": "", "evaluation_previous_goal": "", "memory": "", "next_goal": ""}
        answer = {k: v for k, v in answer.items() if k in output_format.model_fields}
        completion = output_format.model_validate(answer | {"action": actions})
        return ChatInvokeCompletion(completion=completion, usage=None)


def _index(state: str, pattern: str) -> int:
    found = re.search(pattern, state)
    if found is None:
        raise RuntimeError(f"{pattern} is not in the state shown:\n{state[-2000:]}")
    return int(found.group(1))


async def main(server: str, conversation: str, relay: str, page: str) -> None:
    token = os.environ["RELAYDESK_API_TOKEN"]
    session = relaydesk_browser(server, conversation, relay, token)
    agent = Agent(
        task=f"Place an order for {NAME}",
        llm=ScriptedModel(page),
        browser_session=session,
        use_vision=False,
        use_judge=False,
    )
    history = await agent.run(max_steps=6)
    actions = [next(iter(a)) for a in history.model_actions()]
    errors = [e for e in history.errors() if e]
    line = {
        "final": history.final_result(),
        "success": history.is_successful(),
        "actions": actions,
        "errors": errors,
    }
    print(json.dumps(line), flush=True)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
