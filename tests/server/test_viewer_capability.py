"""Viewer capability tokens: genuine, bound to one session, expiring, unforgeable."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from server.auth.capability import Denial, ViewerDenied, grant_for, mint, verify
from server.auth.principal import Principal
from server.auth.revocation import MINTED_REF_HEX, minted_ref
from server.secrets.tokens import hash_secret
from wire.errors import CloseCode
from wire.ids import UserId

pytestmark = pytest.mark.unit
KEY = "k" * 32


def _token(session: str = "s1", ttl: int = 60) -> str:
    return mint(KEY, grant_for("u1", "c1", "r1", session, ttl))


def test_a_genuine_token_verifies_and_carries_its_binding() -> None:
    grant = verify(KEY, _token(), "s1")
    assert (grant.user_id, grant.conversation_id, grant.relay_id) == ("u1", "c1", "r1")
    assert grant.desktop_session_id == "s1"


@pytest.mark.parametrize(
    ("token", "session", "key", "denial"),
    [
        (lambda: _token("s1"), "s2", KEY, Denial.OTHER_SESSION),
        (lambda: _token(ttl=-1), "s1", KEY, Denial.EXPIRED),
        (lambda: _token(), "s1", "another-key", Denial.FORGED),
        (lambda: "nodot", "s1", KEY, Denial.MALFORMED),
        (lambda: "a.b.c", "s1", KEY, Denial.MALFORMED),
        (lambda: "!!!.???", "s1", KEY, Denial.MALFORMED),
        # one spelling per token: padding or a non-canonical last character is refused
        (lambda: _token() + "=", "s1", KEY, Denial.MALFORMED),
        (lambda: _token().replace(".", "==."), "s1", KEY, Denial.MALFORMED),
        # a session id nobody minted (non-ASCII, a lone surrogate) is another session, not a crash
        (lambda: _token("s1"), "s\u00e9", KEY, Denial.OTHER_SESSION),
        (lambda: _token("s1"), "\ud800", KEY, Denial.OTHER_SESSION),
    ],
)
def test_bad_tokens_are_denied_with_the_reason(token, session, key, denial) -> None:
    with pytest.raises(ViewerDenied) as caught:
        verify(key, token(), session)
    assert caught.value.denial is denial


def test_a_tampered_payload_is_forged() -> None:
    body, _, signature = _token().partition(".")
    other_body, _, _ = mint(KEY, grant_for("u2", "c1", "r1", "s1", 60)).partition(".")
    with pytest.raises(ViewerDenied) as caught:
        verify(KEY, f"{other_body}.{signature}", "s1")
    assert caught.value.denial is Denial.FORGED
    assert body != other_body


def test_expiry_maps_to_its_own_close_code() -> None:
    assert Denial.EXPIRED.close_code is CloseCode.VIEWER_EXPIRED
    assert Denial.FORGED.close_code is CloseCode.VIEWER_FORBIDDEN


@given(st.text(max_size=300))
def test_arbitrary_text_never_verifies_and_never_crashes(text: str) -> None:
    with pytest.raises(ViewerDenied):
        verify(KEY, text, "s1")


def test_a_non_canonical_spelling_of_a_genuine_token_is_refused() -> None:
    body, signature = _token().split(".")
    last = signature[-1]
    # Flip the unused low bits of the last character: decodes to the same bytes.
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    twin = alphabet[alphabet.index(last) ^ 1]
    with pytest.raises(ViewerDenied) as caught:
        verify(KEY, f"{body}.{signature[:-1]}{twin}", "s1")
    assert caught.value.denial is Denial.MALFORMED


def test_only_a_capability_minted_for_a_person_takes_input() -> None:
    person = mint(KEY, grant_for("u1", "c1", "r1", "s1", 60, person=True))
    assert verify(KEY, person, "s1").person is True
    assert verify(KEY, _token(), "s1").person is False  # an agent's: view only


def test_a_capability_names_its_minting_credential_by_a_one_way_hash() -> None:
    secret = "rdk_" + "x" * 43
    token_user = Principal(UserId("u1"), "u", False, "token", None, hash_secret(secret))
    cookie_user = Principal(UserId("u1"), "u", False, "cookie", "csrf", hash_secret("rds_y"))
    ref = minted_ref(token_user)
    assert ref.startswith("t.") and minted_ref(cookie_user).startswith("s.")
    assert secret not in ref and hash_secret(secret) not in ref
    assert len(ref) == 2 + MINTED_REF_HEX
    token = mint(KEY, grant_for("u1", "c1", "r1", "s1", 60, minted_by=ref))
    assert verify(KEY, token, "s1").minted_by == ref
    assert verify(KEY, _token(), "s1").minted_by == ""  # names only its user
    assert minted_ref(Principal(UserId("u1"), "u", False, "cookie")) == ""
