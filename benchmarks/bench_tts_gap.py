"""Where does the SSM voice lose to its teacher on the phone line: in the vocoder, the phone
durations, the pitch and voicing, or the spectral envelope?

The shipped voice (joe) is meant to be understood on the line as well as its teacher
(Piper's joe voice fed parley's phones). ``bench_tts.py`` says how far it is; this says where the
difference comes from, by giving the student one part of the teacher's answer at a time. Each
sentence is said by the teacher once per rendering (Piper draws its own noise, so each rendering
has its own durations and audio; the noise is seeded, so every run hears the same renderings),
and from that rendering:

* ``teacher``: the teacher's audio (the target);
* ``copy``: the teacher's audio through ``vocoder.analyze`` and the vocoder again, no
  postfilter (what the vocoder alone costs: the floor any student of this vocoder starts from);
* ``student-env``: the student speaking with the teacher's durations, its pitch and voicing its
  own, the envelope the teacher's (what the student's pitch and voicing cost);
* ``student-f0``: the teacher's durations, pitch and voicing, the envelope the student's, with its
  postfilter (what the student's envelope costs);
* ``student-dur``: only the durations the teacher's (what the student's envelope, pitch and
  voicing cost together);
* ``student``: the student as it ships (its own durations too).

And the vocoder's own candidates (``--conditions`` picks any of them; the teacher is always said):

* ``copy-frac``: ``copy`` with each pitch pulse at its exact instant (``fractional``), not
  rounded to a whole sample (up to 62.5 us of jitter);
* ``copy-bap``: ``copy-frac`` with the excitation mixed band by band by the teacher's measured
  band aperiodicity (``vocoder.analyze_aperiodicity``), not the fixed pulses-below-3-kHz mix
  (what a student that predicted it could reach);
* ``student-frac``: the student as it ships with fractional pulses (no retraining needed).

Everything goes to 8 kHz G.711 mu-law and back; Whisper tiny.en transcribes it; WER against the
words parley's front end reads (as ``bench_tts.py``). Two sets of sentences, scored apart:
``bench_tts.py``'s fresh ones (``--fresh``, drawn new from the generator the training sentences
come from, in none of the voices' data sets) and its 108 agent replies written by hand
(``replies``: numbers, names, plain; ``--no-replies`` leaves them out). Each rendering uses
vocoder seed ``r`` for the student and the copy.

Per set and condition: WER, each rendering's WER, ``vs_teacher`` (the WER over the teacher's)
with a 95 % interval from a paired bootstrap over sentences (Whisper's verdicts on a voice move
by a tenth from one rendering to the next: a lone ratio misleads), how often the judge's
transcript of a sentence differs from its transcript of the teacher's rendering
(``changed_vs_teacher``), and the pace (audio seconds over the teacher's).

    .venv/bin/python benchmarks/bench_tts_gap.py [--voice joe] [--fresh 120] [--renders 2]

Prints one JSON line. About 0.4 s per clip on one core (rendering and judging): 6 conditions x
(120 + 108) sentences x 2 renderings, ~18 min.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from common import git_sha  # noqa: E402

import torch  # noqa: E402

from bench_tts import LINE_SENTENCES, _line, fresh_sentences  # noqa: E402
from line_scoring import ratio_95, sentence_errors, wer_of  # noqa: E402
from pipeline.voices import voice_dir  # noqa: E402
from ssm_engine.tts.synth import TTSStream, TTSVoice  # noqa: E402
from ssm_engine.tts.vocoder import (CEP0, LF0, VUV, analyze,  # noqa: E402
                                    analyze_aperiodicity, synthesize)

CONDITIONS = ("teacher", "copy", "student-env", "student-f0", "student-dur", "student",
              "copy-frac", "copy-bap", "student-frac")


class ForcedStream(TTSStream):
    """A stream of the student that takes each phone's frames from ``durations`` (the teacher's)
    and, where asked, its pitch and voicing or its envelope from ``teacher_feats`` (the teacher's
    audio analysed; one row per frame, aligned because the durations are the teacher's; a speech
    phone the teacher gave no frame still gets one, as every stream's does, and the rows after it
    then lag a frame)."""

    def __init__(self, voice: TTSVoice, durations: list[int], teacher_feats: np.ndarray, *,
                 seed: int, take_f0: bool, take_env: bool, postfilter: float) -> None:
        super().__init__(voice, seed=seed, chunk_frames=2, postfilter=postfilter)
        self._forced = durations
        self._teacher = teacher_feats
        self._take_f0 = take_f0
        self._take_env = take_env
        self._vocoded = 0

    def _phone_spoken(self, enc: torch.Tensor, log_dur: float) -> None:
        frames = self._forced[self._next]
        super()._phone_spoken(enc, float(np.log1p(frames)))

    def _vocode(self, feats: np.ndarray) -> None:
        if not (self._take_f0 or self._take_env):
            super()._vocode(feats)
            return
        n = len(feats)
        idx = np.minimum(np.arange(self._vocoded, self._vocoded + n), len(self._teacher) - 1)
        self._vocoded += n
        feats = feats.copy()
        if self._take_f0:
            feats[:, LF0] = self._teacher[idx, LF0]
            feats[:, VUV] = self._teacher[idx, VUV]
            self._taken_offsets = []        # the teacher's own pitch already rises
        if self._take_env:
            feats[:, CEP0:] = self._teacher[idx, CEP0:]
        super()._vocode(feats)


def _speak(stream: ForcedStream, text: str) -> np.ndarray:
    stream.push_text(text)
    stream.end_text()
    if stream.n_tokens != len(stream._forced):
        raise SystemExit(f"the stream read {stream.n_tokens} phones in {text!r}, phonemize "
                         f"{len(stream._forced)}: the teacher's durations would not line up")
    chunks = stream.pull()
    return np.concatenate([c.pcm for c in chunks]) if chunks else np.zeros(0, np.float32)


def fractional_voice(folder: str) -> TTSVoice:
    """The voice in ``folder`` with its config's ``fractional_pulses`` on (its weights as they are)."""
    import dataclasses

    voice = TTSVoice.load(folder)
    voice.model.config = dataclasses.replace(voice.model.config, fractional_pulses=True)
    return voice


