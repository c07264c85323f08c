"""Source-filter vocoder: speech <-> per-frame acoustic features, and streaming synthesis.

    feats = analyze(pcm_16k)                  # (frames, N_FEATURES) float32, one frame per 10 ms
    pcm = synthesize(feats)                   # offline: the whole utterance
    voc = StreamingVocoder(seed=0)
    chunk = voc.push(feats[t])                # streaming: HOP_SAMPLES samples per frame, final at once

The acoustic model predicts these features; this module turns them into sound. Each 10 ms frame
``t`` describes the samples ``[t * HOP, (t + 1) * HOP)`` by

- ``lf0``: log fundamental frequency in Hz (interpolated through unvoiced frames, so it is
  always defined and smooth; that makes it easy to regress),
- ``vuv``: 1 for voiced frames, 0 for unvoiced (the model predicts a probability),
- ``cep[0:N_CEP]``: the real cepstrum of the spectral envelope (natural-log magnitude), liftered
  to ``N_CEP`` coefficients, so it holds the vocal tract's resonances and not the harmonics.

Synthesis (the "filter"): each frame's ``HOP`` samples of excitation (a pulse train at f0 below
``MIX_LOW_HZ`` blending into noise above ``MIX_HIGH_HZ`` when voiced, white noise when unvoiced),
are filtered by the envelope's minimum-phase response with one FFT of ``N_FFT`` points, and the
filtered block with its tail is overlap-added into the output. A frame only adds to samples at or
after its own start, so the ``HOP`` samples of frame ``t`` are final as soon as frame ``t`` is in:
the vocoder adds no latency. It is deterministic for a given seed, so streaming and offline
synthesis give the same samples (``synthesize`` is the streaming loop run to the end). Each pulse
sits on the whole sample after the instant its period ends, or (``fractional``) at that very
instant, band-limited in the block's spectrum: rounding jitters the pulses by up to 62.5 us,
which blurs the harmonics above 2-3 kHz into noise.

Analysis (for making training targets): f0 by the YIN difference function on 32 ms windows,
voicing from YIN's aperiodicity and the frame's energy, the envelope by cepstral smoothing with a
few "true envelope" iterations (the smoothed curve is pushed up onto the harmonic peaks).

Band aperiodicity (measured, not yet a model output): ``analyze_aperiodicity`` gives each voiced
frame, in each of the ``BAP_EDGES_HZ`` bands, the share of its power that does not repeat at the
frame's pitch period (0: a pure pulse train, 1: noise), and ``push(frame, bap=...)`` /
``synthesize(feats, bap=...)`` mix pulses and noise by it band by band, instead of the fixed
pulses-below-3-kHz mix. A breathy or voiced-fricative frame (the "z" of "zero", the "v" of
"seven") then carries the noise a listener hears in it; the fixed mix makes it pure buzz below
3 kHz, all of the phone band.
"""

from __future__ import annotations

import numpy as np

from .errors import TTSError

SAMPLE_RATE_HZ = 16_000
HOP_SAMPLES = 160
FRAME_MS = 10
N_FFT = 512
N_CEP = 40
N_FEATURES = 2 + N_CEP
F0_MIN_HZ = 60.0
F0_MAX_HZ = 450.0
MIX_LOW_HZ = 3_000.0
MIX_HIGH_HZ = 5_500.0
_VOICED_NOISE = 0.35  # noise share above MIX_HIGH_HZ in voiced frames
_YIN_THRESHOLD = 0.25
_TRUE_ENVELOPE_ITERS = 4
_SILENCE_DB = -60.0
MAX_POSTFILTER = 1.0

LF0, VUV, CEP0 = 0, 1, 2
"""Column indices of the feature vector."""

BAP_EDGES_HZ = (0.0, 500.0, 1000.0, 2000.0, 3000.0, 4000.0, 8000.0)
N_BAP = len(BAP_EDGES_HZ) - 1
_BAP_WIN = 400        # at most 25 ms around each frame's centre (two periods, at least a hop)
_BAP_DRIFT = 0.03     # the period searched within 3 % of the frame's (pitch moves within a window)


