"""The call pages over HTTP, against a real server on 127.0.0.1:0: the list and its search, one
call's JSON and recording, who may read them (401 without credentials, off by default beyond
this machine), and record text that never reaches the HTML."""

from __future__ import annotations

import logging

import aiohttp
import numpy as np
import pytest

from agent.echo import EchoAgentProcessor
from pipeline.audio.opus_stream import OpusStreamWriter
from pipeline.records import CallRecord, TurnRecord
from pipeline.records_sqlite import SQLiteCallStore
from pipeline.redaction import RedactingCallStore, Redactor
from telephony.server import CallServer, ServerConfig
from telephony.timeline.access import COOKIE, is_loopback

from .conftest import API_TOKEN, XSS, make_server, sample_records

BEARER = {"Authorization": f"Bearer {API_TOKEN}"}


def url(server, path: str) -> str:
    return f"http://127.0.0.1:{server.port}{path}"


async def get_json(server, path: str, status: int = 200, headers=BEARER):
    async with aiohttp.ClientSession() as s, s.get(url(server, path), headers=headers) as r:
        assert r.status == status, (r.status, await r.text())
        assert r.content_type == "application/json"
        return await r.json()


async def listed(server, query: str = "") -> list[str]:
    return [c["call_sid"] for c in (await get_json(server, f"/ui/api/calls{query}"))["calls"]]


async def test_the_list_is_newest_first_and_searchable(ui_server):
    assert await listed(ui_server) == ["CA-live", "CA-noanswer", "CA-hungup", "CA-transfer"]
    # dates (UTC): a bare 'to' takes its whole day
    assert await listed(ui_server, "?from=2026-12-01&to=2026-12-02") == ["CA-noanswer", "CA-hungup"]
    assert await listed(ui_server, "?to=2026-11-30") == ["CA-transfer"]
    assert await listed(ui_server, "?from=2026-12-03T00:00:00%2B00:00") == ["CA-live"]
    # a number however it is written, in the caller's, the called or the dialled number
    assert await listed(ui_server, "?number=%2B1%20555-0101") == ["CA-transfer"]
    assert await listed(ui_server, "?number=15550199") == ["CA-transfer"]
    assert await listed(ui_server, "?number=5550303") == ["CA-noanswer"]
    assert await listed(ui_server, "?number=carrier.example") == ["CA-hungup"]
    assert await listed(ui_server, "?number=5559999") == []
    # outcomes: the webhook's, a dialled call's, live
    assert await listed(ui_server, "?outcome=transferred") == ["CA-transfer"]
    assert await listed(ui_server, "?outcome=caller_hung_up") == ["CA-hungup"]
    assert await listed(ui_server, "?outcome=no-answer") == ["CA-noanswer"]
    assert await listed(ui_server, "?outcome=live") == ["CA-live"]
    assert await listed(ui_server, "?outcome=transferred&from=2026-12-01") == []
    assert await listed(ui_server, "?limit=2") == ["CA-live", "CA-noanswer"]
    line = (await get_json(ui_server, "/ui/api/calls?outcome=transferred"))["calls"][0]
    assert line | {"first_words": line["first_words"]} == {
        "call_sid": "CA-transfer", "transport": "twilio", "started_at": 1_796_000_000.0, "duration_s": 42.0,
        "turns": 2, "outcome": "transferred", "dial_outcome": None, "end_reason": "transferred to a person",
        "from": "+15550101", "to": "+15550199", "recorded": True, "first_words": "what are your hours"}
    for bad in ("?from=yesterday", "?limit=0", "?limit=many", "?limit=501"):
        error = await get_json(ui_server, f"/ui/api/calls{bad}", status=400)
        assert error["error"], bad


