"""Who answered an outbound call: how well does ``pipeline.answering`` tell a person from a machine?

One seeded run over the labelled answers of ``harness/answering_set.py`` (built first with
``--build``): people (recorded and synthetic) saying a short greeting and waiting, machines
(synthetic voicemail, carrier and call-screener greetings, with and without a beep) and silence,
all 8 kHz through the mu-law phone channel, fed to the detector in 20 ms frames as a call would.
The shipped recogniser (``models/stt``) hears each answer's first ``max_decide_s`` first, 20 ms at
a time, as ``pipeline.answering_words`` runs it on a call: its greedy partials, and at the
callee's first pause the final pass of the greeting so far, placed in time where it would have
come (its wall time after the pause); the detector with words reads the text that had come by
each moment (``words=``; the stream's own few milliseconds a step are not modelled).

    .venv/bin/python benchmarks/bench_answering.py --build [--data data/answering] [--seed 0] \
        [--manifest data/stt/human2/human.tsv] [--no-words]

Measured on the ``report`` half (the ``tune`` half chose the thresholds; The Ur-Quan Masters
clips are measure-only, all in ``report``), in one run on the same answers: the detector as
configured by default with the recogniser's words and without them, and a timing-only rule (what
LiveKit- and pipecat-style detectors do: ``human`` if the first speech burst is shorter than
1.8 s and followed by 0.8 s of silence, else ``machine``; nobody speaking in 3 s is ``unknown``):

* accuracy, overall, per class and per group, and the confusion (label -> decided kind);
* time to decide, p50/p95/p99 seconds from the answer, and the share decided within 3 s;
* beeps: the share of beeps found, onset error (ms), and the lag from the end of the beep (or of
  a greeting with no beep) to the detector's final "speak now" decision; beeps heard on people;
* CPU per 20 ms frame (us), and the recogniser's CPU per answer (s, for its first ``max_decide_s``);
* with words: the decisions the words made, and machine phrases heard on people (false alarms).

The same run repeats the threshold grids on the tune half (``tuned`` without words, ``tuned_words``
with them: the best accuracy, then the smallest p95 time to decide) so a reader can see the
defaults are that choice. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import git_sha, percentiles  # noqa: E402

from harness.answering_set import AnswerItem, build_answering_set, load_answering_set  # noqa: E402
from pipeline.answering import AnsweringConfig, AnsweringDetector  # noqa: E402
from pipeline.audio.wav import read_wav  # noqa: E402

FRAME = 160                     # 20 ms at 8 kHz
GRID_MAX_GREETING_S = (1.2, 1.5, 1.8, 2.1, 2.4)
GRID_PAUSE_S = (0.5, 0.6, 0.7, 0.9)
GRID_DEADLINE_MACHINE_S = (0.8, 1.0, 1.2, 1.5)
GRID_WORDS_TOLERANCE = (0.15, 0.2, 0.25, 0.3)
GRID_WORDS_MAX_GREETING_S = (1.5, 2.0, 2.5, 3.0)
GRID_WORDS_DEADLINE_S = (1.5, 2.0, 2.5)
GRID_WORDS_PERSON_CUES = (True, False)

Timeline = list[tuple[float, str]]
"""A recogniser's partials over an answer: (seconds of audio heard, the text then), as it changed."""


@dataclass(frozen=True, slots=True)
class Outcome:
    kind: str
    decided_s: float
    ready_s: float | None           # the final decision (a machine's "speak now")
    beep_at_s: float | None
    frame_us: float
    reason: str = ""                # the first decision's
    heard: str = ""                 # the partial the detector last read


