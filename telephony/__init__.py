"""Where callers come in: Twilio Media Streams (and, later, SIP and WebRTC), and the call server.

Public API::

    from telephony import CallServer, ServerConfig, CallInfo
"""

from telephony.server import CallServer, ServerConfig
from telephony.calls import CallInfo

__all__ = ["CallInfo", "CallServer", "ServerConfig"]
