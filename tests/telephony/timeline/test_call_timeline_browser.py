"""The call page in headless Chromium, over a real call: a scripted Twilio caller talks to the
server (one barge-in), then the page for that call is loaded with the API token and checked:
its turns, both sides' words, each turn's latency by stage, the recording's player, and a click
on a turn that moves the player to the turn's start. Record text with markup shows as text.

A screenshot of the page is taken each run; with ``PARLEY_UPDATE_SCREENSHOTS=1`` it is also
written to ``benchmarks/plots/call_timeline.png`` (the one the docs show). Skipped (with the
reason) where Chromium or Playwright is missing (tests/telephony/chromium.py).
"""

from __future__ import annotations

import os
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

from agent.echo import EchoAgentProcessor
from harness.callers.twilio import CallerConfig, CallerUtterance, run_call
from pipeline.builder import PipelineConfig
from pipeline.records import CallRecord
from telephony.server import CallServer, ServerConfig

from ..chromium import CHROMIUM, async_api, needs_chromium
from ..conftest import TOKEN
from .conftest import API_TOKEN, XSS, XSS_AGENT, sample_records

pytestmark = needs_chromium

PAGE_TIMEOUT_MS = 15_000
SCREENSHOT = Path(__file__).resolve().parents[3] / "benchmarks" / "plots" / "call_timeline.png"
STAGES = ("vad_stop", "stt_final", "first_text", "tts_first_audio", "transport_first_byte")


def js_fixed0(x: float) -> str:
    """`x.toFixed(0)` as the page writes it: a tie goes up (250.5 -> 251), where Python's format goes to even."""
    return str(Decimal(x).quantize(Decimal(1), rounding=ROUND_HALF_UP))


async def place_call(tmp_path) -> tuple[CallServer, CallRecord]:
    server = CallServer(ServerConfig(host="127.0.0.1", port=0, auth_token=TOKEN, api_token=API_TOKEN,
                                     pipeline=PipelineConfig(recordings_dir=str(tmp_path))),
                        agent_factory=lambda _info: EchoAgentProcessor())
    await server.start()
    config = CallerConfig(url=f"ws://127.0.0.1:{server.port}/twilio/stream", auth_token=TOKEN,
                          utterances=(CallerUtterance(text="hello how are you"),
                                      CallerUtterance(text="i would like to check my account")),
                          barge_in_ms=700, timeout_s=45)
    try:
        report = await run_call(config)
    except BaseException:
        await server.stop()
        raise
    record = server.store.get(report.call_sid)
    assert record is not None and record.ended and record.recording, record
    assert record.recording.endswith(".opus"), record.recording      # Ogg/Opus, the default, plays in Chromium
    return server, record


