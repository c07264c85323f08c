"""X-Twilio-Signature compute/verify, against Twilio's documented example."""

from __future__ import annotations

import base64
import hashlib
import hmac

from hypothesis import given
from hypothesis import strategies as st

from telephony.twilio.signature import compute_signature, verify_signature

TOKEN = "12345"
DOC_URL = "https://mycompany.com/myapp.php?foo=1&bar=2"
DOC_PARAMS = {
    "CallSid": "CA1234567890ABCDE",
    "Caller": "+12349013030",
    "Digits": "1234",
    "From": "+12349013030",
    "To": "+18005551212",
}
DOC_SIGNATURE = "0/KCTR6DLpKmkAf8muzZqo1nDgQ="  # twilio.com/docs/usage/security


def test_documented_example() -> None:
    assert compute_signature(TOKEN, DOC_URL, DOC_PARAMS) == DOC_SIGNATURE
    assert verify_signature(TOKEN, DOC_URL, DOC_PARAMS, DOC_SIGNATURE)


def test_tampering_is_rejected() -> None:
    assert not verify_signature(TOKEN, DOC_URL, {**DOC_PARAMS, "Digits": "9999"}, DOC_SIGNATURE)
    assert not verify_signature(TOKEN, DOC_URL.replace("bar=2", "bar=3"), DOC_PARAMS, DOC_SIGNATURE)
    assert not verify_signature("54321", DOC_URL, DOC_PARAMS, DOC_SIGNATURE)
    assert not verify_signature(TOKEN, DOC_URL, DOC_PARAMS, DOC_SIGNATURE[:-2])
    assert not verify_signature(TOKEN, DOC_URL, DOC_PARAMS, None)
    assert not verify_signature(TOKEN, DOC_URL, DOC_PARAMS, "")
    assert not verify_signature("", DOC_URL, DOC_PARAMS, DOC_SIGNATURE)


def test_websocket_upgrade_signs_url_with_empty_params() -> None:
    url = "wss://voice.example.com/twilio/stream"
    expected = base64.b64encode(hmac.new(b"tok", url.encode(), hashlib.sha1).digest()).decode()
    assert compute_signature("tok", url, {}) == expected
    assert compute_signature("tok", url) == expected
    assert verify_signature("tok", url, {}, expected)
    # Twilio may or may not include the default port; both forms verify.
    assert verify_signature("tok", "wss://voice.example.com:443/twilio/stream", {}, expected)
    assert not verify_signature("tok", url + "x", {}, expected)


@given(
    st.text(min_size=1, max_size=20),
    st.dictionaries(st.text(max_size=8), st.text(max_size=8), max_size=4),
)
def test_compute_then_verify(token: str, params: dict[str, str]) -> None:
    url = "https://example.com/voice"
    sig = compute_signature(token, url, params)
    assert verify_signature(token, url, params, sig)
    assert not verify_signature(token, url + "/other", params, sig)
