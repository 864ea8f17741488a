"""What a CDP client of the browser endpoint may send (docs/browser.md, "The CDP endpoint").

Pure tables, read by the server (the control gate, the refusals) and by the relay (script
calls, the last tab). ``kind_of`` sorts one method name:

- ``refused``: it would end the browser or take the relay's own hold of it away;
- ``script``: it runs the caller's script in a page: the relay answers it only with
  ``RELAYDESK_BROWSER_EVALUATE=1``. It does not pass the control gate: a client's reads
  (screenshots, text, locators) are script calls, and a read or a write cannot be told apart
  by the method;
- ``acts``: input, navigation, DOM and target changes: the control gate first;
- ``reads``: everything else (snapshots, screenshots, DOM reads, events).
"""

from __future__ import annotations

from typing import Final, Literal

MethodKind = Literal["refused", "script", "acts", "reads"]

# A client message larger than this closes the connection (Playwright's injected script,
# the largest message it sends, is well under 1 MiB).
MAX_CLIENT_MESSAGE: Final = 8 * 1024 * 1024
# Where downloads go: the relay keeps the desktop's own (``~/Downloads``, saved under their names)
# and passes on only whether the client hears download events.
DOWNLOAD_BEHAVIOR: Final = "Browser.setDownloadBehavior"
# Methods that close a tab: the relay refuses them for the browser's last tab.
CLOSES_TAB: Final = frozenset({"Target.closeTarget", "Page.close"})
# A CDP error answer's code (JSON-RPC "server error").
ERROR_CODE: Final = -32000

REFUSED: Final = frozenset(
    {
        "Browser.close",
        "Browser.crash",
        "Browser.crashGpuProcess",
        "Page.crash",
        "Target.disposeBrowserContext",
        "Target.exposeDevToolsProtocol",
        "Target.setRemoteLocations",
        "Tethering.bind",
        "SystemInfo.getProcessInfo",
    }
)
SCRIPT: Final = frozenset(
    {
        "Runtime.evaluate",
        "Runtime.callFunctionOn",
        "Runtime.compileScript",
        "Runtime.runScript",
        "Runtime.addBinding",
        "Page.addScriptToEvaluateOnNewDocument",
        "Page.createIsolatedWorld",
        "Debugger.evaluateOnCallFrame",
        "Debugger.setScriptSource",
    }
)
# Whole domains that act on the page or the browser.
ACTING_DOMAINS: Final = frozenset({"Input"})
ACTS: Final = frozenset(
    {
        "Page.navigate",
        "Page.reload",
        "Page.navigateToHistoryEntry",
        "Page.stopLoading",
        "Page.setDocumentContent",
        "Page.handleJavaScriptDialog",
        "Page.bringToFront",
        "Page.setInterceptFileChooserDialog",
        "Target.createTarget",
        "Target.closeTarget",
        "Page.close",
        "Target.activateTarget",
        "DOM.setAttributeValue",
        "DOM.setAttributesAsText",
        "DOM.removeAttribute",
        "DOM.setNodeValue",
        "DOM.setOuterHTML",
        "DOM.setNodeName",
        "DOM.removeNode",
        "DOM.moveTo",
        "DOM.copyTo",
        "DOM.setFileInputFiles",
        "DOM.focus",
        "DOM.undo",
        "DOM.redo",
        "CSS.setStyleTexts",
        "CSS.addRule",
        "Storage.clearDataForOrigin",
        "Storage.clearCookies",
        "Network.clearBrowserCookies",
        "Network.deleteCookies",
        "Network.setCookie",
        "Network.setCookies",
    }
)


def kind_of(method: str) -> MethodKind:
    """How the endpoint treats ``method``."""
    if method in REFUSED:
        return "refused"
    if method in SCRIPT:
        return "script"
    if method in ACTS or method.partition(".")[0] in ACTING_DOMAINS:
        return "acts"
    return "reads"


def error_answer(message_id: object, session_id: object, message: str) -> dict[str, object]:
    """A CDP error answer to the client's message ``message_id``."""
    answer: dict[str, object] = {
        "id": message_id,
        "error": {"code": ERROR_CODE, "message": message},
    }
    if isinstance(session_id, str):
        answer["sessionId"] = session_id
    return answer
