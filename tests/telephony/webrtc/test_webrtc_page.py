"""The call page in headless Chromium, with a WAV file as its microphone, against the real server.

Skipped (with the reason) where Chromium or Playwright is missing; CI installs both
(scripts/install-system-deps, the test extra).
"""

from __future__ import annotations

import jiwer

from ..chromium import CHROMIUM, async_api, needs_chromium
from .conftest import SAID, assert_caller_hung_up

pytestmark = needs_chromium

PAGE_TIMEOUT_MS = 25_000


def chromium_args(microphone_wav) -> list[str]:
    return [
        "--no-sandbox",
        "--use-fake-ui-for-media-stream",
        "--use-fake-device-for-media-stream",
        f"--use-file-for-fake-audio-capture={microphone_wav}",
        "--autoplay-policy=no-user-gesture-required",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
    ]


async def test_page_call_in_chromium(webrtc_server, microphone_wav):
    base = f"http://127.0.0.1:{webrtc_server.port}"
    async with async_api.async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, headless=True,
                                           args=chromium_args(microphone_wav))
        try:
            page = await browser.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            await page.goto(f"{base}/")
            assert await page.inner_text("#status") == "Ready to call."
            await page.click("#call")

            # the caller's first turn is transcribed and answered, with its latency
            await page.wait_for_function(
                "() => parley.messages.some(m => m.type === 'latency' && m.turn === 1)"
                " && parley.messages.some(m => m.type === 'transcript' && m.role === 'agent'"
                " && m.turn === 1 && m.final)",
                timeout=PAGE_TIMEOUT_MS)
            assert await page.get_attribute("#status", "data-state") == "live"
            state = await page.evaluate("() => parley")
            # the microphone as a calling page's: the agent's voice on speakers is cancelled
            assert state["micSettings"] == {"echoCancellation": True, "noiseSuppression": True,
                                            "autoGainControl": True}, state["micSettings"]

            # what the agent heard matches what the WAV says (pocketsphinx: allow its errors)
            finals = [m["text"] for m in state["messages"]
                      if m["type"] == "transcript" and m["role"] == "user" and m["final"] and m["turn"] == 1]
            assert finals and jiwer.wer(SAID, finals[0].lower()) <= 0.5, finals
            assert any(m["type"] == "transcript" and m["role"] == "user" and not m["final"]
                       for m in state["messages"]), "no partial transcript reached the page"

            # agent audio arrived and played: RTP bytes, decoded energy and the page's own meter
            assert state["inbound"]["bytesReceived"] > 10_000, state["inbound"]
            assert state["inbound"]["totalAudioEnergy"] > 0.01, state["inbound"]
            assert state["agentPeakLevel"] > 0.05, state["agentPeakLevel"]

            # ICE stayed on this machine: the server's side of the pair in use is loopback
            assert state["selectedPair"]["remote"] == "127.0.0.1", state["selectedPair"]

            # the page shows both sides and the latency row
            user_line = await page.inner_text('#transcript li[data-role="user"][data-turn="1"]')
            agent_lines = await page.locator('#transcript li[data-role="agent"]').all_inner_texts()
            assert user_line.startswith("You: ") and user_line[5:] == finals[0]
            assert agent_lines[0].startswith("Agent: Hello this is parley"), agent_lines
            assert any(t.startswith("Agent: You said") for t in agent_lines), agent_lines
            cells = await page.locator('#latency tr[data-turn="1"] td').all_inner_texts()
            assert cells[0] == "1" and float(cells[-1]) > 0, cells

            # mute, then hang up: the server ends the call and keeps its record
            await page.click("#mute")
            assert await page.get_attribute("#mute", "aria-pressed") == "true"
            call_id = state["callId"]
            await page.click("#hangup")
            assert await page.get_attribute("#status", "data-state") == "ended"
            assert errors == []
        finally:
            await browser.close()
    await assert_caller_hung_up(webrtc_server, call_id)