def _frame_signal(pcm: np.ndarray, n_frames: int, win: int) -> np.ndarray:
    """Windows of ``win`` samples centred on the middle of each hop, edges zero-padded."""
    centre = np.arange(n_frames) * HOP_SAMPLES + HOP_SAMPLES // 2
    pad = win
    padded = np.pad(pcm, (pad, pad))
    starts = centre - win // 2 + pad
    idx = starts[:, None] + np.arange(win)[None, :]
    return padded[idx]


def _yin(frames: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """f0 (Hz) and aperiodicity (CMNDF minimum, 0 = periodic) per frame."""
    n, win = frames.shape
    tau_min = int(SAMPLE_RATE_HZ / F0_MAX_HZ)
    tau_max = int(SAMPLE_RATE_HZ / F0_MIN_HZ)
    w = win - tau_max
    x = frames - frames.mean(axis=1, keepdims=True)
    # d(tau) = sum (x[j] - x[j+tau])^2 over j < w, via energies and an FFT cross-correlation.
    size = 1 << int(np.ceil(np.log2(win + w)))
    fx = np.fft.rfft(x, size)
    fw = np.fft.rfft(x[:, :w], size)
    corr = np.fft.irfft(fx * np.conj(fw), size)[:, : tau_max + 1]
    sq = np.cumsum(np.pad(x * x, ((0, 0), (1, 0))), axis=1)
    e0 = sq[:, w] - sq[:, 0]
    taus = np.arange(tau_max + 1)
    e_tau = sq[:, taus + w] - sq[:, taus]
    d = e0[:, None] + e_tau - 2 * corr
    d[:, 0] = 0.0
    cum = np.cumsum(d[:, 1:], axis=1) / np.arange(1, tau_max + 1)[None, :]
    cmndf = np.ones_like(d)
    cmndf[:, 1:] = d[:, 1:] / np.maximum(cum, 1e-12)
    search = cmndf[:, tau_min:]
    below = search < _YIN_THRESHOLD
    first = np.where(below.any(axis=1), below.argmax(axis=1), search.argmin(axis=1))
    # walk down to the local minimum after the first dip under the threshold
    rows = np.arange(n)
    t = first.copy()
    for _ in range(tau_max):
        nxt = np.minimum(t + 1, search.shape[1] - 1)
        step = search[rows, nxt] < search[rows, t]
        if not step.any():
            break
        t = np.where(step, nxt, t)
    ap = search[rows, t]
    # parabolic interpolation around the minimum
    lo = np.maximum(t - 1, 0)
    hi = np.minimum(t + 1, search.shape[1] - 1)
    a, b, c = search[rows, lo], search[rows, t], search[rows, hi]
    denom = a - 2 * b + c
    shift = np.where(np.abs(denom) > 1e-12, 0.5 * (a - c) / np.where(denom == 0, 1, denom), 0.0)
    tau = t + tau_min + np.clip(shift, -1, 1)
    return SAMPLE_RATE_HZ / tau, ap


def _envelope_cepstrum(frames: np.ndarray) -> np.ndarray:
    """Liftered real cepstrum (N_CEP coefficients) of each frame's spectral envelope."""
    win = np.hanning(frames.shape[1])
    spec = np.abs(np.fft.rfft(frames * win, N_FFT))
    # scale so that white noise of unit variance has 0 dB: comparable to the synthesis filter gain
    spec /= np.sqrt(np.sum(win**2))
    log_spec = np.log(np.maximum(spec, 1e-5))
    target = log_spec
    for _ in range(_TRUE_ENVELOPE_ITERS):
        cep = np.fft.irfft(target, N_FFT)
        cep[:, N_CEP : N_FFT - N_CEP + 1] = 0.0
        smooth = np.fft.rfft(cep, N_FFT).real
        target = np.maximum(log_spec, smooth)
    cep = np.fft.irfft(target, N_FFT)[:, :N_CEP]
    return cep


def analyze(pcm: np.ndarray) -> np.ndarray:
    """Features of 16 kHz mono speech: (ceil(len / HOP), N_FEATURES) float32."""
    x = np.asarray(pcm, dtype=np.float64).reshape(-1)
    if x.size == 0:
        raise TTSError("cannot analyze empty audio")
    if not np.all(np.isfinite(x)):
        raise TTSError("audio contains NaN or infinite samples")
    if np.issubdtype(np.asarray(pcm).dtype, np.integer):
        x = x / 32768.0
    n_frames = int(np.ceil(x.size / HOP_SAMPLES))
    frames = _frame_signal(x, n_frames, N_FFT)
    f0, ap = _yin(frames)
    energy_db = 10 * np.log10(np.mean(frames[:, 128:384] ** 2, axis=1) + 1e-12)
    voiced = (ap < _YIN_THRESHOLD * 1.6) & (energy_db > _SILENCE_DB + 15) & (f0 > F0_MIN_HZ) & (f0 < F0_MAX_HZ)
    voiced = _clean_voicing(voiced)
    lf0 = _interpolate_lf0(np.log(f0), voiced)
    feats = np.empty((n_frames, N_FEATURES), dtype=np.float32)
    feats[:, LF0] = lf0
    feats[:, VUV] = voiced.astype(np.float32)
    feats[:, CEP0:] = _envelope_cepstrum(frames)
    return feats


def analyze_aperiodicity(pcm: np.ndarray, feats: np.ndarray) -> np.ndarray:
    """(frames, N_BAP) float32 in [0, 1]: each frame's noise share of the power in each of the
    ``BAP_EDGES_HZ`` bands, for the pitch and voicing in ``feats`` (``analyze(pcm)``).

    ``_periodicity`` measures how far each band repeats at the frame's period. Some of what it
    misses is not noise but the pitch and the envelope moving within the window, which this
    vocoder's own pulses do too: so the same features are also said with pulses alone (no noise
    at all), measured the same way, and the speech's noise share is taken as what it lacks of the
    pulses' periodicity: ``1 - r_speech / r_pulses``, within 0..1. Unvoiced frames are all noise."""
    r_speech = _periodicity(pcm, feats)
    pulses = synthesize(feats, bap=np.zeros((len(feats), N_BAP)), fractional=True)
    r_pulses = _periodicity(pulses, feats)
    share = 1.0 - r_speech / np.maximum(r_pulses, 1e-3)
    share[np.asarray(feats)[:, VUV] < 0.5] = 1.0
    return np.clip(share, 0.0, 1.0).astype(np.float32)


def _periodicity(pcm: np.ndarray, feats: np.ndarray) -> np.ndarray:
    """(frames, N_BAP): in each voiced frame, the band-passed speech's correlation with itself
    one period later (the best lag within ``_BAP_DRIFT`` of the frame's period), over two periods
    around the frame's centre. A periodic part and an independent noise give the periodic share
    of the power. Unvoiced frames: 0."""
    x = np.asarray(pcm, dtype=np.float64).reshape(-1)
    if np.issubdtype(np.asarray(pcm).dtype, np.integer):
        x = x / 32768.0
    n_frames = len(feats)
    out = np.zeros((n_frames, N_BAP))
    voiced = np.flatnonzero(np.asarray(feats)[:, VUV] >= 0.5)
    if voiced.size == 0 or x.size == 0:
        return out
    size = 1 << int(np.ceil(np.log2(x.size + 1)))
    spec = np.fft.rfft(x, size)
    freqs = np.fft.rfftfreq(size, 1 / SAMPLE_RATE_HZ)
    periods = SAMPLE_RATE_HZ / np.exp(np.asarray(feats)[voiced, LF0].astype(np.float64))
    t_max = int(np.ceil(SAMPLE_RATE_HZ / F0_MIN_HZ)) + 1
    pad = _BAP_WIN + t_max
    for b in range(N_BAP):
        lo, hi = BAP_EDGES_HZ[b], BAP_EDGES_HZ[b + 1]
        band = np.fft.irfft(spec * ((freqs >= lo) & (freqs < hi)), size)[: x.size]
        band = np.pad(band, (pad, pad))
        for t, period in zip(voiced, periods):
            win = int(min(_BAP_WIN, max(HOP_SAMPLES, 2 * period)))
            start = pad + t * HOP_SAMPLES + HOP_SAMPLES // 2 - win // 2
            a = band[start:start + win]
            best = 0.0
            for lag in range(int(period * (1 - _BAP_DRIFT)), int(np.ceil(period * (1 + _BAP_DRIFT))) + 1):
                c = band[start + lag:start + lag + win]
                den = np.sqrt(np.dot(a, a) * np.dot(c, c))
                if den > 1e-12:
                    best = max(best, float(np.dot(a, c) / den))
            out[t, b] = min(max(best, 0.0), 1.0)
    return out


def _bap_weights(bap: np.ndarray) -> np.ndarray:
    """Each FFT bin's noise share of the power, from the bands' (flat within a band)."""
    return np.asarray(bap, dtype=np.float64)[_BIN_BAND]


def _clean_voicing(voiced: np.ndarray) -> np.ndarray:
    """Drop isolated one-frame voiced/unvoiced flips (YIN glitches)."""
    v = voiced.copy()
    if v.size >= 3:
        mid = v[1:-1]
        flip = (v[:-2] == v[2:]) & (mid != v[:-2])
        mid[flip] = v[:-2][flip]
    return v


def _interpolate_lf0(lf0: np.ndarray, voiced: np.ndarray) -> np.ndarray:
    if not voiced.any():
        return np.full_like(lf0, np.log(150.0))
    idx = np.arange(lf0.size)
    # median-smooth the voiced contour to remove octave jumps before interpolating
    vals = lf0[voiced]
    if vals.size >= 3:
        padded = np.pad(vals, 1, mode="edge")
        vals = np.median(np.stack([padded[:-2], padded[1:-1], padded[2:]]), axis=0)
    return np.interp(idx, idx[voiced], vals)


def _mix_weights() -> np.ndarray:
    freqs = np.fft.rfftfreq(N_FFT, 1 / SAMPLE_RATE_HZ)
    ramp = np.clip((freqs - MIX_LOW_HZ) / (MIX_HIGH_HZ - MIX_LOW_HZ), 0.0, 1.0)
    return ramp * _VOICED_NOISE


_NOISE_MIX = _mix_weights()
_BIN_BAND = np.clip(np.searchsorted(np.asarray(BAP_EDGES_HZ), np.fft.rfftfreq(N_FFT, 1 / SAMPLE_RATE_HZ),
                                    side="right") - 1, 0, N_BAP - 1)


def _min_phase_response(cep: np.ndarray, postfilter: float = 0.0, postfilter_from: int = 1
                        ) -> np.ndarray:
    """Complex minimum-phase frequency response (N_FFT//2+1 bins) of a liftered cepstrum.

    ``postfilter`` > 0 deepens the envelope: its log magnitude's swing about its mean (every
    coefficient but c0) grows by ``1 + postfilter`` (formants higher, the valleys between them
    deeper, the tilt steeper), and the gain is then set so the envelope's power over the band is
    what it was. A model trained on a squared error predicts the mean of the envelopes it might
    see, flatter than any one of them; this undoes some of that, as HTS voices' postfilters do
    (the figures: models/tts-joe's card).

    ``postfilter_from``: the first cepstral coefficient the postfilter scales. 1 scales all but
    c0, the tilt too: 0.4 takes the 2-4 kHz band 5 dB down against 300-500 Hz. 3 leaves c1 and
    c2 as predicted: across the phone band (0-4 kHz, half the 16 kHz spectrum) they are the
    envelope's tilt, so only the formants' peaks and valleys deepen."""
    folded = np.zeros(N_FFT)
    folded[0] = cep[0]
    folded[1:N_CEP] = 2.0 * cep[1:N_CEP]
    log_h = np.fft.rfft(folded)
    if postfilter > 0.0:
        if postfilter_from == 1:
            # the FFT is linear: scaling folded[1:] scales log_h less its mean, c0
            sharp = (1.0 + postfilter) * log_h - postfilter * cep[0]
        else:       # less what the unscaled coefficients give: folded[:from]'s transform
            sharp = log_h + postfilter * (log_h - folded[:postfilter_from] @ _CEP_BASIS[:postfilter_from])
        sharp += 0.5 * (_log_mean_exp(2.0 * log_h.real) - _log_mean_exp(2.0 * sharp.real))
        log_h = sharp
    return np.exp(log_h)


# row n: the rfft of a unit impulse at quefrency n (exp(-2 pi i n k / N_FFT) at bin k)
_CEP_BASIS = np.exp(-2j * np.pi * np.outer(np.arange(N_CEP), np.arange(N_FFT // 2 + 1)) / N_FFT)


def _log_mean_exp(x: np.ndarray) -> float:
    top = float(x.max())
    return top + float(np.log(np.mean(np.exp(x - top))))


class StreamingVocoder:
    """Frame-by-frame synthesis; ``push`` returns the HOP_SAMPLES final samples of that frame.

    State: the pulse phase (so f0 glides across frames), the overlap-add tail of earlier frames,
    and a seeded noise generator. One instance per utterance (or per call, carried on).
    """

    def __init__(self, seed: int = 0, *, postfilter: float = 0.0, fractional: bool = False,
                 postfilter_from: int = 1) -> None:
        if not 0.0 <= postfilter <= MAX_POSTFILTER:
            raise TTSError(f"postfilter must be within 0..{MAX_POSTFILTER}, got {postfilter}")
        if not 1 <= postfilter_from < N_CEP:
            raise TTSError(f"postfilter_from must be within 1..{N_CEP - 1}, got {postfilter_from}")
        self._rng = np.random.default_rng(seed)
        self._phase = 0.0
        self._tail = np.zeros(N_FFT, dtype=np.float64)
        self._postfilter = postfilter
        self._fractional = fractional
        self._postfilter_from = postfilter_from

    def reset(self, seed: int = 0) -> None:
        self.__init__(seed, postfilter=self._postfilter,  # type: ignore[misc]
                      fractional=self._fractional, postfilter_from=self._postfilter_from)

    def push(self, frame: np.ndarray, bap: np.ndarray | None = None) -> np.ndarray:
        """``bap``: the frame's band aperiodicity (N_BAP noise shares, ``analyze_aperiodicity``),
        or None for the fixed mix (pulses below ``MIX_LOW_HZ``)."""
        f = np.asarray(frame, dtype=np.float64)
        if f.shape != (N_FEATURES,):
            raise TTSError(f"vocoder frame must have shape ({N_FEATURES},), got {f.shape}")
        if not np.all(np.isfinite(f)):
            raise TTSError("vocoder frame contains NaN or infinite values")
        f0 = float(np.clip(np.exp(f[LF0]), F0_MIN_HZ, F0_MAX_HZ))
        voiced = f[VUV] >= 0.5
        noise = self._rng.standard_normal(HOP_SAMPLES)
        spec_noise = np.fft.rfft(noise, N_FFT)
        if voiced:
            spec_pulse = self._pulse_spectrum(f0) if self._fractional else np.fft.rfft(
                self._pulses(f0), N_FFT)
            mix = _NOISE_MIX if bap is None else np.clip(_bap_weights(bap), 0.0, 1.0)
            excitation = spec_pulse * np.sqrt(1.0 - mix) + spec_noise * np.sqrt(mix)
        else:
            self._phase = 0.0
            excitation = spec_noise
        block = np.fft.irfft(excitation * _min_phase_response(f[CEP0:], self._postfilter,
                                                                  self._postfilter_from), N_FFT)
        self._tail += block
        out = self._tail[:HOP_SAMPLES].copy()
        self._tail[:-HOP_SAMPLES] = self._tail[HOP_SAMPLES:]
        self._tail[-HOP_SAMPLES:] = 0.0
        return out

    def _pulse_spectrum(self, f0: float) -> np.ndarray:
        """The spectrum of one hop of unit-power pulses, each at the exact (fractional) instant its
        period ends, band-limited: ``_pulses`` rounds each to a whole sample, up to 62.5 us of
        jitter that turns the harmonics above 2-3 kHz to noise (hoarse). The instants are those of
        ``_pulses`` less the rounding, one sample later throughout."""
        step = f0 / SAMPLE_RATE_HZ
        last = self._phase + step * HOP_SAMPLES
        k = np.arange(np.floor(self._phase) + 1, np.floor(last) + 1)
        at = (k - self._phase) / step            # in (0, HOP]: where the phase reaches k
        self._phase = float(last - np.floor(last))
        if k.size == 0:
            return np.zeros(N_FFT // 2 + 1, dtype=np.complex128)
        bins = np.arange(N_FFT // 2 + 1)
        return np.sqrt(SAMPLE_RATE_HZ / f0) * np.exp(
            -2j * np.pi * np.outer(at, bins) / N_FFT).sum(axis=0)

    def _pulses(self, f0: float) -> np.ndarray:
        """Unit-power pulse train for one hop, continuing the phase of the previous hop."""
        step = f0 / SAMPLE_RATE_HZ
        phase = self._phase + step * np.arange(1, HOP_SAMPLES + 1)
        out = np.zeros(HOP_SAMPLES)
        crossings = np.floor(phase) > np.floor(np.concatenate(([self._phase], phase[:-1])))
        out[crossings] = np.sqrt(SAMPLE_RATE_HZ / f0)
        self._phase = float(phase[-1] - np.floor(phase[-1]))
        return out


def synthesize(feats: np.ndarray, seed: int = 0, *, postfilter: float = 0.0,
               bap: np.ndarray | None = None, fractional: bool = False,
               postfilter_from: int = 1) -> np.ndarray:
    """Offline synthesis: the streaming loop over all frames. float32 in [-1, 1]. ``bap``:
    (frames, N_BAP) band aperiodicity to mix the excitation by (None: the fixed mix)."""
    f = np.asarray(feats)
    if f.ndim != 2 or f.shape[1] != N_FEATURES:
        raise TTSError(f"features must have shape (frames, {N_FEATURES}), got {f.shape}")
    if bap is not None and np.shape(bap) != (len(f), N_BAP):
        raise TTSError(f"bap must have shape ({len(f)}, {N_BAP}), got {np.shape(bap)}")
    voc = StreamingVocoder(seed, postfilter=postfilter, fractional=fractional,
                           postfilter_from=postfilter_from)
    rows = [voc.push(row, None if bap is None else bap[t]) for t, row in enumerate(f)]
    out = np.concatenate(rows) if len(f) else np.zeros(0)
    return np.clip(out, -1.0, 1.0).astype(np.float32)


def _min_phase_responses(cep: np.ndarray, postfilter: float, postfilter_from: int) -> np.ndarray:
    """``_min_phase_response`` of each row of ``cep`` (m, >= N_CEP) at once -> (m, N_FFT//2+1)."""
    m = cep.shape[0]
    folded = np.zeros((m, N_FFT))
    folded[:, 0] = cep[:, 0]
    folded[:, 1:N_CEP] = 2.0 * cep[:, 1:N_CEP]
    log_h = np.fft.rfft(folded, axis=1)
    if postfilter > 0.0:
        if postfilter_from == 1:
            sharp = (1.0 + postfilter) * log_h - postfilter * cep[:, :1]
        else:
            sharp = log_h + postfilter * (log_h - folded[:, :postfilter_from] @ _CEP_BASIS[:postfilter_from])
        sharp += 0.5 * (_log_mean_exp_rows(2.0 * log_h.real) - _log_mean_exp_rows(2.0 * sharp.real))
        log_h = sharp
    return np.exp(log_h)


def _log_mean_exp_rows(x: np.ndarray) -> np.ndarray:
    top = x.max(axis=1, keepdims=True)
    return top + np.log(np.mean(np.exp(x - top), axis=1, keepdims=True))


_MAX_PULSES = int(np.ceil(F0_MAX_HZ * HOP_SAMPLES / SAMPLE_RATE_HZ)) + 1   # pulses a hop can hold


def vocode_streams(vocoders: list[StreamingVocoder], frames: list[np.ndarray]) -> list[np.ndarray]:
    """Each vocoder's ``push`` of each row of its frames, all streams at once: ``frames[k]``
    (n_k, N_FEATURES) -> the n_k * HOP_SAMPLES samples ``vocoders[k]`` would return, the same
    numbers (``tests/ssm_engine/test_tts_vocoder_batch.py``), with each vocoder's state advanced
    as ``push`` advances it. The FFTs and the envelopes of every frame of every stream are one
    array operation each; only the per-frame phase and overlap-add walk the frames (at most a
    step's few), vectorised over the streams. The vocoders must share their settings
    (postfilter, fractional pulses): those of one voice. The fixed pulse/noise mix only (no band
    aperiodicity)."""
    if len(vocoders) != len(frames):
        raise TTSError(f"{len(vocoders)} vocoders, {len(frames)} frame arrays")
    if not vocoders:
        return []
    v0 = vocoders[0]
    settings = (v0._postfilter, v0._fractional, v0._postfilter_from)
    if any((v._postfilter, v._fractional, v._postfilter_from) != settings for v in vocoders):
        raise TTSError("vocode_streams: the vocoders' settings differ (one voice's streams only)")
    feats = [np.asarray(f, dtype=np.float64).reshape(-1, N_FEATURES) if np.size(f) else
             np.zeros((0, N_FEATURES)) for f in frames]
    for f in feats:
        if not np.all(np.isfinite(f)):
            raise TTSError("vocoder frame contains NaN or infinite values")
    counts = np.array([f.shape[0] for f in feats])
    b, n_max = len(vocoders), int(counts.max())
    if n_max == 0:
        return [np.zeros(0) for _ in vocoders]
    x = np.zeros((b, n_max, N_FEATURES))
    for k, f in enumerate(feats):
        x[k, : f.shape[0]] = f
    live = np.arange(n_max)[None, :] < counts[:, None]                       # (b, n)
    # the noise each stream's generator draws for its frames, in the order push draws it
    noise = np.zeros((b, n_max, HOP_SAMPLES))
    for k, v in enumerate(vocoders):
        if counts[k]:
            noise[k, : counts[k]] = v._rng.standard_normal((int(counts[k]), HOP_SAMPLES))
    spec_noise = np.fft.rfft(noise, N_FFT, axis=2)
    f0 = np.clip(np.exp(x[..., LF0]), F0_MIN_HZ, F0_MAX_HZ)
    voiced = (x[..., VUV] >= 0.5) & live
    step = f0 / SAMPLE_RATE_HZ
    phase = np.array([v._phase for v in vocoders])
    bins = np.arange(N_FFT // 2 + 1)
    spec_pulse = np.zeros((b, n_max, N_FFT // 2 + 1), dtype=np.complex128)
    pulses = np.zeros((b, n_max, HOP_SAMPLES))
    hop = np.arange(1, HOP_SAMPLES + 1)
    for j in range(n_max):                      # the phase runs on from frame to frame
        v_j = voiced[:, j]
        if settings[1]:
            last = phase + step[:, j] * HOP_SAMPLES
            k_ = np.floor(phase)[:, None] + 1 + np.arange(_MAX_PULSES)[None, :]     # (b, P)
            ok = (k_ <= np.floor(last)[:, None]) & v_j[:, None]
            at = (k_ - phase[:, None]) / step[:, j, None]
            amp = np.sqrt(SAMPLE_RATE_HZ / f0[:, j])
            terms = np.exp(-2j * np.pi * at[..., None] * bins / N_FFT) * ok[..., None]
            spec_pulse[:, j] = amp[:, None] * terms.sum(axis=1)
            new = last - np.floor(last)
        else:
            ph = phase[:, None] + step[:, j, None] * hop[None, :]                  # (b, HOP)
            prev = np.concatenate([phase[:, None], ph[:, :-1]], axis=1)
            cross = np.floor(ph) > np.floor(prev)
            pulses[:, j] = np.where(cross, np.sqrt(SAMPLE_RATE_HZ / f0[:, j])[:, None], 0.0)
            new = ph[:, -1] - np.floor(ph[:, -1])
        phase = np.where(live[:, j], np.where(v_j, new, 0.0), phase)
    if not settings[1]:
        spec_pulse = np.fft.rfft(pulses, N_FFT, axis=2)
    excitation = np.where(voiced[..., None],
                          spec_pulse * np.sqrt(1.0 - _NOISE_MIX) + spec_noise * np.sqrt(_NOISE_MIX),
                          spec_noise)
    resp = _min_phase_responses(x[..., CEP0:].reshape(b * n_max, N_CEP), settings[0], settings[2])
    blocks = np.fft.irfft(excitation * resp.reshape(b, n_max, -1), N_FFT, axis=2)
    tail = np.stack([v._tail for v in vocoders])
    out = np.zeros((b, n_max, HOP_SAMPLES))
    for j in range(n_max):                      # overlap-add, frame after frame
        m = live[:, j, None]
        tail = np.where(m, tail + blocks[:, j], tail)
        out[:, j] = tail[:, :HOP_SAMPLES]
        shifted = np.concatenate([tail[:, HOP_SAMPLES:], np.zeros((b, HOP_SAMPLES))], axis=1)
        tail = np.where(m, shifted, tail)
    for k, v in enumerate(vocoders):
        v._phase = float(phase[k])
        v._tail = tail[k].copy()
    return [out[k, : counts[k]].reshape(-1) for k in range(b)]
