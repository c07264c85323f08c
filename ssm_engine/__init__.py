"""ssm_engine: streaming state space models with a fixed-size state per stream.

Synchronous and deterministic: torch + numpy only, no asyncio, no pipecat. The pipeline layer
wraps BatchRunner's concurrent.futures.Future with ``asyncio.wrap_future``.

    from ssm_engine import SSMConfig, SSMStack, BatchRunner
    model = SSMStack(SSMConfig(d_model=256, n_layers=6, d_state=64, headdim=64, expand=2))
    state = model.init_state(batch=n)              # StackState
    y, state = model.step(x, state)                # x: (n, 256), one frame per stream
    y_seq, state = model.forward(x_seq, state)     # x_seq: (n, l, 256), chunked SSD scan
    y_ref, state = model.reference(x_seq, state)   # slow loop, for tests

Modules: config (SSMConfig), mamba2 (the layer math, glossary of symbols, GPU path), stack
(SSMStack), state (StreamState, StackState), batcher (StreamBatcher, protocols), runner
(BatchRunner), checkpoint (safetensors + JSON), errors (exception tree).
"""

from .batcher import BatchableState, StreamBatcher, StreamingModel
from .checkpoint import (
    load_checkpoint,
    load_weights,
    read_checkpoint,
    save_checkpoint,
    write_checkpoint,
)
from .config import SSMConfig
from .errors import (
    CheckpointError,
    CheckpointFormatError,
    CheckpointMismatchError,
    ConfigError,
    RunnerClosedError,
    SSMEngineError,
    StateError,
    StreamError,
    UnknownStreamError,
)
from .runner import BatchRunner
from .stack import SSMStack
from .state import StackState, StreamState

__all__ = [
    "SSMConfig",
    "SSMStack",
    "StreamState",
    "StackState",
    "StreamBatcher",
    "BatchRunner",
    "StreamingModel",
    "BatchableState",
    "save_checkpoint",
    "load_checkpoint",
    "write_checkpoint",
    "read_checkpoint",
    "load_weights",
    "SSMEngineError",
    "ConfigError",
    "StateError",
    "CheckpointError",
    "CheckpointFormatError",
    "CheckpointMismatchError",
    "StreamError",
    "UnknownStreamError",
    "RunnerClosedError",
]
