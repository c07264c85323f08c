"""Export a training run's best checkpoint as the shipped model, with a model card.

    export_run("runs/stt/v1", "models/stt", data_dir="data/stt/v1", command="commands.txt")

Copies ``RUN/best/{config.json,model.safetensors}`` to the target, ``RUN/train.log`` to
``training.log``, for a model with a phone head the pronunciations of the target's LM words
(``lexicon.dict.gz``, from the run's dictionary), and writes ``MODEL_CARD.md`` from the data
summary, the run's config and metrics, and any ``eval_*.json`` files (``parley eval stt --json``
output) already in the target.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from .lm import NGramLM
from .model import STTModel, load_stt, save_stt
from .phones import Pronouncer
from ..errors import CheckpointFormatError, ConfigError

__all__ = ["export_run"]

_CARD = """# parley streaming SSM speech-to-text

A streaming character-CTC recogniser for 8 kHz phone audio: causal log-mel front end (25 ms
windows every 10 ms, {norm}), two causal convolutions down to 50 frames per second,
{n_layers} Mamba-2 layers (ssm_engine, d_model {d_model}), a linear CTC head over
{vocab} characters (blank, space, a-z, apostrophe){heads}. {n_params:,} parameters,
{size_mb:.1f} MB (float32 safetensors). Served through ssm_engine's StreamBatcher/BatchRunner, each
stream run every 5 frames (100 ms) as one prefill, compiled for a lone stream; 16 kHz input is
resampled to 8 kHz by the caller.

## Data
Synthetic speech only (no recordings of people): `parley data stt`, offline voices with
phone-channel augmentation (speed 0.88-1.12, reverb, noise at 3-35 dB SNR, 200-400/3200-3600 Hz
band-pass, level -38..-12 dBFS, mu-law round trip, each with its own probability).

- Training: {train_utts} utterances, {train_hours:.2f} h, voices:
{train_voices}
- Held out (whole voices never trained on; evaluated at 8 kHz through mu-law): {heldout_utts}
  utterances, {heldout_hours:.2f} h, voices:
{heldout_voices}

Texts are caller-style sentences (names, spelled letters, digit strings, dates, addresses,
money, yes/no, account and order talk) plus ~12 % Faker filler sentences, normalised to
lower-case words.

## Training
Commands (``python -m ssm_engine.stt.cli`` is ``parley`` before the commands are wired in):

```
{command}
```

- Steps {step}, epochs ~{epoch}, {train_min:.0f} min of one CPU thread (torch.set_num_threads(1)),
  AdamW lr {lr} (warm-up {warmup} steps, cosine over the time budget), {batch_s:.0f} s of audio
  per batch, CTC loss{augment}. Log: `training.log`.

## Held-out results (voices never trained on)
Training-time check (greedy, {tn} clips, 8 kHz mu-law): CER {tcer:.3f}, WER {twer:.3f}.

{evals}

## Limits
- Trained on synthetic voices only; the FACTS note that espeak-ng speech is a poor stand-in for a
  person holds here too: expect much worse accuracy on real callers than on the held-out voices.
- The LM's text comes from the same sentence generator as the data (another seed), the agent
  examples and pocketsphinx's 20,000 commonest words; words outside it are spelled at a penalty.
- Needs ~100-200 ms of trailing silence (the service feeds it) to emit its last characters.
- Training voices include pico and RHVoice (Debian non-free/contrib, installed through a private
  apt source list: `scripts/install-data-voices`; without them `parley data stt` leaves those
  speakers, and the held-out mbrola us1, out and says so); check their licences before a
  commercial release. mbrola is used only in
  the held-out set (its licence forbids use in a sold product).
- Held-out voices are whole voices never trained on, but the held-out texts come from the same
  sentence generator as the training texts (a different seed), so the vocabulary is in-domain.
