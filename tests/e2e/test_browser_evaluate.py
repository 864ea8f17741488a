"""``browser_evaluate`` on a relay started with RELAYDESK_BROWSER_EVALUATE=1: a page's values
come back as JSON, a throw is an error, and it is agent input like any act."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
import pytest_asyncio

from tests.support.a11y_stack import A11yStack
from tests.support.browser_stack import browser_stack, form_tab_shown, page_server

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="module")]


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    with page_server() as url:
        yield url


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(
    tmp_path_factory: pytest.TempPathFactory, base_url: str
) -> AsyncIterator[A11yStack]:
    env = {"RELAYDESK_BROWSER_EVALUATE": "1"}
    async with browser_stack(tmp_path_factory.mktemp("evaluate"), base_url, env=env) as stack:
        await form_tab_shown(stack)
        yield stack


async def test_values_come_back_as_json(stack):
    assert (await stack.ok("browser_evaluate", expression="document.title"))["value"] == (
        "Order form"
    )
    rows = await stack.ok("browser_evaluate", expression="document.querySelectorAll('tr').length")
    assert rows["value"] == 61
    awaited = await stack.ok("browser_evaluate", expression="Promise.resolve({a: [1, 2]})")
    assert awaited["value"] == {"a": [1, 2]}


async def test_a_throw_is_an_error_and_a_long_expression_is_refused(stack):
    status, body = await stack.act("browser_evaluate", expression="nope.nothing")
    assert (status, body["error"]["code"]) == (422, "action_failed"), body
    status, body = await stack.act("browser_evaluate", expression="1;" * 60_000)
    assert (status, body["error"]["field"]) == (400, "expression"), body


async def test_evaluate_waits_for_a_person_to_hand_back(stack):
    await stack.ok("desktop_take_control", person=True)
    try:
        status, body = await stack.act("browser_evaluate", expression="1")
        assert (status, body["error"]["code"]) == (423, "takeover_active"), body
    finally:
        await stack.ok("desktop_hand_back", person=True)
    assert (await stack.ok("browser_evaluate", expression="6 * 7"))["value"] == 42
