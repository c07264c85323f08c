"""A labelled set of outbound-call answers for the person/machine detector (``pipeline.answering``).

    python -m harness.answering_set --out data/answering --seed 0
    items = build_answering_set("data/answering", seed=0)    # also writes labels.jsonl + wav/

Every item is what the caller hears from the moment of answer, 8 kHz through the G.711 mu-law phone
channel (band-passed 300-3400 Hz, line noise at -70..-50 dBFS), labelled ``human``, ``machine`` or
``unknown``, in groups:

* ``human_recorded``: real people from the human development set (``data/stt/human2``, its
  Debian-packaged sources), a short first word or phrase (at most ``HUMAN_MAX_S``; longer clips cut
  at their first pause or quietest frame), then silence; some say a second phrase after a pause.
* ``human_uqm``: the same from The Ur-Quan Masters clips. They are measure-only (never tuned on), so
  every one is in the ``report`` split.
* ``human_synth``: synthetic voices saying "hello?", "yes?", "hi, this is Sam"...
* ``machine_beep`` / ``machine_nobeep``: voicemail, carrier and call-screener greetings spoken by
  synthetic voices, sentence by sentence with short pauses, with or without a beep (440-1400 Hz,
  0.3-1.0 s) after them.
* ``silence``: nobody speaks (line noise only).

Items other than ``human_uqm`` are split in halves by the seed: ``tune`` (thresholds are chosen on
it) and ``report`` (figures are reported on it). The Asterisk prompt recordings are never used.
The same seed writes the same texts, voices, timings and noise; Piper's and Kokoro's own generator
noise is unseeded, so their samples differ slightly between runs.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from harness.stt_eval import phone_channel
from pipeline.audio.wav import trim_silence, write_wav
from ssm_engine.data.audio import read_wav, resample
from ssm_engine.data.augment import band_pass
from ssm_engine.data.human import check_not_reserved, split_on_pauses
from ssm_engine.data.manifest import read_manifest
from ssm_engine.data.voices import voice

RATE_HZ = 8000
HUMAN_MAX_S = 2.0
HUMAN_MANIFEST = Path("data/stt/human2/human.tsv")     # `parley data human` writes it
VOICES = ("flite:slt", "flite:rms", "flite:awb", "flite:kal16", "espeak:en-us+f3",
          "espeak:en-us+m1", "festival:cmu_us_slt_arctic_hts", "piper:joe", "kokoro:jm_kumo",
          "kokoro:jf_alpha")
NAMES = ("Alex", "Dana", "Sam", "Priya", "Marcus", "Elena", "Tom", "Keiko", "Luis", "Grace")
HELLOS = ("hello?", "yes?", "hi, this is {name}", "hello, {name} speaking", "hello?", "yeah?",
          "hi there", "hello, who is this?", "good afternoon", "{name} here", "hey", "speaking")
SECOND = ("hello?", "hello, who is this?", "hello? anyone there?", "yes, who's calling?", "hi?")
GREETINGS = (
    "Hi, you've reached {name}. I can't come to the phone right now. Please leave a message after the tone.",
    "Hey, it's {name}. Leave a message.",
    "Leave a message.",
    "Please leave a message after the beep.",
    "You have reached the voicemail of {name}. Please leave your name and number and I will call you back.",
    "The person you are calling is not available. Please leave a message after the tone.",
    "The number you have dialed is not available. At the tone, please record your message. When you "
    "are finished, hang up.",
    "Hello, this is {name}. Sorry I missed your call. Leave me a message and I'll get back to you.",
    "Hi, this is {name}, I'm away from my desk. Please leave a message.",
    "You've reached {name} at {company}. I'm either on the other line or away from my desk. Leave your "
    "name, number and a brief message and I'll return your call as soon as possible.",
    "Thank you for calling {company}. Our office is currently closed. Please leave a message.",
    "Hi! You've got {name}. Do your thing at the beep.",
    "{name} can't take your call. Leave a message.",
    "Your call has been forwarded to an automatic voice message system. {name} is not available.",
    "The mailbox belongs to {name}. Please leave a message.",
    "Hello. Hello? Ha, got you, this is voicemail. Leave a message.",
    "Hi, the person you're calling is using a screening service. Please say your name and why you're "
    "calling.",
    "Please stay on the line. The person you are calling is screening calls. State your name after the "
    "tone.",
    "Hello, you have reached the {name} family. We can't get to the phone. Please leave a message.",
    "Hi, this is {name}. I'm out of the office until Monday. For urgent matters call my colleague. "
    "Otherwise leave a message.",
    "Hey there, {name} here. Text me, I don't check voicemail.",
    "Sorry, the mailbox is full and cannot accept any messages at this time. Goodbye.",
    "The wireless customer you are calling is not available. Please try your call again later.",
    "Hi, you've reached {company}. If you know your party's extension, dial it now. Otherwise leave a "
    "message.",
    "This is {name}. Leave your message.",
    "Hello, you've reached {name}. I'm busy right now, but leave a message and I'll call you back.",
    "We're sorry, {name} is unavailable. Please record your message after the tone.",
    "Hi, this is {name} with {company}. I'm with a customer. Please leave your name and number.",
    "You have reached {number}. Please leave a message.",
    "Hello, you've reached {name}'s phone. Leave a message.",
    "Welcome to the voice mail system. {name} is not available.",
    "Hi, it's {name}. I'm on vacation until the tenth. Leave a message or email me.",
    "Not here. Leave a message.",
    "Hello, this is the {name} residence. We're not home. Please leave a message after the beep.",
    "Hi, you've reached {name}. If this is urgent, please call my mobile. Otherwise leave a message and "
    "I'll return your call.",
    "At the tone, please record your message.",
    "Hi, {name} here. I'll call you back.",
    "The subscriber cannot be reached. Please leave a message after the tone.",
    "Thanks for calling {name}. Please leave a message, and have a great day.",
    "Hello, you have reached {company} customer service. All our agents are busy. Please leave a "
    "message and we will call you back.",
)
COMPANIES = ("Acme Plumbing", "Northside Dental", "Blue River Insurance", "Parker and Sons")
GROUP_SIZES = {"human_recorded": 60, "human_uqm": 30, "human_synth": 50, "machine": 110,
               "silence": 10}


@dataclass(frozen=True, slots=True)
class AnswerItem:
    """One labelled answer: its WAV (relative to the set's folder) and what is in it."""

    id: str
    label: str                      # human | machine | unknown
    group: str
    split: str                      # tune | report
    path: str
    voice: str
    text: str                       # what is said (a recorded clip: its whole transcript, of which
                                    # the item may hold only the opening words)
    speech_start_s: float | None
    speech_end_s: float | None      # end of the first greeting
    beep_at_s: float | None
    beep_end_s: float | None
    duration_s: float


def _level(x: np.ndarray, dbfs: float) -> np.ndarray:
    rms = float(np.sqrt(np.mean(x.astype(np.float64) ** 2))) or 1.0
    return (x * (10 ** (dbfs / 20) / rms)).astype(np.float32)


def _trimmed(x: np.ndarray, rate: int) -> np.ndarray:
    """Float speech at RATE_HZ without its leading and trailing silence."""
    y = resample(np.asarray(x, np.float32), rate, RATE_HZ)
    pcm = np.clip(np.round(y * 32767), -32768, 32767).astype(np.int16)
    return trim_silence(pcm, RATE_HZ, threshold_ratio=0.05).astype(np.float32) / 32768.0


def _say(name: str, text: str, rng: np.random.Generator) -> np.ndarray:
    x, rate = voice(name).synthesize(text, rng)
    return _trimmed(x, rate)


def _greeting(name: str, text: str, rng: np.random.Generator) -> np.ndarray:
    """A greeting sentence by sentence, joined by pauses a recorded greeting has (0.15-0.6 s)."""
    parts: list[np.ndarray] = []
    for sentence in [s.strip() for s in text.replace("?", "?|").replace(".", ".|").split("|") if s.strip()]:
        if parts:
            parts.append(np.zeros(int(rng.uniform(0.15, 0.6) * RATE_HZ), np.float32))
        parts.append(_say(name, sentence, rng))
    return np.concatenate(parts)


def _first_words(x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A recorded clip's opening: its first pause-bounded span, or its first 0.8-1.5 s cut at the
    quietest 20 ms frame near there, if the span is longer than HUMAN_MAX_S."""
    spans = split_on_pauses(x, RATE_HZ, min_pause_s=0.25)
    if spans and spans[0][1] - spans[0][0] <= HUMAN_MAX_S:
        s, e = spans[0]
        return _trimmed(x[int(s * RATE_HZ): int(e * RATE_HZ)], RATE_HZ)
    hop = RATE_HZ // 50
    lo, hi = int(rng.uniform(0.8, 1.2) * RATE_HZ), int(1.5 * RATE_HZ)
    seg = x[lo: lo + (hi - lo) // hop * hop].reshape(-1, hop)
    cut = lo + int(np.argmin(np.mean(seg.astype(np.float64) ** 2, axis=1))) * hop if seg.size else lo
    return _trimmed(x[:cut], RATE_HZ)


def _beep(rng: np.random.Generator) -> np.ndarray:
    hz = float(rng.choice([440.0, 850.0, 1000.0, 1400.0])) * rng.uniform(0.98, 1.02)
    n = int(rng.uniform(0.3, 1.0) * RATE_HZ)
    t = np.arange(n) / RATE_HZ
    ramp = np.minimum(1.0, np.minimum(t, t[::-1]) / 0.005)
    tone = np.sin(2 * np.pi * hz * t + rng.uniform(0, 2 * np.pi)) * ramp
    tone += rng.standard_normal(n) * 10 ** (-rng.uniform(25, 40) / 20)      # small noise
    return _level(tone.astype(np.float32), rng.uniform(-22, -12))


def _channel(parts: list[tuple[float, np.ndarray]], total_s: float, rng: np.random.Generator) -> np.ndarray:
    """Place (start_s, float signal) parts on a line, add noise, band-pass, mu-law -> int16."""
    x = np.zeros(int(total_s * RATE_HZ), np.float32)
    for start_s, sig in parts:
        i = int(round(start_s * RATE_HZ))
        x[i: i + sig.size] += sig[: x.size - i]
    x += _level(rng.standard_normal(x.size).astype(np.float32), rng.uniform(-70, -50))
    x = band_pass(x, RATE_HZ, 300.0, 3400.0)
    pcm = np.clip(np.round(x * 32767), -32768, 32767).astype(np.int16)
    return phone_channel(pcm, RATE_HZ, RATE_HZ, "mulaw")


Clips = dict[str, list[tuple[Path, str]]]


def _human_clips(manifest: Path) -> tuple[Clips, Clips]:
    """Recorded (clip, transcript) by voice: (the Debian-packaged sources, The Ur-Quan Masters)."""
    rows = read_manifest(manifest)
    check_not_reserved([p for p, _ in rows])
    voice_file = manifest.with_name(manifest.stem + "_voices.tsv")
    voices = {p: v for p, v in read_manifest(voice_file)}
    packaged: Clips = defaultdict(list)
    uqm: Clips = defaultdict(list)
    for p, text in rows:
        v = voices.get(p, p.parent.name)
        (uqm if v.startswith("uqm:") else packaged)[v].append((p, text))
    return packaged, uqm


def _load_human(path: Path, rng: np.random.Generator) -> np.ndarray:
    x, rate = read_wav(path)
    return _first_words(resample(x, rate, RATE_HZ), rng)


def build_answering_set(out_dir: str | Path, *, seed: int = 0, manifest: str | Path = HUMAN_MANIFEST,
                        sizes: dict[str, int] | None = None) -> list[AnswerItem]:
    """Write the set (``wav/*.wav`` and ``labels.jsonl``) under ``out_dir``; returns its items."""
    out = Path(out_dir)
    (out / "wav").mkdir(parents=True, exist_ok=True)
    sizes = {**GROUP_SIZES, **(sizes or {})}
    rng = np.random.default_rng(seed)
    packaged, uqm = _human_clips(Path(manifest))
    items: list[AnswerItem] = []

    def fill(text: str) -> str:
        return text.format(name=rng.choice(NAMES), company=rng.choice(COMPANIES),
                           number=" ".join(str(d) for d in rng.integers(0, 10, 7)))

    def human(group: str, k: int, first: np.ndarray, second: np.ndarray | None, who: str, text: str) -> None:
        lead = rng.uniform(0.2, 1.0)
        first = _level(first, rng.uniform(-26, -16))
        parts = [(lead, first)]
        end = lead + first.size / RATE_HZ
        if second is not None:
            parts.append((end + rng.uniform(1.2, 2.5), _level(second, rng.uniform(-26, -16))))
        total = max(parts[-1][0] + parts[-1][1].size / RATE_HZ + 1.5, 6.0)
        add(group, k, "human", _channel(parts, total, rng), who, text, lead, end, None, None)

    def add(group: str, k: int, label: str, pcm: np.ndarray, who: str, text: str,
            start: float | None, end: float | None, beep_at: float | None, beep_end: float | None) -> None:
        ident = f"{group}-{k:03d}"
        write_wav(out / "wav" / f"{ident}.wav", pcm, RATE_HZ)
        r = lambda v: None if v is None else round(float(v), 3)  # noqa: E731
        items.append(AnswerItem(ident, label, group, "", f"wav/{ident}.wav", who, text, r(start), r(end),
                                r(beep_at), r(beep_end), round(pcm.size / RATE_HZ, 3)))

    for group, pool in (("human_recorded", packaged), ("human_uqm", uqm)):
        names = sorted(pool)
        for k in range(sizes[group]):
            who = names[int(rng.integers(len(names)))]
            clips = pool[who]
            a, b = rng.choice(len(clips), 2, replace=len(clips) < 2)
            second = _load_human(clips[b][0], rng) if rng.random() < 0.3 else None
            human(group, k, _load_human(clips[a][0], rng), second, who, clips[a][1])
    for k in range(sizes["human_synth"]):
        who = str(rng.choice(VOICES))
        text = fill(str(rng.choice(HELLOS)))
        second = _say(who, str(rng.choice(SECOND)), rng) if rng.random() < 0.3 else None
        human("human_synth", k, _say(who, text, rng), second, who, text)
    for k in range(sizes["machine"]):
        who = str(rng.choice(VOICES))
        text = fill(GREETINGS[k % len(GREETINGS)])
        speech = _level(_greeting(who, text, rng), rng.uniform(-26, -16))
        lead = rng.uniform(0.2, 1.0)
        end = lead + speech.size / RATE_HZ
        parts = [(lead, speech)]
        beep_at = beep_end = None
        if rng.random() < 0.6:
            beep = _beep(rng)
            beep_at = end + rng.uniform(0.2, 1.0)
            beep_end = beep_at + beep.size / RATE_HZ
            parts.append((beep_at, beep))
        total = (beep_end or end) + rng.uniform(2.5, 3.5)
        group = "machine_beep" if beep_at is not None else "machine_nobeep"
        add(group, k, "machine", _channel(parts, total, rng), who, text, lead, end, beep_at, beep_end)
    for k in range(sizes["silence"]):
        add("silence", k, "unknown", _channel([], rng.uniform(5.0, 7.0), rng), "", "", None, None, None, None)

    tunable = [i for i, it in enumerate(items) if it.group != "human_uqm"]      # UQM: measure only
    tune = {tunable[int(j)] for j in rng.permutation(len(tunable))[: len(tunable) // 2]}
    items = [AnswerItem(**{**asdict(it), "split": "tune" if i in tune else "report"})
             for i, it in enumerate(items)]
    with open(out / "labels.jsonl", "w", encoding="utf-8") as f:
        for it in items:
            f.write(json.dumps(asdict(it)) + "\n")
    return items


def load_answering_set(folder: str | Path) -> list[AnswerItem]:
    """The items ``build_answering_set`` wrote under ``folder``."""
    lines = (Path(folder) / "labels.jsonl").read_text(encoding="utf-8").splitlines()
    return [AnswerItem(**json.loads(line)) for line in lines if line.strip()]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="data/answering")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--manifest", default=str(HUMAN_MANIFEST))
    args = ap.parse_args(argv)
    items = build_answering_set(args.out, seed=args.seed, manifest=args.manifest)
    counts: dict[str, int] = defaultdict(int)
    for it in items:
        counts[f"{it.group}/{it.split}"] += 1
    print(json.dumps({"out": args.out, "items": len(items), "counts": dict(sorted(counts.items()))}))


if __name__ == "__main__":
    main()