"""


def _voices(d: dict[str, float]) -> str:
    return "\n".join(f"  - `{k}`: {v:.2f} h" for k, v in d.items())


def _augment(cfg: dict) -> str:
    """The run's on-the-fly augmentation, as the card's training line says it."""
    parts = []
    if cfg.get("speed"):
        parts.append(f"speed +-{cfg['speed'] * 100:.0f} %")
    if cfg.get("warp"):
        parts.append(f"vocal-tract length perturbation +-{cfg['warp'] * 100:.0f} %")
    if cfg.get("freq_masks") or cfg.get("time_mask_every_s"):
        parts.append(f"SpecAugment ({cfg.get('freq_masks', 0)} frequency masks of <= "
                     f"{cfg.get('freq_mask_mels')} mels, a {cfg.get('time_mask_ms')} ms time mask "
                     f"per {cfg.get('time_mask_every_s')} s)")
    if cfg.get("init_from"):
        parts.append(f"started from {cfg['init_from']}")
    return "; " + ", ".join(parts) if parts else ""


def _evals(out: Path) -> str:
    rows, voice_rows = [], []
    for p in sorted(out.glob("eval_*.json")):
        try:
            r = json.loads(p.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        rows.append(f"| {r.get('engine')} | {r.get('decoder') or '-'} | {r.get('rate_hz')} | {r.get('codec')} | {r.get('n')} | "
                    f"{r.get('wer', float('nan')):.3f} | {r.get('cer', float('nan')):.3f} | "
                    f"{r.get('rtf', float('nan')):.3f} | {r.get('final_latency_ms_p50', float('nan')):.1f} | "
                    f"{r.get('final_latency_ms_p95', float('nan')):.1f} |")
        for v, m in r.get("by_voice", {}).items():
            voice_rows.append(f"| {r.get('engine')} | {r.get('rate_hz')} | {r.get('codec')} | {v} | "
                              f"{m['n']} | {m['wer']:.3f} | {m['cer']:.3f} |")
    if not rows:
        return "(no `parley eval stt` results recorded yet)"
    head = ("`parley eval stt` on the held-out manifest, same text normalisation for every engine:\n\n"
            "| engine | decoder | rate Hz | codec | n | WER | CER | RTF | final p50 ms | final p95 ms |\n"
            "|---|---|---|---|---|---|---|---|---|---|")
    text = head + "\n" + "\n".join(rows)
    if voice_rows:
        text += ("\n\nPer held-out voice:\n\n| engine | rate Hz | codec | voice | n | WER | CER |\n"
                 "|---|---|---|---|---|---|---|\n" + "\n".join(voice_rows))
    return text


_CHAR_HEAD = ("; greedy partials, finals from a CTC beam search with a word lexicon and a trigram "
              "LM (`lm.arpa.gz`, `parley train stt-lm`)")
_PHONE_HEADS = (" and a second over 39 phones and a word boundary (`ssm_engine/stt/phones.py`); "
                "greedy partials from the characters, finals from both heads' beam searches "
                "(word lexicon `lexicon.dict.gz`, trigram LM `lm.arpa.gz`) rescored together "
                "(`ssm_engine/stt/joint.py`)")


def _write_lexicon(out: Path, phones_dict: str | None) -> None:
    """A phone-head model ships the pronunciations of its LM's words (``lexicon.dict.gz``), read
    from the dictionary it trained with; the LM must be in ``out`` already."""
    lm_path = out / "lm.arpa.gz"
    if not phones_dict or not Path(phones_dict).is_file():
        raise ConfigError(f"the model has a phone head but its training dictionary "
                         f"({phones_dict!r}, from train.log) is not there to write its lexicon")
    if not lm_path.is_file():
        raise ConfigError(f"the model has a phone head: put its LM in {lm_path} first (copy it, or "
                         f"`parley train stt-lm --out {lm_path}`); the lexicon covers its words")
    lm = NGramLM.load(lm_path)
    Pronouncer.load(phones_dict).write(out / "lexicon.dict.gz", lm.vocab)


def export_run(run_dir: str | Path, out_dir: str | Path, *, data_dir: str | Path,
               command: str | None = None, checkpoint: str = "best") -> Path:
    """Export RUN/best (or, ``checkpoint="last"``, the run's last checkpoint, scored by the
    run's final check) to ``out_dir``. ``command``: the commands that made it (text, or a file
    holding them); default: the plain ``parley train stt`` line for this run."""
    run, out, data = Path(run_dir), Path(out_dir), Path(data_dir)
    if checkpoint not in ("best", "last"):
        raise ConfigError(f"checkpoint must be 'best' or 'last', got {checkpoint!r}")
    best = run / "best"
    model = load_stt(best)                       # validates the checkpoint before shipping it
    out.mkdir(parents=True, exist_ok=True)
    if checkpoint == "last":
        model, metrics = _last(run, model)
        save_stt(model, out)
    else:
        metrics = json.loads((best / "metrics.json").read_text())
        for name in ("config.json", "model.safetensors"):
            shutil.copyfile(best / name, out / name)
    if (run / "train.log").exists():
        shutil.copyfile(run / "train.log", out / "training.log")
    last_cfg = {}
    log_text = (run / "train.log").read_text() if (run / "train.log").exists() else ""
    for line in log_text.splitlines():
        if " config {" in line:
            last_cfg = json.loads(line.split(" config ", 1)[1])
    if model.config.phone_vocab_size:
        _write_lexicon(out, last_cfg.get("phones_dict"))
    summary = json.loads((data / "summary.json").read_text())
    train_s, held = summary["splits"]["train"], summary["splits"]["heldout"]
    if command is None:
        command = (f"parley train stt --data {data} --run {run} --max-minutes "
                   f"{last_cfg.get('max_minutes', '?')}")
    elif Path(command).is_file():
        command = Path(command).read_text().strip()
    card = _CARD.format(
        heads=(_PHONE_HEADS if model.config.phone_vocab_size else _CHAR_HEAD),
        norm=("fixed normalisation" if model.config.norm == "fixed" else
              f"fixed normalisation less a running mean of the stream's speech, time constant "
              f"{model.config.norm_tau * 10 / 1000:g} s"),
        n_layers=model.config.ssm_config.n_layers, d_model=model.config.ssm_config.d_model,
        vocab=model.config.vocab_size, n_params=model.n_params(),
        size_mb=(out / "model.safetensors").stat().st_size / 1e6,
        train_utts=train_s["utterances"], train_hours=train_s["hours"],
        train_voices=_voices(train_s["hours_per_voice"]), heldout_utts=held["utterances"],
        heldout_hours=held["hours"], heldout_voices=_voices(held["hours_per_voice"]),
        command=command, step=metrics["step"], epoch=metrics["epoch"],
        train_min=metrics["elapsed_min"], lr=last_cfg.get("lr"), warmup=last_cfg.get("warmup_steps"),
        batch_s=last_cfg.get("batch_audio_s", 0.0), tn=metrics["n"], tcer=metrics["cer"],
        twer=metrics["wer"], evals=_evals(out), augment=_augment(last_cfg))
    (out / "MODEL_CARD.md").write_text(card)
    return out


def _last(run: Path, model: STTModel) -> tuple[STTModel, dict]:
    """The run's last checkpoint (``last.pt``) in ``model``, with the check the run made at that
    step (its final one); a CheckpointFormatError when the run has no such check (still going)."""
    import torch

    path = run / "last.pt"
    try:
        ck = torch.load(path, map_location="cpu", weights_only=False)
        model.load_state_dict(ck["model"])
    except (OSError, RuntimeError, KeyError, EOFError) as exc:
        raise CheckpointFormatError(path, f"not a readable training checkpoint: {exc}") from None
    check = check_at(run, ck["step"])
    if check is None:
        raise CheckpointFormatError(path, f"step {ck['step']} was never checked (is the run still going? "
                                          f"export its best, or let it finish)")
    return model, check


def check_at(run: Path, step: int) -> dict | None:
    """The run's held-out check made at ``step`` (its last, in ``metrics.jsonl``), or None."""
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()] \
        if (run / "metrics.jsonl").exists() else []
    at_step = [r for r in rows if r.get("step") == step]
    return at_step[-1] if at_step else None
