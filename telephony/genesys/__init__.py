"""Genesys Cloud's Audio Connector (AudioHook protocol "2", the bot variant) as a way in.

``routes.py`` serves ``GET /genesys/audiohook`` (authentication, ``open``/``opened``), ``call.py``
runs a session as a call on the call core and hands it back with ``outputVariables``,
``transport.py`` carries its audio and messages, ``messages.py`` and ``signature.py`` are the wire.
"""

from telephony.genesys.routes import PATH, GenesysConfig, register_genesys_routes

__all__ = ["PATH", "GenesysConfig", "register_genesys_routes"]
