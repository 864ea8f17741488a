"""Bad input on every host helper route: a clear 4xx with ``error.code``, never a 500.

The routes are read from the helper's own router, so a new route is covered by itself. No
screen is needed: every input here is refused before a desktop or display is touched. The
helper runs in a background thread so hypothesis can drive it with a plain client.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from host_helper.app import build_app
from tests.host_helper.conftest import TOKEN, helper_config, running_helper
from tests.support.background import error_records, in_background_thread
from tests.support.examples import examples
from tests.support.processes import scaled
from wire.errors import ErrorCode

pytestmark = pytest.mark.unit

CODES = {code.value for code in ErrorCode}
AUTH = {"Authorization": f"Bearer {TOKEN}"}
NO_SCREEN = ":250"  # never started: a request that reached the screen would fail loudly
MALFORMED = st.one_of(
    # Anything but an object (an empty body reads as ``{}`` and reaches the handler).
    st.binary(min_size=1, max_size=300).filter(lambda b: not b.strip().startswith((b"{", b""))),
    st.integers(33, 100_000).map(lambda n: b"[" * n + b"]" * n),
    st.sampled_from(
        [
            b'{"x": 1' + b"0" * 5000 + b"}",
            b'{"x": "\\ud800"}',
            b'{"\\udfff": 0}',
            b"\xff{}",
            b'{"x": 1e999}',
            b'{"x": NaN}',
            b'{"started_by": "\\u0000"}',
            b"[]",
            b"null",
        ]
    ),
)


def helper_routes() -> list[tuple[str, str]]:
    app = build_app(helper_config(NO_SCREEN))
    found = []
    for resource in app.router.resources():
        info = resource.get_info()
        path = str(info.get("path") or info.get("formatter", ""))
        found += [(r.method, path.replace("{action}", "click")) for r in resource]
    return [(method, path) for method, path in found if method == "POST"]


ROUTES = helper_routes()


@pytest.fixture(scope="module")
def helper_url() -> Iterator[str]:
    config = helper_config(NO_SCREEN)
    with in_background_thread(lambda: running_helper(config), start_timeout_s=30) as helper:
        yield helper.url


def _check(response: httpx.Response) -> None:
    assert response.status_code in {400, 413, 415}, (response.status_code, response.text)
    assert response.json()["ok"] is False
    assert response.json()["error"]["code"] in CODES


@pytest.mark.parametrize(("method", "path"), ROUTES, ids=[f"{m} {p}" for m, p in ROUTES])
def test_every_helper_route_refuses_bad_bodies_clearly(
    helper_url: str, method: str, path: str
) -> None:
    with (
        error_records() as errors,
        httpx.Client(base_url=helper_url, headers=AUTH, timeout=scaled(10)) as client,
    ):
        slow = [HealthCheck.too_slow, HealthCheck.data_too_large]

        @settings(
            max_examples=examples(40), deadline=None, database=None, suppress_health_check=slow
        )
        @given(body=MALFORMED, content_type=st.sampled_from(["application/json", "text/plain"]))
        def check(body: bytes, content_type: str) -> None:
            headers = {"Content-Type": content_type}
            _check(client.request(method, path, content=body, headers=headers))
            assert client.get("/v1/local/status").status_code == 200

        check()
        big = b'{"x": "' + b"a" * (9 * 1024 * 1024) + b'"}'
        response = client.post(path, content=big, headers={"Content-Type": "application/json"})
        assert response.status_code == 413
        _check(response)
    assert errors.records == [], [r.getMessage() for r in errors.records]


def test_a_five_thousand_digit_port_is_400(helper_url: str) -> None:
    response = httpx.get(f"{helper_url}/v1/local/connect?port={'9' * 5000}", headers=AUTH)
    assert response.status_code == 400 and response.json()["error"]["code"] == "invalid_args"
