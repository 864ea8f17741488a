"""What the CDP endpoint lets through, sorted by method name (wire.cdp_methods)."""

from __future__ import annotations

import pytest

from wire import cdp_methods

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("method", "kind"),
    [
        ("Browser.close", "refused"),
        ("Browser.crash", "refused"),
        ("Page.crash", "refused"),
        ("Target.disposeBrowserContext", "refused"),
        ("Runtime.evaluate", "script"),
        ("Runtime.callFunctionOn", "script"),
        ("Page.addScriptToEvaluateOnNewDocument", "script"),
        ("Input.dispatchMouseEvent", "acts"),
        ("Input.insertText", "acts"),
        ("Input.someMethodOfTomorrow", "acts"),
        ("Page.navigate", "acts"),
        ("Page.close", "acts"),
        ("Target.closeTarget", "acts"),
        ("DOM.setFileInputFiles", "acts"),
        ("Page.captureScreenshot", "reads"),
        ("Accessibility.getFullAXTree", "reads"),
        ("DOM.getDocument", "reads"),
        ("Target.setAutoAttach", "reads"),
        ("Browser.setDownloadBehavior", "reads"),
    ],
)
def test_each_method_is_sorted(method: str, kind: str) -> None:
    assert cdp_methods.kind_of(method) == kind


def test_closing_a_tab_acts_and_is_checked_for_the_last_tab() -> None:
    for method in cdp_methods.CLOSES_TAB:
        assert cdp_methods.kind_of(method) == "acts"


def test_an_error_answer_keeps_the_clients_id_and_session() -> None:
    assert cdp_methods.error_answer(7, "S1", "takeover_active: a person") == {
        "id": 7,
        "error": {"code": -32000, "message": "takeover_active: a person"},
        "sessionId": "S1",
    }
    assert "sessionId" not in cdp_methods.error_answer(8, None, "forbidden")