async def test_one_call_with_its_recording_and_waveform(ui_server):
    call = await get_json(ui_server, "/ui/api/calls/CA-transfer")
    assert call["outcome"] == "transferred" and call["params"] == {"From": "+15550101", "To": "+15550199"}
    assert [t["user_text"] for t in call["turns"]] == ["what are your hours", "a person please"]
    assert call["turns"][0]["tool_calls"][0]["arguments"] == {"day": "monday"}
    assert call["turns"][1]["events"][1]["kind"] == "transfer" and call["turns"][1]["at_s"]["barge_in"] == 9.1
    assert call["turns"][1]["latency_ms"]["stt_final"] is None
    recording = call["recording"]
    assert recording["available"] and recording["url"] == "/ui/calls/CA-transfer/recording"
    assert recording["offset_s"] == 0.1
    wave = recording["waveform"]
    assert wave["duration_s"] == 12.0 and wave["sample_rate_hz"] == 8000
    caller, agent = wave["channels"]["caller"], wave["channels"]["agent"]
    assert len(caller) == len(agent) == 1000
    assert set(caller[:499]) == {round(16000 / 32768, 3)} and set(caller[501:]) == {0.0}
    assert set(agent[:499]) == {0.0} and set(agent[501:]) == {round(8000 / 32768, 3)}

    async with aiohttp.ClientSession() as s:
        async with s.get(url(ui_server, recording["url"]), headers=BEARER | {"Range": "bytes=44-47"}) as r:
            assert r.status == 206 and r.headers["Content-Type"] == "audio/wav"
            assert await r.read() == (16000).to_bytes(2, "little") + b"\x00\x00"  # the first frame: caller, agent
        async with s.get(url(ui_server, recording["url"])) as r:  # the recording is behind the same gate
            assert r.status == 401
        async with s.get(url(ui_server, "/ui/calls/CA-hungup/recording"), headers=BEARER) as r:
            assert r.status == 404 and "not recorded" in await r.text()
    assert (await get_json(ui_server, "/ui/api/calls/CA-hungup"))["recording"] == {
        "available": False, "why": "this call was not recorded"}
    async with aiohttp.ClientSession() as s, s.get(url(ui_server, "/ui/api/calls/CA-nothing"), headers=BEARER) as r:
        assert r.status == 404


async def test_an_opus_recording_is_served_as_ogg_and_drawn(ui_server, tmp_path):
    """Ogg/Opus, the recorder's default: audio/ogg with Range answered, its waveform decoded on the server."""
    rate, n = 8000, 6 * 8000
    t = np.arange(n) / rate
    pcm = np.zeros((n, 2), np.int16)
    pcm[: n // 2, 0] = (np.sin(2 * np.pi * 400 * t[: n // 2]) * 16000).astype(np.int16)
    pcm[n // 2:, 1] = (np.sin(2 * np.pi * 300 * t[n // 2:]) * 8000).astype(np.int16)
    path = tmp_path / "recordings" / "2026-12-01" / "CA-hungup.opus"
    writer = OpusStreamWriter(path, sample_rate_hz=rate)
    writer.write(pcm.astype("<i2").tobytes())
    writer.close()
    ui_server.store.get("CA-hungup").recording = str(path)
    view = (await get_json(ui_server, "/ui/api/calls/CA-hungup"))["recording"]
    assert view["available"] and view["url"] == "/ui/calls/CA-hungup/recording"
    wave = view["waveform"]
    assert abs(wave["duration_s"] - 6.0) <= 0.02 and wave["sample_rate_hz"] == rate
    caller, agent = wave["channels"]["caller"], wave["channels"]["agent"]
    assert len(caller) == len(agent) == 1000
    assert min(caller[10:490]) > 0.4 and max(caller[510:]) < 0.01
    assert max(agent[:490]) < 0.01 and min(agent[510:990]) > 0.2
    async with aiohttp.ClientSession() as s:
        async with s.get(url(ui_server, view["url"]), headers=BEARER | {"Range": "bytes=0-3"}) as r:
            assert r.status == 206 and r.headers["Content-Type"] == "audio/ogg"
            assert await r.read() == b"OggS"
        async with s.get(url(ui_server, view["url"]), headers=BEARER) as r:
            assert r.status == 200 and r.headers["Content-Type"] == "audio/ogg"
            assert await r.read() == path.read_bytes()


async def test_a_recording_outside_the_recordings_folder_is_not_served(ui_server, tmp_path):
    record = ui_server.store.get("CA-hungup")
    secret = tmp_path / "secret.wav"
    secret.write_bytes(b"RIFF....WAVE")
    record.recording = str(tmp_path / "recordings" / ".." / "secret.wav")
    view = (await get_json(ui_server, "/ui/api/calls/CA-hungup"))["recording"]
    assert view == {"available": False, "why": "the recording is outside this server's recordings folder"}
    async with aiohttp.ClientSession() as s, s.get(url(ui_server, "/ui/calls/CA-hungup/recording"),
                                                   headers=BEARER) as r:
        assert r.status == 404 and await r.read() != secret.read_bytes()


@pytest.mark.parametrize("path", ["/ui/calls", "/ui/calls/CA-transfer", "/ui/api/calls", "/ui/api/calls/CA-transfer",
                                  "/ui/calls/CA-transfer/recording"])
async def test_without_credentials_every_route_is_refused(ui_server, path):
    async with aiohttp.ClientSession() as s:
        for headers in ({}, {"Authorization": "Bearer wrong-token-0123456789"}, {"Authorization": API_TOKEN},
                        {"Cookie": f"{COOKIE}={API_TOKEN}"}):
            async with s.get(url(ui_server, path), headers=headers) as r:
                body = await r.text()
                assert r.status == 401, (headers, r.status)
                assert r.headers["WWW-Authenticate"] == "Bearer"
                assert "what are your hours" not in body and "CA-transfer" not in body
                if path.startswith("/ui/calls") and not path.endswith("recording"):
                    assert '<form id="login" method="post" action="/ui/login">' in body


def session() -> aiohttp.ClientSession:
    """A client that keeps cookies from an IP address (aiohttp's jar refuses them by default)."""
    return aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True))


