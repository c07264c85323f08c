"""Manifests: one utterance per line, ``path<TAB>text``; relative paths are relative to the file.

    rows = read_manifest("data/stt/v1/train.tsv")     # -> [(Path, text), ...]
    write_manifest("x.tsv", rows)
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from .errors import ManifestError

__all__ = ["read_manifest", "write_manifest"]


def read_manifest(path: str | Path) -> list[tuple[Path, str]]:
    """Parse a manifest; raises ManifestError naming the line of a malformed row."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise ManifestError(f"{path}: cannot read manifest: {exc}") from exc
    rows: list[tuple[Path, str]] = []
    for lineno, line in enumerate(lines, 1):
        if not line.strip() or line.startswith("#"):
            continue
        audio, sep, text = line.partition("\t")
        if not sep or not audio:
            raise ManifestError(f"{path}:{lineno}: expected 'path<TAB>text', got {line[:60]!r}")
        p = Path(audio)
        rows.append((p if p.is_absolute() else path.parent / p, text.strip()))
    return rows


def write_manifest(path: str | Path, rows: Iterable[tuple[str | Path, str]]) -> None:
    """Write rows; paths under the manifest's folder are stored relative to it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    out = []
    for audio, text in rows:
        if "\t" in text or "\n" in text:
            raise ManifestError(f"{path}: text may not hold tabs or newlines: {text[:60]!r}")
        a = Path(audio)
        try:
            a = a.resolve().relative_to(path.parent.resolve())
        except ValueError:
            pass
        out.append(f"{a}\t{text}\n")
    path.write_text("".join(out), encoding="utf-8")
