"""Call records to show on the call pages, and a server that shows them."""

from __future__ import annotations

import numpy as np
import pytest

from agent.echo import EchoAgentProcessor
from pipeline.audio.wav_stream import WavStreamWriter
from pipeline.builder import PipelineConfig
from pipeline.records import CallRecord, TurnRecord
from telephony.server import CallServer, ServerConfig

API_TOKEN = "ui-token-0123456789abcdef"
DAY = 86400.0
T0 = 1_796_000_000.0  # 2026-11-30 00:53:20 UTC
XSS = "<script>window.pwned=1</script>"
XSS_AGENT = '<img src="x" onerror="window.pwned=2">'


def sample_records(recordings) -> list[CallRecord]:
    """Four calls over four days: a transfer, a caller who hung up, a placed call that was not
    answered, and one still live whose caller typed markup."""
    transfer = CallRecord(call_sid="CA-transfer", transport="twilio", started_at=T0, ended_at=T0 + 42,
                          end_reason="transferred to a person", params={"From": "+15550101", "To": "+15550199"},
                          greeting="Hello, this is parley.", greeting_heard="Hello, this is parley.",
                          marks_s={"greeting_start": 0.4, "greeting_end": 1.9, "recording_start": 0.1},
                          recording=str(recordings / "2026-11-30" / "CA-transfer.wav"))
    transfer.turns = [
        TurnRecord(turn=1, user_text="what are your hours", agent_text="We open at nine.",
                   agent_text_heard="We open at nine.",
                   latency_ms={"vad_stop": 200.0, "stt_final": 260.5, "first_text": 270.0, "tts_first_audio": 281.0,
                               "transport_first_byte": 290.25},
                   tool_calls=[{"name": "lookup_hours", "arguments": {"day": "monday"}, "result": {"open": "9:00"},
                                "duration_ms": 3.2}],
                   at_s={"speech_start": 2.5, "speech_end": 4.0, "agent_start": 4.3, "agent_end": 5.5}),
        TurnRecord(turn=2, user_text="a person please", agent_text="Putting you through now, one moment.",
                   agent_text_heard="Putting you through", interrupted=True,
                   latency_ms={"vad_stop": 200.0, "stt_final": None, "first_text": 300.0, "tts_first_audio": 310.0,
                               "transport_first_byte": 320.0},
                   events=[{"kind": "slot", "data": {"name": "reason", "value": "person"}},
                           {"kind": "transfer", "data": {"kind": "phone", "target": "+15550142", "reason": "asked"}}],
                   at_s={"speech_start": 7.0, "speech_end": 8.0, "agent_start": 8.3, "agent_end": 9.1,
                         "barge_in": 9.1}),
    ]
    hung_up = CallRecord(call_sid="CA-hungup", transport="sip", started_at=T0 + DAY, ended_at=T0 + DAY + 5,
                         end_reason="caller hung up", params={"from": "sip:+15550202@carrier.example"})
    unanswered = CallRecord(call_sid="CA-noanswer", transport="twilio", started_at=T0 + 2 * DAY,
                            ended_at=T0 + 2 * DAY + 30, end_reason="no-answer (Twilio: no-answer)",
                            dial={"via": "twilio", "to": "+15550303", "from": "+15550100", "outcome": "no-answer"})
    live = CallRecord(call_sid="CA-live", transport="webrtc", started_at=T0 + 3 * DAY)
    live.turns = [TurnRecord(turn=1, user_text=XSS, agent_text=XSS_AGENT, agent_text_heard=XSS_AGENT,
                             latency_ms={"transport_first_byte": 300.0}, at_s={"speech_end": 1.0})]
    return [transfer, hung_up, unanswered, live]


def write_recording(path, seconds: float = 12.0, rate: int = 8000) -> np.ndarray:
    """A two-channel WAV: the caller loud in the first half, the agent in the second."""
    n = int(seconds * rate)
    pcm = np.zeros((n, 2), np.int16)
    pcm[: n // 2, 0] = 16000
    pcm[n // 2:, 1] = 8000
    path.parent.mkdir(parents=True, exist_ok=True)
    wav = WavStreamWriter(path, sample_rate_hz=rate, channels=2)
    wav.write(pcm.astype("<i2").tobytes())
    wav.close()
    return pcm


def make_server(tmp_path, *, host: str = "127.0.0.1", api_token: str | None = API_TOKEN,
                recordings: bool = True) -> CallServer:
    folder = tmp_path / "recordings"
    server = CallServer(ServerConfig(host=host, port=0, twilio=False, api_token=api_token,
                                     pipeline=PipelineConfig(recordings_dir=str(folder) if recordings else None)),
                        agent_factory=lambda _info: EchoAgentProcessor())
    for record in sample_records(folder):
        server.store.open(record)
    write_recording(folder / "2026-11-30" / "CA-transfer.wav")
    return server


@pytest.fixture
async def ui_server(tmp_path):
    server = make_server(tmp_path)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()