class TimingRule:
    """The baseline: the first speech burst's length and the silence after it, nothing else."""

    def __init__(self, *, max_greeting_s: float = 1.8, pause_s: float = 0.8, no_speech_s: float = 3.0,
                 speech_floor_dbfs: float = -45.0) -> None:
        import webrtcvad

        self._vad = webrtcvad.Vad(3)
        self._max, self._pause, self._none, self._floor = max_greeting_s, pause_s, no_speech_s, speech_floor_dbfs

    def run(self, pcm: np.ndarray) -> tuple[str, float]:
        start = last = None
        for i in range(len(pcm) // FRAME):
            frame = pcm[i * FRAME: (i + 1) * FRAME]
            t = (i + 1) * 0.02
            loud = 10 * np.log10(np.mean(frame.astype(np.float64) ** 2) / 32768.0 ** 2 + 1e-12) > self._floor
            if loud and self._vad.is_speech(frame.tobytes(), 8000):
                start = i if start is None else start
                last = i
            if start is None:
                if t >= self._none:
                    return "unknown", t
            elif (last - start + 1) * 0.02 > self._max:
                return "machine", t
            elif (i - last) * 0.02 >= self._pause:
                return "human", t
        return ("unknown" if start is None else "human"), len(pcm) / 8000


class Recogniser:
    """The shipped recogniser as ``pipeline.answering_words`` runs it on a call: greedy partials
    of the stream, then, at the callee's first pause of ``FINAL_AFTER_S``, the final pass of the
    greeting so far (beam-searched with the LM, as ``parley serve`` decodes finals)."""

    def __init__(self) -> None:
        import torch

        from pipeline.engines.ssm_recognizer import DEFAULT_MODEL_DIR, SSMSTTEngine

        torch.set_num_threads(1)
        self.engine = SSMSTTEngine(DEFAULT_MODEL_DIR, decoder="beam")

    def partials(self, pcm: np.ndarray, until_s: float) -> tuple[Timeline, float]:
        """The words over ``pcm``'s first ``until_s`` and the CPU seconds they took (the
        process's: the runner's and the final pass's threads included). The final's text is
        placed where it would have come on a call: its wall time after the pause."""
        from pipeline.answering_words import FINAL_AFTER_S

        utt = self.engine.open(8000)
        quiet = AnsweringDetector(AnsweringConfig())        # its quiet_s says when the pause came
        cpu0 = time.process_time()
        timeline: Timeline = []
        text = ""
        n = min(len(pcm), int(until_s * 8000))
        for i in range(0, n - FRAME + 1, FRAME):
            fut = utt.push(pcm[i: i + FRAME])
            if fut is not None:
                utt.take(fut.result())
            if utt.text != text:
                text = utt.text
                timeline.append(((i + FRAME) / 8000, text))
            quiet.push(pcm[i: i + FRAME])
            if (quiet.quiet_s or 0.0) >= FINAL_AFTER_S:
                t0 = time.perf_counter()
                final = utt.finish_sync()
                timeline.append(((i + FRAME) / 8000 + time.perf_counter() - t0, final))
                return timeline, time.process_time() - cpu0
        utt.abort()
        return timeline, time.process_time() - cpu0

    def close(self) -> None:
        self.engine.close()


class Replay:
    """A ``words`` callable: the partial that had come by the detector's moment."""

    def __init__(self, timeline: Timeline) -> None:
        self.timeline = timeline
        self.detector: AnsweringDetector | None = None
        self.text = ""

    def __call__(self) -> str:
        assert self.detector is not None
        self.text = ""
        for t, partial in self.timeline:
            if t > self.detector.heard_s:
                break
            self.text = partial
        return self.text


def detect(pcm: np.ndarray, config: AnsweringConfig, words: Timeline | None = None) -> Outcome:
    """One answer through a detector; with ``words``, the partial that had come by each moment."""
    replay = Replay(words) if words is not None else None
    det = AnsweringDetector(config, words=replay)
    if replay is not None:
        replay.detector = det
    spent = 0
    frames = 0
    for i in range(0, len(pcm) - FRAME + 1, FRAME):
        t0 = time.perf_counter_ns()
        det.push(pcm[i: i + FRAME])
        spent += time.perf_counter_ns() - t0
        frames += 1
        if det.done:
            break
    det.finish()
    first, last = det.decisions[0], det.decisions[-1]
    return Outcome(first.kind, first.at_s, last.at_s if last.kind == "machine" else None, last.beep_at_s,
                   spent / 1000 / max(frames, 1), first.reason, replay.text if replay is not None else "")


def _accuracy(pairs: list[tuple[str, str]]) -> float | None:
    return round(sum(a == b for a, b in pairs) / len(pairs), 4) if pairs else None


def score(items: list[AnswerItem], kinds: list[str], times: list[float]) -> dict:
    """Accuracy (overall, per class, per group), confusion and time to decide."""
    pairs = [(it.label, k) for it, k in zip(items, kinds)]
    by_class: dict[str, list] = defaultdict(list)
    by_group: dict[str, list] = defaultdict(list)
    confusion: dict[str, Counter] = defaultdict(Counter)
    for it, k in zip(items, kinds):
        by_class[it.label].append((it.label, k))
        by_group[it.group].append((it.label, k))
        confusion[it.label][k] += 1
    return {"accuracy": _accuracy(pairs),
            "per_class": {c: _accuracy(v) for c, v in sorted(by_class.items())},
            "per_group": {g: _accuracy(v) for g, v in sorted(by_group.items())},
            "confusion": {c: dict(sorted(v.items())) for c, v in sorted(confusion.items())},
            "decide_s": percentiles(times, digits=2),
            "within_3s": round(float(np.mean([t <= 3.0 for t in times])), 4) if times else None}


def beeps(items: list[AnswerItem], outcomes: list[Outcome]) -> dict:
    onset_err, beep_lag, end_lag = [], [], []
    found = wanted = false_on_people = 0
    for it, o in zip(items, outcomes):
        if it.label == "human" and o.beep_at_s is not None:
            false_on_people += 1
        if it.label != "machine":
            continue
        if it.beep_at_s is None:
            if o.ready_s is not None and it.speech_end_s is not None:
                end_lag.append(1000 * (o.ready_s - it.speech_end_s))
            continue
        wanted += 1
        if o.beep_at_s is not None:
            found += 1
            onset_err.append(1000 * (o.beep_at_s - it.beep_at_s))
            if o.ready_s is not None and it.beep_end_s is not None:
                beep_lag.append(1000 * (o.ready_s - it.beep_end_s))
    return {"found": round(found / wanted, 4) if wanted else None, "n": wanted,
            "onset_error_ms": percentiles(onset_err), "abs_onset_error_ms": percentiles(np.abs(onset_err)),
            "ready_after_beep_end_ms": percentiles(beep_lag),
            "ready_after_greeting_end_ms_no_beep": percentiles(end_lag),
            "beeps_heard_on_people": false_on_people}


def _best(items: list[AnswerItem], audio: dict[str, np.ndarray], grid: list[dict],
          words: dict[str, Timeline] | None) -> dict:
    """The grid's best point on ``items``: best accuracy, then the smallest p95 time to decide
    (the first such point in the grid's order)."""
    best: tuple | None = None
    for point in grid:
        cfg = replace(AnsweringConfig(), **point)
        outs = [detect(audio[it.id], cfg, words[it.id] if words is not None else None) for it in items]
        acc = _accuracy([(it.label, o.kind) for it, o in zip(items, outs)]) or 0.0
        p95 = float(np.percentile([o.decided_s for o in outs], 95))
        key = (-acc, p95)
        if best is None or key < best[0]:
            best = (key, {**point, "accuracy": acc, "decide_p95_s": round(p95, 2)})
    assert best is not None
    return best[1]


def tune(items: list[AnswerItem], audio: dict[str, np.ndarray]) -> dict:
    """The timing thresholds on the tune half, without words."""
    grid = [{"human_max_greeting_s": g, "human_pause_s": p, "deadline_machine_s": d}
            for g, p, d in itertools.product(GRID_MAX_GREETING_S, GRID_PAUSE_S, GRID_DEADLINE_MACHINE_S)]
    return _best(items, audio, grid, None)


def tune_words(items: list[AnswerItem], audio: dict[str, np.ndarray], words: dict[str, Timeline]) -> dict:
    """The words' thresholds on the tune half (the timing ones as configured)."""
    grid = [{"words_tolerance": t, "words_max_greeting_s": g, "words_deadline_machine_s": d,
             "words_person_cues": pc}
            for t, g, d, pc in itertools.product(GRID_WORDS_TOLERANCE, GRID_WORDS_MAX_GREETING_S,
                                                 GRID_WORDS_DEADLINE_S, GRID_WORDS_PERSON_CUES)]
    return _best(items, audio, grid, words)


def word_decisions(items: list[AnswerItem], outcomes: list[Outcome]) -> dict:
    """What the words decided: machine phrases heard on machines, and on people (the false
    alarms, each with the partial that set it off)."""
    said = [(it, o) for it, o in zip(items, outcomes) if o.reason.startswith("the greeting says")]
    return {"machine_phrase_on_machines": sum(it.label == "machine" for it, _ in said),
            "machines": sum(it.label == "machine" for it in items),
            "machine_phrase_on_people": [{"id": it.id, "reason": o.reason, "heard": o.heard}
                                         for it, o in said if it.label != "machine"],
            "people": sum(it.label == "human" for it in items)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default="data/answering")
    ap.add_argument("--build", action="store_true", help="(re)build the labelled set first")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--manifest", default="data/stt/human2/human.tsv")
    ap.add_argument("--no-tune", action="store_true", help="skip the grids on the tune half")
    ap.add_argument("--no-words", action="store_true", help="no recogniser: the detector without words only")
    ap.add_argument("--words-cache", help="a JSON file of the partials (written if missing; a quick re-run)")
    args = ap.parse_args()
    t0 = time.perf_counter()
    if args.build or not (Path(args.data) / "labels.jsonl").exists():
        build_answering_set(args.data, seed=args.seed, manifest=args.manifest)
    build_s = time.perf_counter() - t0
    items = load_answering_set(args.data)
    audio = {it.id: read_wav(Path(args.data) / it.path)[0] for it in items}
    tune_items = [it for it in items if it.split == "tune"]
    report = [it for it in items if it.split == "report"]
    config = AnsweringConfig()

    words: dict[str, Timeline] | None = None
    words_cpu: list[float] = []
    recognise_s = 0.0
    if not args.no_words:
        t1 = time.perf_counter()
        cache = Path(args.words_cache) if args.words_cache else None
        if cache is not None and cache.exists():
            saved = json.loads(cache.read_text(encoding="utf-8"))
            words = {k: [(t, x) for t, x in v["timeline"]] for k, v in saved.items()}
            words_cpu = [v["cpu_s"] for v in saved.values()]
        else:
            rec = Recogniser()
            rec.partials(audio[report[0].id], config.max_decide_s)      # warm-up
            words = {}
            for it in items:
                words[it.id], cpu_s = rec.partials(audio[it.id], config.max_decide_s)
                words_cpu.append(cpu_s)
            rec.close()
            if cache is not None:
                cache.write_text(json.dumps({k: {"timeline": words[k], "cpu_s": c}
                                             for k, c in zip(words, words_cpu)}), encoding="utf-8")
        recognise_s = time.perf_counter() - t1

    detect(audio[report[0].id], config)          # warm-up (imports, FFT plans)
    outcomes = [detect(audio[it.id], config) for it in report]
    rule = TimingRule()
    base = [rule.run(audio[it.id]) for it in report]
    tune_outcomes = [detect(audio[it.id], config) for it in tune_items]
    with_words = [detect(audio[it.id], config, words[it.id]) for it in report] if words else None
    out = {
        "bench": "answering",
        "git": git_sha(),
        "seed": args.seed,
        "items": {"report": len(report), "tune": len(tune_items),
                  "report_by_group": dict(sorted(Counter(it.group for it in report).items()))},
        "config": {"human_max_greeting_s": config.human_max_greeting_s,
                   "human_pause_s": config.human_pause_s, "deadline_machine_s": config.deadline_machine_s,
                   "max_decide_s": config.max_decide_s,
                   "no_speech_s": config.no_speech_s, "greeting_end_s": config.greeting_end_s,
                   "vad_mode": config.vad_mode, "speech_floor_dbfs": config.speech_floor_dbfs,
                   "tone_ratio": config.tone_ratio, "beep_min_s": config.beep_min_s,
                   "beep_drift_hz": config.beep_drift_hz, "beep_level_db": config.beep_level_db,
                   "words": None if words is None else {
                       "recogniser": "models/stt greedy partials", "tolerance": config.words_tolerance,
                       "max_greeting_s": config.words_max_greeting_s,
                       "deadline_machine_s": config.words_deadline_machine_s,
                       "person_cues": config.words_person_cues}},
        "detector_words": None if with_words is None else
        score(report, [o.kind for o in with_words], [o.decided_s for o in with_words]),
        "detector": score(report, [o.kind for o in outcomes], [o.decided_s for o in outcomes]),
        "baseline_timing_rule": score(report, [k for k, _ in base], [t for _, t in base]),
        "words_decided": None if with_words is None else word_decisions(report, with_words),
        "beep": beeps(report, outcomes),
        "beep_words": None if with_words is None else beeps(report, with_words),
        "detector_on_tune_half": _accuracy([(it.label, o.kind) for it, o in zip(tune_items, tune_outcomes)]),
        "frame_cpu_us": percentiles([o.frame_us for o in outcomes]),
        "frame_cpu_us_words": None if with_words is None else percentiles([o.frame_us for o in with_words]),
        "recogniser_cpu_s_per_answer": percentiles(words_cpu, digits=3) if words_cpu else None,
        "recogniser_cpu_s_total": round(sum(words_cpu), 1) if words_cpu else None,
        "tuned": None if args.no_tune else tune(tune_items, audio),
        "tuned_words": None if args.no_tune or words is None else tune_words(tune_items, audio, words),
        "build_s": round(build_s, 1),
        "recognise_s": round(recognise_s, 1),
        "wall_s": round(time.perf_counter() - t0, 1),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
