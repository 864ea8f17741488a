"""The example answers docs/http-api.md shows have the keys a real server answers with: a real
relay and a desktop running the tests' GTK form (an app on the accessibility bus), asked over
HTTP as an agent asks."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from tests.support.a11y_stack import FORM, A11yStack, a11y_stack
from tests.support.doc_blocks import documented_answer, key_paths
from tests.support.processes import scaled
from tests.support.stack import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[A11yStack]:
    async with a11y_stack(tmp_path_factory.mktemp("doc-answers"), [FORM]) as stack:
        await wait_until(lambda: stack.state() != {}, scaled(30), "the form to start")
        await stack.wait_app("a11y_app.py")
        yield stack


async def test_the_documented_desktop_apps_answer_has_the_real_answers_keys(stack):
    documented = documented_answer("http-api.md", "`desktop_apps`")
    real = await stack.ok("desktop_apps")
    assert real["running"] and real["launchable"], real
    assert key_paths(documented) == key_paths(real), (documented, real)