async def test_a_token_in_the_address_or_the_login_form_becomes_an_httponly_cookie(ui_server):
    async with session() as s:
        async with s.get(url(ui_server, "/ui/calls/CA-transfer?token=nope&x=1"), allow_redirects=False) as r:
            assert r.status == 401 and "Set-Cookie" not in r.headers
        async with s.get(url(ui_server, f"/ui/calls/CA-transfer?x=1&token={API_TOKEN}"), allow_redirects=False) as r:
            assert r.status == 303 and r.headers["Location"] == "/ui/calls/CA-transfer?x=1"
            cookie = r.headers["Set-Cookie"]
        assert f"{COOKIE}=" in cookie and API_TOKEN not in cookie
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/ui" in cookie
        async with s.get(url(ui_server, "/ui/api/calls/CA-transfer")) as r:   # the session's cookie
            assert r.status == 200
    async with session() as s:
        form = {"token": API_TOKEN, "next": "//evil.example/x"}
        async with s.post(url(ui_server, "/ui/login"), data=form, allow_redirects=False) as r:
            assert r.status == 303 and r.headers["Location"] == "/ui/calls"      # never off this site
        async with s.post(url(ui_server, "/ui/login"), data={"token": API_TOKEN, "next": "/ui/calls?number=555"},
                          allow_redirects=False) as r:
            assert r.status == 303 and r.headers["Location"] == "/ui/calls?number=555"
        async with s.get(url(ui_server, "/ui/api/calls")) as r:
            assert r.status == 200
    async with aiohttp.ClientSession() as s:
        async with s.post(url(ui_server, "/ui/login"), data={"token": "wrong"}, allow_redirects=False) as r:
            assert r.status == 401 and "Set-Cookie" not in r.headers


async def test_off_on_a_non_loopback_address_without_a_token(tmp_path, caplog):
    server = make_server(tmp_path, host="0.0.0.0", api_token=None)
    with caplog.at_level(logging.WARNING, logger="telephony.timeline.routes"):
        await server.start()
    try:
        assert any("call pages (/ui/calls) off" in r.getMessage() for r in caplog.records)
        async with aiohttp.ClientSession() as s:
            for path in ("/ui/calls", "/ui/calls/CA-transfer", "/ui/api/calls", "/ui/calls/CA-transfer/recording",
                         "/ui/static/timeline.js", f"/ui/calls?token={API_TOKEN}"):
                async with s.get(url(server, path), headers=BEARER) as r:
                    assert r.status == 404, path
                    assert "CA-transfer" not in await r.text()
            async with s.post(url(server, "/ui/login"), data={"token": API_TOKEN}) as r:
                assert r.status == 404
    finally:
        await server.stop()


