"""How well does each recogniser understand people? The human development set, in one run.

    scripts/install-human-speech && .venv/bin/parley data human     # once: data/stt/human
    .venv/bin/python benchmarks/bench_stt_human.py [--manifest data/stt/human/human.tsv]
        [--engines ssm ssm-quiet ssm-late ssm-ctc ssm-stream ssm-pure whisper pocketsphinx]
        [--model models/stt] [--decoder beam] [--turn-end] [--limit N]

Every clip of the human development set (recorded people, see ``ssm_engine.data.human``) goes
through the 8 kHz mu-law phone channel to parley's streaming recogniser (``ssm``: the shipped
one, on Whisper tiny.en's streamed encoder, its finals from the final pass when the folder has a
``final/`` model, made by the decoder its ``decoder.json`` names, early where the caller
pauses; ``ssm-quiet``: the same with its early finals begun by loudness alone, not at the VAD's
pauses; ``ssm-late``: the same with no early finals; ``ssm-ctc``: the final pass with the final
model's CTC heads and search; ``ssm-stream``: the same folder with the stream's
own finals; ``ssm-pure``: the pure SSM one before it), Whisper tiny.en (the
accuracy anchor; not streaming) and pocketsphinx (the streaming baseline), one after another
in this process. Reported per engine: corpus WER and CER, per source, the real-time factor on
one thread, and the final latency (end of audio to final transcript) p50/p95/p99; and the
ratio the recogniser is judged by on people: SSM WER / Whisper WER (the target: <= 1.25).
``--turn-end`` ends each clip where a call's VAD would and times the final from the VAD's stop,
with the clip's last 0.5 s pushed at the pace of speech (``harness.stt_eval.evaluate``): the wait
a caller has, early finals included.

Prints one JSON line; ``--hyps DIR`` also writes each engine's transcripts beside the
references, worst first (``parley eval stt --hyps``).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from common import git_sha  # noqa: E402

import torch  # noqa: E402

from harness.stt_eval import evaluate, voices_of, write_hyps  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--manifest", default="data/stt/human/human.tsv")
    ap.add_argument("--engines", nargs="+", default=["ssm", "whisper", "pocketsphinx"],
                    choices=["ssm", "ssm-quiet", "ssm-late", "ssm-ctc", "ssm-stream", "ssm-pure", "whisper",
                             "pocketsphinx"],
                    help="ssm: the recogniser in --model (default models/stt, on Whisper's "
                    "streamed encoder; early finals, decoded where the VAD's stop timer starts "
                    "and at the first 100 ms of quiet: see --turn-end); ssm-quiet: only at the "
                    "quiet; ssm-late: the same without early finals; "
                    "ssm-ctc: its final pass decoded by the CTC heads; "
                    "ssm-pure: the pure SSM recogniser in --pure-model, in "
                    "the same run (default: %(default)s)")
    ap.add_argument("--model", default=None, help="SSM model folder (default models/stt)")
    ap.add_argument("--pure-model", default="models/stt-ssm",
                    help="the ssm-pure engine's folder (default %(default)s)")
    ap.add_argument("--decoder", default="beam", help="SSM decoder (default %(default)s)")
    ap.add_argument("--lm", default=None, help="SSM LM (default MODEL/lm.arpa.gz)")
    ap.add_argument("--hyps", default=None, metavar="DIR")
    ap.add_argument("--limit", type=int, default=None, metavar="N",
                    help="N clips spread over the manifest (default: all)")
    ap.add_argument("--turn-end", action="store_true",
                    help="end each clip where a call's VAD would (Silero, 0.2 s stop), push its "
                    "last 0.5 s at the pace of speech, and time the final from the VAD's stop: "
                    "the wait a caller has after the turn ends (default: clips pushed whole, as "
                    "fast as they go, the final timed from the clip's end)")
    ap.add_argument("--speed", type=float, default=1.0, metavar="F",
                    help="play every clip F times as fast (resampled, pitch with it, as training's "
                    "speed perturbation does): does a speaking rate nearer the training voices' "
                    "help? (default %(default)s, as recorded)")
    args = ap.parse_args(argv)
    if not Path(args.manifest).exists():
        ap.error(f"{args.manifest} is missing: run scripts/install-human-speech, then "
                 "parley data human")
    if args.speed <= 0:
        ap.error(f"--speed must be above 0, got {args.speed}")
    torch.set_num_threads(1)
    if args.turn_end:      # the VAD's analyzer logs its model's loading at DEBUG, each clip
        from loguru import logger
        logger.remove()
        logger.add(sys.stderr, level="WARNING")
    out: dict = {"bench": "stt_human", "manifest": args.manifest, "engines": {},
                 "git": git_sha()}              # the code the run starts with (runs are long)
    if args.turn_end:
        out["turn_end"] = True
    if args.speed != 1.0:
        out["speed"] = args.speed
    with tempfile.TemporaryDirectory() as tmp:
        manifest = args.manifest if args.speed == 1.0 else _sped(args.manifest, args.speed, Path(tmp))
        _score(args, manifest, out)
    print(json.dumps(out))
    return 0


def _score(args: argparse.Namespace, manifest: str | Path, out: dict) -> None:
    """Every engine over ``manifest``, into ``out`` (with the ratios)."""
    from pipeline.engines import utterance_final

    for name in args.engines:
        shipped = utterance_final.SPECULATE_MAX
        if name == "ssm-late":
            utterance_final.SPECULATE_MAX = 0
        try:
            res = evaluate("ssm" if name.startswith("ssm") else name, manifest,
                           model_dir=args.pure_model if name == "ssm-pure" else args.model,
                           decoder=args.decoder, lm_path=args.lm, compile=False,
                           final_pass=False if name == "ssm-stream" else None,
                           final_decoder="ctc" if name == "ssm-ctc" else None,
                           turn_end=args.turn_end, limit=args.limit,
                           vad_pauses=name != "ssm-quiet")
        finally:
            utterance_final.SPECULATE_MAX = shipped
        if args.hyps:
            Path(args.hyps).mkdir(parents=True, exist_ok=True)
            write_hyps(res, Path(args.hyps) / f"{name}.tsv")
        out["engines"][name] = {
            "n": res.n, "audio_s": res.audio_s, "wer": res.wer, "cer": res.cer, "rtf": res.rtf,
            "final_ms": {"p50": res.final_latency_ms_p50, "p95": res.final_latency_ms_p95,
                         "p99": res.final_latency_ms_p99},
            "by_voice": res.by_voice,
        }
        print(f"{name}: WER {res.wer:.3f} CER {res.cer:.3f} RTF {res.rtf:.3f}", file=sys.stderr)
    eng = out["engines"]
    if "whisper" in eng:
        for name in (n for n in eng if n.startswith("ssm")):   # ssm_over_whisper_wer, ...
            out[f"{name.replace('-', '_')}_over_whisper_wer"] = round(
                eng[name]["wer"] / max(eng["whisper"]["wer"], 1e-9), 2)
    if "ssm" in eng and "whisper" in eng:
        out["ssm_over_whisper_cer"] = round(eng["ssm"]["cer"] / max(eng["whisper"]["cer"], 1e-9), 2)
    if "ssm" in eng and "pocketsphinx" in eng:
        out["ssm_over_pocketsphinx_wer"] = round(
            eng["ssm"]["wer"] / max(eng["pocketsphinx"]["wer"], 1e-9), 2)

def _sped(manifest: str, speed: float, folder: Path) -> Path:
    """The manifest's clips played ``speed`` times as fast, as WAVs under ``folder``, with their
    voice labels: a manifest ``evaluate`` reads like the original."""
    from ssm_engine.data.audio import read_wav, resample, write_wav
    from ssm_engine.data.manifest import read_manifest, write_manifest

    voice_of = voices_of(manifest)
    rows, voices = [], []
    for i, (path, text) in enumerate(read_manifest(manifest)):
        x, rate = read_wav(path)
        clip = folder / f"{i:05d}.wav"
        write_wav(clip, resample(x, rate, int(round(rate / speed))), rate)
        rows.append((clip, text))
        voices.append((clip, voice_of.get(path, "")))
    sped = folder / Path(manifest).name
    write_manifest(sped, rows)
    write_manifest(sped.with_name(sped.stem + "_voices.tsv"), voices)
    return sped


if __name__ == "__main__":
    sys.exit(main())
