"""Browser calls over WebRTC (aiortc, through pipecat's SmallWebRTC transport).

Public API::

    from telephony.webrtc import register_webrtc_routes, WebRTCConfig, WebRTCGateway, WebRTCCall
    from telephony.webrtc import ice   # ice.pin_host_addresses(ice.LOOPBACK)
"""

from telephony.webrtc.call import WebRTCCall
from telephony.webrtc.errors import SignalingError, UnknownPeerError
from telephony.webrtc.routes import WebRTCConfig, WebRTCGateway, register_webrtc_routes

__all__ = ["SignalingError", "UnknownPeerError", "WebRTCCall", "WebRTCConfig", "WebRTCGateway",
           "register_webrtc_routes"]
