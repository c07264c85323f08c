"""parley's model tier: the speech models as a streaming server (SageMaker's container contract,
Cartesia's WebSocket API). ``parley model-server`` runs it; ``server.py`` says what it answers."""

from .server import ModelServer, ModelServerConfig, State, default_model_dir

__all__ = ["ModelServer", "ModelServerConfig", "State", "default_model_dir"]
