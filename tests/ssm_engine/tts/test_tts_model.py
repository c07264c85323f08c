"""TTSModel: the serving paths (windowed encoder, stepped phones, per-phone decoder calls) equal
the training path (whole sequences), and checkpoints round-trip."""

from __future__ import annotations

import json

import pytest
import torch

from ssm_engine.errors import CheckpointFormatError, ConfigError
from ssm_engine.tts.model import TTSConfig, TTSModel, frame_position, load_tts, position_features, save_tts


def _small() -> TTSModel:
    torch.manual_seed(0)
    cfg = TTSConfig(n_symbols=20,
                    enc_ssm=dict(d_model=32, n_layers=1, d_state=8, headdim=16, expand=2),
                    ssm=dict(d_model=32, n_layers=2, d_state=8, headdim=16, expand=2))
    return TTSModel(cfg).eval()


def _tokens(n: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(n)
    tok = torch.stack([torch.randint(1, 20, (n,), generator=g), torch.randint(0, 4, (n,), generator=g),
                       torch.randint(0, 5, (n,), generator=g)], dim=-1)
    return tok[None]


def test_position_features_map_frames_to_phones() -> None:
    phone, pos = position_features(torch.tensor([[2, 0, 3], [1, 1, 0]]))
    assert phone.tolist() == [[0, 0, 2, 2, 2], [0, 1, -1, -1, -1]]
    assert torch.allclose(pos[0, 2], frame_position(torch.tensor(0), torch.tensor(3)))
    assert pos[0, 4, 0].item() == pytest.approx(2 / 3)


@torch.no_grad()
def test_windowed_stepped_encoder_equals_whole_sequence() -> None:
    model = _small()
    n, la = 11, model.config.lookahead
    tok = _tokens(n)
    mask = torch.ones(1, n, dtype=torch.bool)
    whole = model.encode(tok, mask)[0]
    state = model.enc_stack.init_state(1)
    for i in range(n):
        window = torch.zeros(1, 2 * la + 1, 3, dtype=torch.long)
        wmask = torch.zeros(1, 2 * la + 1, dtype=torch.bool)
        for j in range(i - la, i + la + 1):
            if 0 <= j < n:
                window[0, j - i + la] = tok[0, j]
                wmask[0, j - i + la] = True
        local = model.encode_local(window, wmask)[:, la]
        enc, _ = model.enc_stack.step(local, state)
        assert torch.allclose(enc[0], whole[i], atol=1e-5), i


@torch.no_grad()
def test_grouped_steps_equal_the_parallel_decode() -> None:
    """Serving queues per-frame inputs and steps the stack once per r frames, padding the last
    group with zero inputs; training decodes whole sequences. Same features."""
    model = _small()
    r = model.config.frames_per_step
    tok = _tokens(6)
    enc = model.encode(tok, torch.ones(1, 6, dtype=torch.bool))
    durs = torch.tensor([[3, 1, 4, 2, 5, 2]])                 # 17 frames: 4 full groups + 1
    phone, pos = position_features(durs)
    parallel = model.decode(enc, phone, pos)[0]
    assert parallel.shape[0] == 20
    queue = []
    for i, d in enumerate(durs[0].tolist()):
        x = model.frame_inputs(enc[0, i].expand(d, -1), frame_position(torch.arange(d), torch.full((d,), d)))
        queue.extend(x.unbind(0))
    state = model.init_frame_state(1)
    rows = []
    while queue:
        group, queue = queue[:r], queue[r:]
        n = len(group)
        x = torch.stack(group + [torch.zeros_like(group[0])] * (r - n))[None]
        rows.append(model.step_frames(x, state)[0, :n])
    assert torch.allclose(torch.cat(rows), parallel[:17], atol=1e-5)


def test_checkpoint_round_trip_and_bad_config(tmp_path) -> None:
    model = _small()
    save_tts(model, tmp_path / "voice")
    again = load_tts(tmp_path / "voice")
    for (k, a), (_, b) in zip(model.state_dict().items(), again.state_dict().items(), strict=True):
        assert torch.equal(a, b), k
    doc = json.loads((tmp_path / "voice" / "config.json").read_text())
    doc["config"]["n_symbols"] = 1
    (tmp_path / "voice" / "config.json").write_text(json.dumps(doc))
    with pytest.raises(CheckpointFormatError, match="voice"):
        load_tts(tmp_path / "voice")
    with pytest.raises(ConfigError, match="odd"):
        TTSConfig(n_symbols=10, enc_kernel=4)
    with pytest.raises(ConfigError, match="postfilter_from must be within"):
        TTSConfig(n_symbols=10, postfilter_from=0)
