"""The model tier's recogniser client tells the server the VAD's pauses where they fell in the
audio, and tells them again, in place, to the replica that replays an utterance. The servers here
are stand-ins on loopback that keep what they were sent (the real server's use of a pause:
tests/deploy/test_model_server.py)."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import numpy as np
from aiohttp import web

from pipeline.engines.remote_recognizer import RemoteRecognizerEngine
from pipeline.engines.replicas import Replicas
from pipeline.model_wire import STT_PATH


class StandIn:
    """A ``/stt/websocket`` that keeps each stream's messages: the audio as its sample count, text
    as sent; it answers ``finalize`` with a final, or drops the stream at its first pause."""

    def __init__(self, *, drop_at_pause: bool = False) -> None:
        self.drop_at_pause = drop_at_pause
        self.streams: list[list[object]] = []
        self.runner: web.AppRunner | None = None
        self.url = ""

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get(STT_PATH, self._stream)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"ws://127.0.0.1:{self.runner.addresses[0][1]}"

    async def _stream(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        got: list[object] = []
        self.streams.append(got)
        async for msg in ws:
            if msg.type == aiohttp.WSMsgType.BINARY:
                if got and isinstance(got[-1], int):
                    got[-1] += len(msg.data) // 2       # audio between two texts: one count
                else:
                    got.append(len(msg.data) // 2)
                continue
            got.append(msg.data)
            if self.drop_at_pause and msg.data.startswith("{") and json.loads(msg.data)["type"] == "pause":
                await ws.close()
                break
            if msg.data == "finalize":
                await ws.send_str(json.dumps({"type": "transcript", "text": "heard", "is_final": True}))
        return ws

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()


PAUSED = json.dumps({"type": "pause", "paused": True})
SPEECH_AGAIN = json.dumps({"type": "pause", "paused": False})


async def _say(utt, frames: int) -> None:
    for _ in range(frames):
        utt.push(np.ones(160, np.int16).tobytes())
        await asyncio.sleep(0.005)


async def test_pauses_go_where_they_fell_in_the_audio_and_again_to_a_replica_that_replays_it():
    first, second = StandIn(drop_at_pause=True), StandIn()
    await first.start()
    await second.start()
    engine = RemoteRecognizerEngine(Replicas((first.url, second.url)))
    try:
        utt = engine.open(8000)
        await _say(utt, 10)
        utt.pause(True)                 # the VAD's stop timer starts ...
        await _say(utt, 3)
        utt.pause(False)                # ... and speech comes again
        await _say(utt, 5)
        utt.pause(True)
        for fut in utt.finish():
            await utt.take_async(fut)
    finally:
        await engine.close()
        await first.stop()
        await second.stop()
    assert utt.text == "heard" and engine.failovers == 1
    # the first replica heard the audio up to the first pause, and the pause, then dropped the stream
    assert first.streams == [[1600, PAUSED]]
    # the second was sent all of it again, each pause after the audio that came before it
    assert second.streams == [[1600, PAUSED, 480, SPEECH_AGAIN, 800, PAUSED, "finalize"]]