async def test_the_call_page_in_chromium(tmp_path):
    server, record = await place_call(tmp_path)
    base = f"http://127.0.0.1:{server.port}"
    try:
        # the record holds what the page places on the axis: both sides' speech on the call's clock
        assert len(record.turns) == 2, [t.user_text for t in record.turns]
        for turn in record.turns:
            at = turn.at_s
            assert 0 < at["speech_start"] < at["speech_end"] < at["agent_start"], at
            assert at["agent_start"] - at["speech_end"] < 2.0, at
        assert record.turns[0].interrupted and "barge_in" in record.turns[0].at_s, record.turns[0]
        # the recording begins with the first frame from the caller, which covers the 20 ms before it came
        assert -0.1 < record.marks_s["recording_start"] < 1.0 and record.marks_s["greeting_start"] >= 0, record.marks_s
        for seeded in sample_records(tmp_path):        # markup in a record: shown as text, never run
            if seeded.call_sid == "CA-live":
                server.store.open(seeded)
        async with async_api.async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=[
                "--no-sandbox", "--autoplay-policy=no-user-gesture-required", "--disable-background-networking",
                "--disable-component-update", "--no-first-run"])
            try:
                page = await browser.new_page(viewport={"width": 1100, "height": 900})
                errors: list[str] = []
                page.on("pageerror", lambda exc: errors.append(str(exc)))
                page.set_default_timeout(PAGE_TIMEOUT_MS)

                # without credentials: the login form, and no call in sight
                response = await page.goto(f"{base}/ui/calls/{record.call_sid}")
                assert response.status == 401 and await page.locator("#login").count() == 1
                assert record.turns[0].user_text not in await page.content()   # the address only, none of the call

                # the token once in the address: the cookie from then on; the list, then the call
                await page.goto(f"{base}/ui/calls?token={API_TOKEN}")
                assert page.url == f"{base}/ui/calls"
                await page.wait_for_selector(f'#calls tr[data-sid="{record.call_sid}"]')
                await page.click(f'#calls tr[data-sid="{record.call_sid}"] a')
                await page.wait_for_selector('#status[data-state="ready"]')
                assert page.url == f"{base}/ui/calls/{record.call_sid}"

                rows = page.locator("#turns tr.turn")
                assert await rows.count() == 2
                for turn in record.turns:
                    row = page.locator(f'#turns tr.turn[data-turn="{turn.turn}"]')
                    assert await row.locator(".caller-said").inner_text() == turn.user_text
                    assert (await row.locator(".agent-said").inner_text()).startswith(turn.agent_text)
                    for stage in STAGES:
                        ms = turn.latency_ms[stage]
                        assert ms is not None, (turn.turn, stage)
                        cell = row.locator(f'td.latency dd[data-stage="{stage}"]')
                        assert await cell.inner_text() == f"{js_fixed0(ms)} ms"
                    assert await row.locator(".missing").count() == 0
                first = page.locator('#turns tr.turn[data-turn="1"]')
                assert await first.get_attribute("data-interrupted") == "true"
                assert await page.locator(".mark.barge-in").count() == 1
                spans = page.locator('.lane[data-side="caller"] .span')
                assert await spans.count() == 2 and await spans.nth(1).inner_text() == record.turns[1].user_text
                assert await page.locator('.lane[data-side="agent"] .span').count() == 3   # the greeting too

                # the recording: its player has the file (Range requests), its waveform is drawn
                await page.wait_for_function("() => document.querySelector('#player').readyState >= 1")
                duration = await page.evaluate("() => document.querySelector('#player').duration")
                wave = await page.evaluate("() => parleyCall.call.recording.waveform")
                assert abs(duration - wave["duration_s"]) < 0.05 and max(wave["channels"]["agent"]) > 0.01
                assert await page.locator("#recording-missing").is_hidden()

                # a click on turn 2 plays the recording from where the caller began it
                start = record.turns[1].at_s["speech_start"] - record.marks_s["recording_start"]
                await page.evaluate("() => document.querySelector('#player').pause()")
                await page.click('#turns tr.turn[data-turn="2"] td.caller-said')
                await page.wait_for_function(
                    f"() => Math.abs(document.querySelector('#player').currentTime - {start}) < 0.3")
                await page.wait_for_selector('#turns tr.turn[data-turn="2"].playing')
                await page.evaluate("() => document.querySelector('#player').pause()")
                shot = await page.screenshot(full_page=True, type="png")
                assert shot[:8] == b"\x89PNG\r\n\x1a\n" and len(shot) > 20_000
                if os.environ.get("PARLEY_UPDATE_SCREENSHOTS") == "1":
                    SCREENSHOT.write_bytes(shot)

                # markup in a record is text on the page, and nothing of it runs
                await page.goto(f"{base}/ui/calls/CA-live")
                await page.wait_for_selector('#status[data-state="ready"]')
                row = page.locator('#turns tr.turn[data-turn="1"]')
                assert await row.locator(".caller-said").inner_text() == XSS
                assert await row.locator(".agent-said").inner_text() == XSS_AGENT
                assert await page.evaluate("() => window.pwned === undefined && !document.querySelector('img')")
                missing = await row.locator(".missing").inner_text()
                assert missing == "not recorded: VAD stop, final transcript, first LLM text, first TTS audio"
                assert await page.locator("#recording-missing").inner_text() == "No recording: this call was not recorded."
                assert errors == []
            finally:
                await browser.close()
    finally:
        await server.stop()
