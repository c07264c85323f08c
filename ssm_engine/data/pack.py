"""A speech data set packed small enough to travel: every clip as 8 kHz Ogg Opus in one tar.

    summary = pack("data/stt/h3", "gpu/h3.tgz", level=0.97)     # train.tsv, heldout.tsv, clips
    folder = unpack("gpu/h3.tgz", "/tmp/data")                  # -> /tmp/data/h3, a data set again

Why: the GPU machine is reached with the repository and at most 64 MiB beside it, and
has none of the voices or game files the data is made from. 8 kHz 16-bit WAV is 16 kB a second
(17.6 h: ~1 GB); Opus at 14 kb/s is 1.7 kB a second, so four to five hours fit. Opus is
a lossy speech codec like those a phone call crosses, so the clips lose what a codec takes, which
callers' audio has lost too; the recogniser reads them through ``audio.read_audio``.

The tar (gzipped: each clip's header and padding would otherwise cost ~0.7 kB) holds ``<name>/train.tsv`` and ``<name>/heldout.tsv`` (and each ``*_voices.tsv``), their
paths pointing at ``<name>/<split>/<n>.opus``, plus ``<name>/PACK.json`` (what was packed, its
hours, bytes and bitrate) and, when given, a pronouncing dictionary (``--phones``) under
``<name>/`` so training on a machine without pocketsphinx still has its phone targets.
``level`` is libsndfile's compression level for Opus. At 8 kHz, measured on the 150 clips of
``data/stt/dev-b`` with the recogniser shipped 2026-12-05 (git 08bd942; ``parley eval stt`` on the
unpacked manifest, WAV: WER 0.147): 0.97 (the default) is 13.7 kb/s and WER 0.159 (1.08x),
0.985 11.0 kb/s and 0.181, 1.0 8.3 kb/s and 0.210 (1.43x): the lowest rates cost what the
recogniser hears. ``max_mb`` refuses a pack that would not travel.
"""

from __future__ import annotations

import gzip
import io
import json
import logging
import os
import tarfile
import time
from pathlib import Path

import numpy as np

from .audio import read_audio, resample
from .errors import DataError
from .manifest import read_manifest

__all__ = ["pack", "unpack", "PACK_RATE_HZ"]

log = logging.getLogger(__name__)

PACK_RATE_HZ = 8000          # the recogniser's rate: what a phone call carries
SPLITS = ("train", "heldout")


def _opus(x: np.ndarray, level: float) -> bytes:
    import soundfile

    buf = io.BytesIO()
    pcm = np.clip(np.round(x * 32767.0), -32768, 32767).astype(np.int16)
    soundfile.write(buf, pcm, PACK_RATE_HZ, format="OGG", subtype="OPUS", compression_level=level)
    return buf.getvalue()


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = len(data), int(time.time()), 0o644
    tar.addfile(info, io.BytesIO(data))


