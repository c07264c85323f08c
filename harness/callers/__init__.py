"""Scripted callers that speak to parley as a carrier or a browser would: Twilio Media Streams
(``twilio``), SIP with RTP (``sip``) and WebRTC (``webrtc``)."""
