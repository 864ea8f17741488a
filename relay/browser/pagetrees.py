"""The pages' accessibility trees, read from the browser again only when the page changed.

``Accessibility.getFullAXTree`` is most of a snapshot's time (the browser computes the whole
page's tree: 0.3 to 0.6 s for 1,600 nodes on a loaded 2-core machine), and turning it into an
answer most of the rest. So the relay keeps each tab's last tree, and the answers rendered from
it, with the page's *state* when it was read: its address, title and readiness, a count of
what may change its tree (DOM mutations, seen by a ``MutationObserver`` the relay places once
per document, and ``input``, ``change``, focus, pointer-over, transition, animation and
``toggle`` events, which change states without a mutation) and a hash of its form fields'
values and checks (a script may set them without any event). The state is one small
expression in the page; while it is what it was, the kept tree is the page's tree, and a
kept answer is handed out again under a new snapshot's refs.

What it cannot see: a change of the tree with none of these (a CSS animation without its end
event, a frame's own document); those show at the next mutation or event, as they would a
moment later on the screen.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Final

from relay.browser.snapshot import Element, Snapshot, Tree
from relay.browser.tabs import Browser
from wire.errors import OpError

TABS_KEPT: Final = 8
RENDERS_KEPT: Final = 4
PAGE_STATE: Final = (
    "(()=>{const k='__relaydeskTree';"
    "if(!window[k]){const c={n:0};Object.defineProperty(window,k,{value:c});"
    "const bump=()=>{c.n++;};"
    "new MutationObserver(r=>{c.n+=r.length;}).observe(document,"
    "{subtree:true,childList:true,attributes:true,characterData:true});"
    "for(const e of ['input','change','focusin','focusout','mouseover','mouseout',"
    "'transitionend','animationend','toggle']){"
    "addEventListener(e,bump,{capture:true,passive:true});}}"
    "let h=0;for(const f of document.querySelectorAll('input,textarea,select')){"
    "const v=f.value+(f.checked?'\\u0001':'\\u0000');"
    "for(let i=0;i<v.length;i++){h=(Math.imul(h,31)+v.charCodeAt(i))|0;}}"
    "return [location.href,document.title,document.readyState,window[k].n,h];})()"
)
RenderKey = tuple[int, int, str, str]


@dataclass
class _Render:
    """An answer rendered from a kept tree: its snapshot's id and elements, and the answer."""

    snapshot_id: str
    elements: list[Element]
    result: dict[str, Any]


@dataclass
class _Kept:
    state: list[Any]
    tree: Tree
    renders: OrderedDict[RenderKey, _Render] = field(default_factory=OrderedDict)


@dataclass(frozen=True)
class PageTree:
    """A tab's tree and the page's state it was read in (``url``, ``title``)."""

    tree: Tree
    state: list[Any] | None

    @property
    def url(self) -> str | None:
        return str(self.state[0]) if self.state else None

    @property
    def title(self) -> str | None:
        return str(self.state[1]) if self.state else None


class PageTrees:
    """The last tree of each of the last ``TABS_KEPT`` tabs used."""

    def __init__(self) -> None:
        self._kept: OrderedDict[str, _Kept] = OrderedDict()

    async def tree(self, browser: Browser, tab: str) -> PageTree:
        """The tab's tree: the kept one while the page's state is unchanged, else read."""
        try:
            state = await browser.evaluate(tab, PAGE_STATE)
        except OpError:  # no document to ask (navigating): read, keep nothing
            state = None
        kept = self._kept.get(tab)
        if state is not None and kept is not None and kept.state == state:
            self._kept.move_to_end(tab)
            return PageTree(kept.tree, state)
        tree = Tree.of(await browser.send(tab, "Accessibility.getFullAXTree"))
        if state is None:
            self._kept.pop(tab, None)
            return PageTree(tree, None)
        self._kept[tab] = _Kept(state, tree)
        self._kept.move_to_end(tab)
        while len(self._kept) > TABS_KEPT:
            self._kept.popitem(last=False)
        return PageTree(tree, state)

    def rendered(
        self, tab: str, page: PageTree, key: RenderKey, snapshot: Snapshot
    ) -> dict[str, Any] | None:
        """A kept answer for ``key`` of this very tree, under ``snapshot``'s refs; else None."""
        kept = self._kept.get(tab)
        if kept is None or kept.tree is not page.tree or key not in kept.renders:
            return None
        render = kept.renders[key]
        snapshot.elements = list(render.elements)
        old, new = f"@b{render.snapshot_id}:", f"@b{snapshot.id}:"
        result = dict(render.result, snapshot=snapshot.id)
        if "text" in result:
            result["text"] = result["text"].replace(old, new)
        if "elements" in result:
            result["elements"] = [
                dict(item, ref=str(item["ref"]).replace(old, new)) for item in result["elements"]
            ]
        return result

    def keep(
        self, tab: str, page: PageTree, key: RenderKey, snapshot: Snapshot, result: dict[str, Any]
    ) -> None:
        """Keep an answer rendered from ``page``'s tree (only while that tree is kept)."""
        kept = self._kept.get(tab)
        if kept is None or kept.tree is not page.tree:
            return
        kept.renders[key] = _Render(snapshot.id, list(snapshot.elements), result)
        while len(kept.renders) > RENDERS_KEPT:
            kept.renders.popitem(last=False)