def render(voice: TTSVoice, teacher, sentence: str, seed: int,
           conditions: tuple[str, ...] = CONDITIONS,
           frac_voice: TTSVoice | None = None) -> dict[str, np.ndarray]:
    """Each of ``conditions``' 16 kHz audio of ``sentence`` from one teacher rendering
    (``student-frac`` needs ``frac_voice``, ``fractional_voice`` of the same folder)."""
    from ssm_engine.tts.phonemes import phonemize

    audio, durations = teacher.say(phonemize(sentence))
    feats = analyze(audio)[: sum(durations)]
    pf = voice.postfilter
    out = {"teacher": audio}
    if "copy" in conditions:
        out["copy"] = synthesize(feats, seed=seed)
    if "copy-frac" in conditions:
        out["copy-frac"] = synthesize(feats, seed=seed, fractional=True)
    if "copy-bap" in conditions:
        bap = analyze_aperiodicity(audio[: len(feats) * 160], feats)
        out["copy-bap"] = synthesize(feats, seed=seed, fractional=True, bap=bap)
    for name, f0, env in (("student-env", False, True), ("student-f0", True, False),
                          ("student-dur", False, False)):
        if name in conditions:
            stream = ForcedStream(voice, durations, feats, seed=seed, take_f0=f0, take_env=env,
                                  postfilter=0.0 if env else pf)
            out[name] = _speak(stream, sentence)
    if "student" in conditions:
        out["student"] = voice.synthesize(sentence, seed=seed).pcm
    if "student-frac" in conditions:
        assert frac_voice is not None, "student-frac needs frac_voice"
        out["student-frac"] = frac_voice.synthesize(sentence, seed=seed).pcm
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--voice", default="joe",
                        help="the SSM voice: a shipped name or a folder (default joe; its teacher "
                        "must be Piper's joe)")
    parser.add_argument("--fresh", type=int, default=120,
                        help="sentences drawn new, as bench_tts.py --fresh (default %(default)s; "
                        "0: the replies alone)")
    parser.add_argument("--no-replies", dest="replies", action="store_false",
                        help="leave out bench_tts.py's 108 hand-written replies")
    parser.add_argument("--bootstrap", type=int, default=2000,
                        help="resamples of the sentences for the ratios' intervals (default %(default)s)")
    parser.add_argument("--renders", type=int, default=2,
                        help="teacher renderings of each sentence (default %(default)s)")
    parser.add_argument("--errors", default="", help="write each condition's misheard sentences here")
    parser.add_argument("--conditions", nargs="+", choices=CONDITIONS[1:], default=list(CONDITIONS[1:]),
                        help="what to say beside the teacher (default: all)")
    args = parser.parse_args()
    conditions = ("teacher", *args.conditions)
    if args.fresh < 0 or args.renders < 1:
        parser.error("--fresh must be 0 or more and --renders at least 1")
    if not args.fresh and not args.replies:
        parser.error("nothing to say: --fresh 0 with --no-replies")
    from harness.stt_eval import make_engine
    from harness.tts_eval import judge_wer
    from ssm_engine.tts.piper_teacher import PiperTeacher

    torch.set_num_threads(1)
    logging.getLogger().setLevel(logging.WARNING)
    folder = str(voice_dir(args.voice))
    voice = TTSVoice.load(folder)
    frac_voice = fractional_voice(folder) if "student-frac" in conditions else None
    teacher = PiperTeacher(seed=0)
    sets = {"fresh": fresh_sentences(args.fresh)} if args.fresh else {}
    if args.replies:
        sets["replies"] = [x for v in LINE_SENTENCES.values() for x in v]
    sentences = [x for v in sets.values() for x in v]
    set_of = [k for k, v in sets.items() for _ in v] * args.renders
    started = time.perf_counter()
    clips: dict[str, list[np.ndarray]] = {c: [] for c in conditions}
    for r in range(args.renders):
        for i, s in enumerate(sentences):
            for name, pcm in render(voice, teacher, s, seed=r, conditions=conditions,
                                    frac_voice=frac_voice).items():
                clips[name].append(_line(pcm, 16000))
            print(f"\rrendered {r * len(sentences) + i + 1}/{args.renders * len(sentences)}",
                  end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    judge = make_engine("whisper", 8000)
    refs = sentences * args.renders
    pairs = {name: judge_wer(judge, refs, audio)[1] for name, audio in clips.items()}
    out: dict = {"bench": "tts_gap", "git": git_sha(), "voice": folder,
                 "postfilter": voice.postfilter, "renders": args.renders,
                 "sentences": {k: len(v) for k, v in sets.items()},
                 "judge": "whisper tiny.en, 8 kHz mu-law"}
    rng = np.random.default_rng(0)
    for set_name in sets:
        rows = [k for k, t in enumerate(set_of) if t == set_name]
        n = len(sets[set_name])
        counts = {c: sentence_errors([pairs[c][k] for k in rows], n) for c in conditions}
        interval = ratio_95(counts, "teacher", rng, args.bootstrap)
        block: dict = {}
        teacher_audio_s = sum(len(clips["teacher"][k]) for k in rows) / 8000
        for c in conditions:
            err, words = counts[c].sum(axis=0)
            each = [wer_of([pairs[c][k] for k in rows[r * n:(r + 1) * n]]) for r in range(args.renders)]
            changed = sum(pairs[c][k]["hyp"] != pairs["teacher"][k]["hyp"] for k in rows)
            entry = {"wer": round(err / words, 4), "wer_renders": each,
                     "changed_vs_teacher": round(changed / len(rows), 3),
                     "pace_vs_teacher": round(sum(len(clips[c][k]) for k in rows) / 8000
                                              / teacher_audio_s, 3)}
            if c != "teacher":
                t = counts["teacher"][:, 0].sum()
                entry["vs_teacher"] = round(err / t, 3) if t else None
                entry["vs_teacher_95"] = interval[c]
            block[c] = entry
        out[set_name] = block
    out["wall_s"] = round(time.perf_counter() - started, 1)
    if args.errors:
        Path(args.errors).write_text(json.dumps(
            {n: [p for p in pairs[n] if p["ref"] != p["hyp"]] for n in conditions}, indent=1) + "\n")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
