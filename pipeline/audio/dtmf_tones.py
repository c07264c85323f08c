"""Keypad tones in audio (in-band DTMF), found 10 ms at a time: so a recording can silence them.

    detector = DtmfToneDetector(sample_rate_hz=8000)    # 8 or 16 kHz
    for start, end, key in detector.push(pcm_int16):     # each call: the tone found so far, in
        ...                                              # samples since the first pushed
    find_keys(pcm_int16, 8000)                           # a whole buffer: [(start, end, key), ...]
    key_tone("5", duration_s=0.07, sample_rate_hz=8000)  # a key's tone, as a phone sends it (int16)

A key is one of four row tones (697-941 Hz) plus one of four column tones (1209-1633 Hz). The
audio is cut into 10 ms blocks; each window of two blocks (20 ms: 50 Hz apart, enough to tell
697 from 770 Hz) gets the power at the eight frequencies, each taken as the best of three probes
(on it and 1.5 % either side, the drift a keypad may have; the Goertzel filter's output, computed
for every window at once as one matrix product: a per-sample loop is slow in Python), and holds a
key when

* level: the row and the column tone each reach ``MIN_TONE_DBFS``;
* twist: the column tone is at most ``MAX_TWIST_DB`` weaker or stronger than the row tone;
* ratio: each is ``MIN_PEAK_RATIO_DB`` above the other three of its group;
* purity: the two tones carry ``MIN_TONE_SHARE`` of the window's energy (speech and music spread
  theirs over many frequencies; a tone with noise under it keeps almost all).

A key counts once two windows in a row (30 ms of tone) hold it; the stretch reported runs from
the first such window's start to the last one's end. Tones of 40 ms (the shortest a keypad must
send) are found from any start; what is shorter may not be, and the recorder's guard covers the
edges. Measured on the build machine (2 cores, a busy neighbour, 2026-12-07): about 3 us of CPU
per 20 ms of audio pushed in 0.5 s batches (3.4 us at 16 kHz), 40-55 us when pushed 20 ms at a time
(Python's overhead per push); ``tests/pipeline/test_dtmf_tones.py`` prints the figure.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

__all__ = ["KEYS", "ROW_HZ", "COLUMN_HZ", "DtmfToneDetector", "ToneStretch", "find_keys", "key_tone"]

ROW_HZ = (697.0, 770.0, 852.0, 941.0)
COLUMN_HZ = (1209.0, 1336.0, 1477.0, 1633.0)
KEYS = ("123A", "456B", "789C", "*0#D")   # KEYS[row][column]

MIN_TONE_DBFS = -42.0      # each tone's level (a full-scale sine is 0 dBFS)
MAX_TWIST_DB = 8.0         # row and column tones this far apart in level at most
MIN_PEAK_RATIO_DB = 6.0    # each tone above its group's other three
MIN_TONE_SHARE = 0.7       # of the window's energy, in the two tones (recorded people: under 0.6)
BLOCK_S = 0.01
FREQ_PROBES = (-0.015, 0.0, 0.015)   # each tone looked for this far off its frequency too (keypads are within 1.5 %)


class ToneStretch(NamedTuple):
    start: int   # samples since the detector's first
    end: int     # exclusive
    key: str


class DtmfToneDetector:
    """Streaming in-band DTMF: push int16 audio of any length, get the key stretches found."""

    def __init__(self, sample_rate_hz: int = 8000):
        if sample_rate_hz not in (8000, 16000):
            raise ValueError(f"DTMF detection runs at 8 or 16 kHz, not {sample_rate_hz}")
        self.sample_rate_hz = sample_rate_hz
        self._hop = int(sample_rate_hz * BLOCK_S)
        win = 2 * self._hop
        t = np.arange(win) / sample_rate_hz
        freqs = np.outer(ROW_HZ + COLUMN_HZ, 1 + np.array(FREQ_PROBES)).ravel()   # (8 * probes,)
        phase = 2 * np.pi * np.outer(t, freqs)
        self._basis = np.concatenate((np.cos(phase), np.sin(phase)), axis=1).astype(np.float32)   # (win, 2 * 8 * probes)
        # a sine of amplitude a over the window has |X|^2 = (a * win / 2)^2
        self._min_power = (10 ** (MIN_TONE_DBFS / 20) * 32768 * win / 2) ** 2
        self._twist = 10 ** (MAX_TWIST_DB / 10)
        self._ratio = 10 ** (MIN_PEAK_RATIO_DB / 10)
        self._win = win
        self._carry = np.zeros(0, np.float32)   # samples not yet in a window's last block
        self._at = 0                            # absolute index of _carry[0]
        self._prev_key = -1                     # the last window's key (-1: none)
        self._prev_start = 0

    def push(self, pcm: np.ndarray) -> list[ToneStretch]:
        """Feed ``pcm`` (int16, mono); returns the windows of confirmed tone this push completed."""
        x = np.concatenate((self._carry, pcm.astype(np.float32)))
        hop = self._hop
        n_blocks = x.size // hop
        if n_blocks < 2:
            self._carry = x
            return []
        keys = self._window_keys(x[: n_blocks * hop].reshape(n_blocks, hop))
        found: list[ToneStretch] = []
        for i, key in enumerate(keys.tolist()):
            start = self._at + i * hop
            if key >= 0 and key == self._prev_key:
                found.append(ToneStretch(self._prev_start, start + self._win, KEYS[key // 4][key % 4]))
            self._prev_key, self._prev_start = key, start
        used = (n_blocks - 1) * hop            # the last block starts the next window
        self._carry = x[used:]
        self._at += used
        return _merged(found)

    def _window_keys(self, blocks: np.ndarray) -> np.ndarray:
        """(B, hop) blocks -> (B - 1,) key index (row * 4 + column) of each two-block window, or -1."""
        windows = np.concatenate((blocks[:-1], blocks[1:]), axis=1)        # (W, win)
        spectrum = windows @ self._basis                                  # (W, 2 * 8 * probes)
        half = spectrum.shape[1] // 2
        power = (spectrum[:, :half] ** 2 + spectrum[:, half:] ** 2)       # |X(f)|^2 at each probe
        power = power.reshape(power.shape[0], 8, len(FREQ_PROBES)).max(axis=2)   # (W, 8): the best probe
        energy = np.einsum("ij,ij->i", windows, windows)                  # sum x^2
        rows, cols = power[:, :4], power[:, 4:]
        r, c = rows.argmax(axis=1), cols.argmax(axis=1)
        w = np.arange(power.shape[0])
        pr, pc = rows[w, r], cols[w, c]
        rows_rest = np.where(np.arange(4) == r[:, None], 0.0, rows).max(axis=1)
        cols_rest = np.where(np.arange(4) == c[:, None], 0.0, cols).max(axis=1)
        share = 2.0 * (pr + pc) / (self._win * np.maximum(energy, 1.0))  # a sine's 2|X|^2/N is its energy
        ok = ((pr >= self._min_power) & (pc >= self._min_power)
              & (pc * self._twist >= pr) & (pr * self._twist >= pc)
              & (pr >= self._ratio * rows_rest) & (pc >= self._ratio * cols_rest)
              & (share >= MIN_TONE_SHARE))
        return np.where(ok, r * 4 + c, -1)


def _merged(stretches: list[ToneStretch]) -> list[ToneStretch]:
    out: list[ToneStretch] = []
    for s in stretches:
        if out and out[-1].key == s.key and s.start <= out[-1].end:
            out[-1] = ToneStretch(out[-1].start, max(out[-1].end, s.end), s.key)
        else:
            out.append(s)
    return out


def find_keys(pcm: np.ndarray, sample_rate_hz: int) -> list[ToneStretch]:
    """Every key stretch in a whole buffer (int16 mono)."""
    return DtmfToneDetector(sample_rate_hz).push(pcm)


def key_tone(key: str, *, duration_s: float, sample_rate_hz: int, level_dbfs: float = -10.0,
             twist_db: float = 0.0, phase: float = 0.0) -> np.ndarray:
    """``key``'s tone (int16): its row and column sines, each at ``level_dbfs`` (the column
    ``twist_db`` louder), both starting at ``phase`` radians."""
    row = next((i for i, keys in enumerate(KEYS) if key in keys), None)
    if row is None or len(key) != 1:
        raise ValueError(f"not a keypad key: {key!r}")
    t = np.arange(int(round(duration_s * sample_rate_hz))) / sample_rate_hz
    a = 32767 * 10 ** (level_dbfs / 20)
    x = (a * np.sin(2 * np.pi * ROW_HZ[row] * t + phase)
         + a * 10 ** (twist_db / 20) * np.sin(2 * np.pi * COLUMN_HZ[KEYS[row].index(key)] * t + phase))
    return np.clip(np.round(x), -32768, 32767).astype(np.int16)
