"""The remote voice's failover, where the stream breaks between a word's stamp and its audio.

Two model-server stand-ins on 127.0.0.1 speak parley's TTS wire (Cartesia's shape: a context's
``timestamps`` come just before the ``chunk`` their words start in, then ``done``). The first
utterance served anywhere is cut after the second word's stamp, before its chunk (the replica
died), so that word was stamped but never heard; the other replica then speaks what is asked
whole. Seen in the SageMaker stream test (two runs in five, alone): the word was lost.
"""

from __future__ import annotations

import base64
import json

import numpy as np
from aiohttp import WSMsgType, web

from pipeline.engines.remote_voice import RemoteVoiceEngine
from pipeline.engines.replicas import Replicas
from pipeline.model_wire import TTS_PATH

TEXT = "Thank you for calling the dental office."
WORD_SAMPLES = 800          # 0.1 s a word at 8 kHz


class Replica:
    """One stand-in model server; ``cut_first`` is shared by both, so exactly one request is cut."""

    def __init__(self, cut_first: list[bool]) -> None:
        self.cut_first = cut_first
        self.requests: list[str] = []
        self.runner: web.AppRunner | None = None
        self.url = ""

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get(TTS_PATH, self._socket)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = self.runner.addresses[0][1]
        self.url = f"ws://127.0.0.1:{port}"

    async def _socket(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        async for msg in ws:
            if msg.type != WSMsgType.TEXT:
                continue
            req = json.loads(msg.data)
            if "transcript" not in req:
                continue                                      # a cancel
            cid, words = req["context_id"], req["transcript"].split()
            self.requests.append(req["transcript"])
            cut = self.cut_first[0]
            self.cut_first[0] = False
            for i, word in enumerate(words):
                await ws.send_str(json.dumps({"type": "timestamps", "context_id": cid, "word_timestamps": {
                    "words": [word.strip(".,").lower()], "start": [i * WORD_SAMPLES / 8000],
                    "end": [(i + 1) * WORD_SAMPLES / 8000]}}))
                if cut and i == 1:                            # stamped, never heard: the replica dies
                    await ws.close()
                    return ws
                pcm = np.full(WORD_SAMPLES, 1000 + i, "<i2").tobytes()
                await ws.send_str(json.dumps({"type": "chunk", "context_id": cid,
                                              "data": base64.b64encode(pcm).decode()}))
            await ws.send_str(json.dumps({"type": "done", "context_id": cid}))
        return ws

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()


async def test_a_word_stamped_before_the_stream_broke_is_said_and_reported_on_the_next_replica():
    cut_first = [True]
    replicas = [Replica(cut_first), Replica(cut_first)]
    for r in replicas:
        await r.start()
    engine = RemoteVoiceEngine(Replicas(tuple(r.url for r in replicas)))
    words: list[str] = []
    chunk_values: list[int] = []
    try:
        async for chunk in engine.open(8000).speak(TEXT):
            words += [w for w, _ in chunk.words]
            chunk_values.append(int(chunk.pcm[0]))
    finally:
        await engine.close()
        for r in replicas:
            await r.stop()

    assert engine.failovers == 1
    # every word reported once, in order: "you" was stamped on the broken stream and not lost
    assert words == ["thank", "you", "for", "calling", "the", "dental", "office"]
    # the second replica was asked from the last word heard ("thank", said again from its start)
    asked = [t for r in replicas for t in r.requests]
    assert asked == [TEXT, TEXT], asked
    # the audio: "thank" from the first replica, then the whole text from the second
    assert chunk_values == [1000, 1000, 1001, 1002, 1003, 1004, 1005, 1006]