async def test_open_on_loopback_without_a_token_but_only_to_a_loopback_host(tmp_path):
    server = make_server(tmp_path, api_token=None)
    await server.start()
    try:
        assert await listed(server) == ["CA-live", "CA-noanswer", "CA-hungup", "CA-transfer"]
        # a page elsewhere pointing its own name at 127.0.0.1 (DNS rebinding) is refused
        async with aiohttp.ClientSession() as s:
            async with s.get(url(server, "/ui/api/calls"), headers={"Host": "evil.example"}) as r:
                assert r.status == 403
            async with s.get(url(server, "/ui/api/calls"), headers={"Host": f"localhost:{server.port}"}) as r:
                assert r.status == 200
    finally:
        await server.stop()
    assert [is_loopback(h) for h in ("127.0.0.1", "::1", "[::1]:80", "localhost:1", "0.0.0.0", "", "10.0.0.1",
                                     "example.com")] == [True, True, True, True, False, False, False, False]


async def test_record_text_never_reaches_the_html(ui_server):
    async with aiohttp.ClientSession() as s:
        async with s.get(url(ui_server, "/ui/calls/CA-live"), headers=BEARER) as r:
            page = await r.text()
            assert r.status == 200 and r.content_type == "text/html"
            assert "script-src 'self'" in r.headers["Content-Security-Policy"]
            assert r.headers["X-Content-Type-Options"] == "nosniff"
        assert XSS not in page and "pwned" not in page and "<script src=\"/ui/static/timeline.js\" defer>" in page
        async with s.get(url(ui_server, "/ui/static/timeline.js")) as r:
            script = await r.text()
            assert r.status == 200 and r.content_type == "text/javascript"
        # the page's script writes record text as text: no HTML sinks anywhere in it
        for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("):
            assert sink not in script, sink
    call = await get_json(ui_server, "/ui/api/calls/CA-live")
    assert call["turns"][0]["user_text"] == XSS   # as the store has it: the browser test shows it as text


async def test_the_pages_read_the_durable_store_and_show_what_it_masked(tmp_path):
    """Over the SQLite store ``parley serve`` keeps, behind the redaction it writes through: the
    turns' times survive the round trip, and a card number the caller said is shown masked."""
    inner = SQLiteCallStore(tmp_path / "calls.db")
    store = RedactingCallStore(inner, Redactor())
    live = CallRecord(call_sid="CA-card", transport="twilio", started_at=1_796_500_000.0)
    live.turns.append(TurnRecord(turn=1, user_text="my card is 4111 1111 1111 1111",
                                 at_s={"speech_start": 1.25, "speech_end": 3.5}))
    for record in [*sample_records(tmp_path), live]:
        store.open(record)
    server = CallServer(ServerConfig(host="127.0.0.1", port=0, twilio=False, api_token=API_TOKEN),
                        agent_factory=lambda _info: EchoAgentProcessor(), store=store)
    await server.start()
    try:
        assert (await listed(server))[:2] == ["CA-card", "CA-live"]
        call = await get_json(server, "/ui/api/calls/CA-card")
        assert call["turns"][0]["user_text"] == "my card is **** **** **** 1111"
        assert live.turns[0].user_text.endswith("4111 1111 1111 1111")   # the live record: not what is shown
        assert call["turns"][0]["at_s"] == {"speech_start": 1.25, "speech_end": 3.5}
        transfer = await get_json(server, "/ui/api/calls/CA-transfer")
        assert transfer["marks_s"] == {"greeting_start": 0.4, "greeting_end": 1.9, "recording_start": 0.1}
        assert transfer["recording"] == {"available": False, "why": "this server keeps no recordings (--recordings)"}
    finally:
        await server.stop()
        inner.close()
