"""The browser routes on the real server: the page, and signaling that refuses what it should."""

from __future__ import annotations

import aiohttp
import pytest
from aiohttp import web

from pipeline.builder import PipelineConfig
from pipeline.records import MemoryCallStore
from telephony.webrtc import WebRTCConfig, register_webrtc_routes
from telephony.webrtc.errors import SignalingError

CAND = "candidate:1 1 udp 2122260223 127.0.0.1 50000 typ host"


@pytest.fixture
async def http(webrtc_server):
    base = f"http://127.0.0.1:{webrtc_server.port}"
    async with aiohttp.ClientSession(base_url=base) as session:
        yield session


async def test_page_and_its_files(http):
    async with http.get("/") as resp:
        assert resp.status == 200 and resp.content_type == "text/html"
        page = await resp.text()
    for needle in ('id="call"', 'id="mute"', 'id="hangup"', 'id="transcript"', 'id="latency"',
                   "/static/app.js", "/static/app.css"):
        assert needle in page
    async with http.get("/static/app.js") as resp:
        assert resp.status == 200 and resp.content_type == "text/javascript"
        assert "/api/offer" in await resp.text()
    async with http.get("/static/app.css") as resp:
        assert resp.status == 200 and resp.content_type == "text/css"
    for path in ("/static/index.html", "/static/..%2Fwebrtc%2Fcall.py", "/static/nope.js"):
        async with http.get(path) as resp:
            assert resp.status == 404, path


@pytest.mark.parametrize("body, status", [
    (b"nonsense", 400),
    (b'{"sdp": "v=0", "type": "offer"}', 400),                                  # no audio
    (b'{"sdp": "v=0\\r\\nm=audio 9 UDP/TLS/RTP/SAVPF 111\\r\\n", "type": "offer"}', 400),  # no ICE creds
    (b'{"sdp": "v=0\\r\\nm=audio x", "type": "offer"}', 400),                   # aiortc cannot parse it
    (b'{"sdp": "v=0\\r\\nm=audio 9 x\\r\\n", "type": "offer", "pc_id": "gone"}', 404),
])
async def test_bad_offers_are_refused(http, webrtc_server, body, status):
    async with http.post("/api/offer", data=body, headers={"Content-Type": "application/json"}) as resp:
        assert resp.status == status, await resp.text()
    assert webrtc_server.webrtc.calls == {} and webrtc_server.live == {}


async def test_patch_for_an_unknown_peer_is_404(http):
    body = {"pc_id": "gone", "candidates": [{"candidate": CAND, "sdp_mid": "0", "sdp_mline_index": 0}]}
    async with http.patch("/api/offer", json=body) as resp:
        assert resp.status == 404
    async with http.patch("/api/offer", json={"pc_id": "gone"}) as resp:
        assert resp.status == 400


async def test_offers_beyond_max_live_calls_get_503():
    app = web.Application()
    gateway = register_webrtc_routes(app, agent_factory=lambda _i: None, pipeline_config=PipelineConfig(),
                                     store=MemoryCallStore(), config=WebRTCConfig(max_live_calls=1,
                                                                                  serve_page=False))
    gateway.calls["busy"] = object()  # one live call already
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # read the bound port back
    try:
        async with aiohttp.ClientSession() as session:
            body = {"sdp": "v=0\r\nm=audio 9 x\r\n", "type": "offer"}
            async with session.post(f"http://127.0.0.1:{port}/api/offer", json=body) as resp:
                assert resp.status == 503
            async with session.get(f"http://127.0.0.1:{port}/") as resp:
                assert resp.status == 404  # serve_page=False
    finally:
        gateway.calls.clear()
        await runner.cleanup()


@pytest.mark.parametrize("kwargs", [{"max_live_calls": 0}, {"ice_servers": ("http://stun.example",)}])
def test_config_validates_itself(kwargs):
    with pytest.raises(SignalingError):
        WebRTCConfig(**kwargs)
