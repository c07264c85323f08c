"""Genesys's HTTP message signature: the reference implementation's worked example verifies, and
each way a signature can be wrong is refused with its reason."""

from __future__ import annotations

import base64

import pytest

from telephony.errors import SignatureError
from telephony.genesys.signature import NonceCache, sign, verify

SECRET = base64.b64decode("TXlTdXBlclNlY3JldEtleVRlbGxOby0xITJAMyM0JDU=")
KEY = "SGVsbG8sIEkgYW0gdGhlIEFQSSBrZXkh"
HEADERS = {
    "audiohook-organization-id": "d7934305-0972-4844-938e-9060eef73d05",
    "audiohook-session-id": "30b0e395-84d3-4570-ac13-9a62d8f514c0",
    "audiohook-correlation-id": "e160e428-53e2-487c-977d-96989bf5c99d",
    "x-api-key": KEY,
    "signature-input": 'sig1=("@request-target" "@authority" "audiohook-organization-id" "audiohook-session-id" '
                       '"audiohook-correlation-id" "x-api-key");keyid="SGVsbG8sIEkgYW0gdGhlIEFQSSBrZXkh";'
                       'nonce="VGhpc0lzQVVuaXF1ZU5vbmNl";alg="hmac-sha256";created=1641013200;expires=3282026430',
    "signature": "sig1=:NZBwyBHRRyRoeLqy1IzOa9VYBuI8TgMFt2GRDkDuJh4=:",
}
TARGET, AUTHORITY, CREATED = "/api/v1/voicebiometrics/ws", "audiohook.example.com", 1641013200


def test_the_reference_implementations_example_verifies():
    verify(HEADERS, target=TARGET, authority=AUTHORITY, secret=SECRET, now=CREATED + 1)


@pytest.mark.parametrize(("change", "why"), [
    (lambda h: h.update(signature="sig1=:" + base64.b64encode(b"x" * 32).decode() + ":"), "do not match"),
    (lambda h: h.update({"audiohook-session-id": "30b0e395-84d3-4570-ac13-9a62d8f514c1"}), "do not match"),
    (lambda h: h.update({"x-api-key": "another-key"}), "keyid"),
    (lambda h: h.pop("signature"), "not signed"),
    (lambda h: h.update({"signature-input": h["signature-input"].replace(' "x-api-key"', "")}), "x-api-key"),
    (lambda h: h.update({"signature-input": h["signature-input"].replace("hmac-sha256", "rsa-pss-sha512")}),
     "algorithm"),
    (lambda h: h.update({"signature-input": h["signature-input"] + ';tag="x"'}), "unknown parameters"),
    (lambda h: h.update({"signature-input": h["signature-input"].replace('nonce="VGhpc0lzQVVuaXF1ZU5vbmNl";', "")}),
     "nonce"),
])
def test_a_wrong_signature_is_refused_saying_why(change, why):
    headers = dict(HEADERS)
    change(headers)
    with pytest.raises(SignatureError, match=why):
        verify(headers, target=TARGET, authority=AUTHORITY, secret=SECRET, now=CREATED + 1)


def test_the_clock_and_replays():
    with pytest.raises(SignatureError, match="expired"):
        verify(HEADERS, target=TARGET, authority=AUTHORITY, secret=SECRET, now=CREATED + 60)
    with pytest.raises(SignatureError, match="future"):
        verify(HEADERS, target=TARGET, authority=AUTHORITY, secret=SECRET, now=CREATED - 60)
    headers = sign({k: v for k, v in HEADERS.items() if k.startswith("audiohook")}, target="/genesys/audiohook",
                   authority="parley.example.com", api_key=KEY, secret=SECRET)
    nonces = NonceCache()
    verify(headers, target="/genesys/audiohook", authority="parley.example.com", secret=SECRET, nonces=nonces)
    with pytest.raises(SignatureError, match="used already"):
        verify(headers, target="/genesys/audiohook", authority="parley.example.com", secret=SECRET, nonces=nonces)
    with pytest.raises(SignatureError, match="do not match"):     # signed for another path
        verify(headers, target="/genesys/audiohook/other", authority="parley.example.com", secret=SECRET)
