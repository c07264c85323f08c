"""``parley chat``'s voice: each reply spoken with a shipped voice, played on the machine's speaker
(``--voice``) and/or kept as WAV files (``--voice-out DIR``).

    voice = ChatVoice.open("joe", play=True, out_dir=None, note=print)   # says once if no speaker
    voice.speak("We are open Monday to Friday.")   # blocks while it plays

The voice is the one calls speak with (``ssm_engine.tts``, 16 kHz, the whole reply at once:
here nobody waits on the first chunk). Without a speaker (``pipeline.audio.speaker``) the chat
goes on in text and says why once; the files are written either way.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path


from agent.errors import AgentError
from pipeline.audio.pcm import float_to_int16
from pipeline.audio.speaker import Speaker, SpeakerUnavailable
from pipeline.audio.wav import write_wav

__all__ = ["ChatVoice"]


class ChatVoice:
    def __init__(self, tts, *, speaker: Speaker | None, out_dir: Path | None,
                 note: Callable[[str], None]) -> None:
        self._tts = tts
        self.speaker = speaker
        self.out_dir = out_dir
        self._note = note
        self.spoken = 0

    @classmethod
    def open(cls, voice: str, *, play: bool, out_dir: str | Path | None,
             note: Callable[[str], None]) -> ChatVoice:
        """Load ``voice`` (a shipped voice's name or a folder); find the speaker when ``play``."""
        from pipeline.engines.ssm_voice import check_voice_dir
        from pipeline.errors import PipelineError
        from pipeline.voices import voice_dir
        from ssm_engine.tts.errors import TTSError
        from ssm_engine.tts.synth import TTSVoice

        try:
            tts = TTSVoice.load(check_voice_dir(voice_dir(voice)))
        except (OSError, TTSError, PipelineError) as exc:
            raise AgentError(f"--voice {voice}: {exc}") from exc
        speaker = None
        if play:
            try:
                speaker = Speaker.find()
            except SpeakerUnavailable as exc:
                note(f"[no speaker: {exc}; the replies stay text"
                     + ("" if out_dir else " (--voice-out DIR keeps them as WAV files)") + "]")
        folder = Path(out_dir) if out_dir else None
        if folder is not None:
            folder.mkdir(parents=True, exist_ok=True)
        return cls(tts, speaker=speaker, out_dir=folder, note=note)

    def speak(self, text: str) -> None:
        """Say one reply: written to ``out_dir`` (``NNN-agent.wav``) and played, as asked."""
        from ssm_engine.tts.errors import TTSError

        try:
            synthesis = self._tts.synthesize(text)
        except TTSError as exc:           # nothing speakable ("..."): the text stands
            self._note(f"[not spoken: {exc}]")
            return
        pcm = float_to_int16(synthesis.pcm)
        rate = self._tts.sample_rate_hz
        self.spoken += 1
        if self.out_dir is not None:
            write_wav(self.out_dir / f"{self.spoken:03d}-agent.wav", pcm, rate)
        if self.speaker is not None:
            try:
                self.speaker.play(pcm, rate)
            except SpeakerUnavailable as exc:
                self._note(f"[the speaker stopped: {exc}; the replies stay text]")
                self.speaker = None