def pack(data_dir: str | Path, out: str | Path, *, level: float = 0.97, max_mb: float | None = None,
         phones: str | Path | None = None, name: str | None = None, progress: bool = False) -> dict:
    """Pack a data set's ``train.tsv`` and ``heldout.tsv`` (either may be absent, not both) into
    the tar ``out``. Raises DataError for a folder with neither, a clip that cannot be read, or
    a pack over ``max_mb`` (the partial file is removed). -> the summary written as PACK.json."""
    try:
        import soundfile  # noqa: F401  (fail before any work)
    except ImportError as exc:
        raise DataError("packing needs the soundfile package (Ogg Opus through libsndfile)") from exc
    if not 0.0 <= level <= 1.0:
        raise DataError(f"level {level}: libsndfile's compression level is 0..1")
    src, out = Path(data_dir), Path(out)
    name = name or src.name
    splits = {s: read_manifest(src / f"{s}.tsv") for s in SPLITS if (src / f"{s}.tsv").is_file()}
    if not splits:
        raise DataError(f"{src}: neither train.tsv nor heldout.tsv (a folder made by `parley data "
                        f"stt`, `data people` or `data stt --merge`)")
    total = sum(len(rows) for rows in splits.values())
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".part")
    summary: dict = {"name": name, "source": str(src), "rate_hz": PACK_RATE_HZ, "codec": "opus",
                     "level": level, "splits": {}}
    done, seconds, audio_bytes = 0, 0.0, 0
    t0 = time.monotonic()
    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(total=total, desc="pack", unit="clip", mininterval=2.0)
    try:
        with tarfile.open(tmp, "w:gz", compresslevel=6) as tar:   # gzip takes the headers' padding
            for split, rows in splits.items():
                new_paths: dict[Path, str] = {}
                lines = []
                split_s = 0.0
                for i, (path, text) in enumerate(rows):
                    try:
                        x, rate = read_audio(path)
                    except (OSError, EOFError, ValueError) as exc:
                        raise DataError(f"{path}: cannot read: {exc}") from exc
                    if rate != PACK_RATE_HZ:
                        x = resample(x, rate, PACK_RATE_HZ)
                    data = _opus(x, level)
                    rel = f"{split}/{i:06d}.opus"
                    _add(tar, f"{name}/{rel}", data)
                    new_paths[path.resolve()] = rel
                    lines.append(f"{rel}\t{text}")
                    split_s += x.size / PACK_RATE_HZ
                    audio_bytes += len(data)
                    done += 1
                    if bar is not None:
                        bar.update()
                    if max_mb is not None and audio_bytes > max_mb * 2**20:
                        raise DataError(f"{out}: over {max_mb:g} MB after {done} of {total} clips "
                                        f"({seconds + split_s:.0f} s of audio): pack fewer clips "
                                        f"(`data stt --merge --max-per-voice`) or a higher --level")
                _add(tar, f"{name}/{split}.tsv", ("\n".join(lines) + "\n").encode())
                voices = src / f"{split}_voices.tsv"
                if voices.is_file():
                    vrows = [(new_paths.get(p.resolve()), v) for p, v in read_manifest(voices)]
                    if any(r is None for r, _ in vrows):
                        raise DataError(f"{voices}: lists clips that {split}.tsv does not")
                    _add(tar, f"{name}/{split}_voices.tsv",
                         ("\n".join(f"{r}\t{v}" for r, v in vrows) + "\n").encode())
                summary["splits"][split] = {"clips": len(rows), "hours": round(split_s / 3600, 3)}
                seconds += split_s
            if phones is not None:
                phones = Path(phones)
                try:
                    raw = phones.read_bytes()
                except OSError as exc:
                    raise DataError(f"{phones}: cannot read the pronouncing dictionary: {exc}") from exc
                dict_name = phones.name if phones.suffix == ".gz" else phones.name + ".gz"
                _add(tar, f"{name}/{dict_name}", raw if phones.suffix == ".gz" else gzip.compress(raw, 9))
                summary["phones"] = dict_name
            summary.update(hours=round(seconds / 3600, 3), audio_mb=round(audio_bytes / 2**20, 2),
                           kbps=round(audio_bytes * 8 / max(seconds, 1e-9) / 1000, 2),
                           pack_s=round(time.monotonic() - t0, 1))
            _add(tar, f"{name}/PACK.json", (json.dumps(summary, indent=2) + "\n").encode())
        tmp.replace(out)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    finally:
        if bar is not None:
            bar.close()
    summary["bytes"] = os.path.getsize(out)
    log.info("packed %d clips (%.2f h) of %s into %s: %.1f MB, %.1f kb/s", total, seconds / 3600,
             src, out, summary["bytes"] / 2**20, summary["kbps"])
    return summary


def unpack(tar_path: str | Path, dest: str | Path) -> Path:
    """Unpack a ``pack`` tar under ``dest`` -> the data set's folder (``dest/<name>``). Refuses a
    tar that is not a pack (no PACK.json) or whose members would land outside ``dest``."""
    dest = Path(dest)
    try:
        with tarfile.open(tar_path, "r:*") as tar:
            names = tar.getnames()
            packs = [n for n in names if n.count("/") == 1 and n.endswith("/PACK.json")]
            if len(packs) != 1:
                raise DataError(f"{tar_path}: not a data pack (no single <name>/PACK.json)")
            dest.mkdir(parents=True, exist_ok=True)
            tar.extractall(dest, filter="data")      # refuses absolute paths, .., links out
    except (OSError, tarfile.TarError) as exc:
        raise DataError(f"{tar_path}: cannot unpack: {exc}") from exc
    return dest / packs[0].split("/")[0]
