"""parley's harness: the tools that call, judge and measure parley, kept out of the product.

    harness.callers.twilio   TwilioCaller, run_call: a scripted caller over Twilio Media Streams
    harness.callers.sip      SipCaller, place_sip_call: a scripted SIP/RTP caller
    harness.callers.webrtc   place_call: a scripted browser-like WebRTC caller (aiortc)
    harness.scripted_llm     ScriptedChatServer: an OpenAI-compatible server with scripted replies
    harness.stt_eval         ``parley eval stt``: WER/CER/RTF/final latency on a manifest
    harness.tts_eval         ``parley eval tts``: first audio, RTF and a judge's WER for a voice
    harness.flite            flite speech on a phone line (the callers' human-like voice)
    harness.cli              ``parley call`` and ``parley eval``, plugged into the ``parley`` command

The product packages (``deploy``, ``agent``, ``telephony``, ``pipeline``, ``ssm_engine``) never
import this package (an import-linter contract in ``make test``). The ``parley`` command finds
these commands through the ``parley.commands`` entry point group (``pyproject.toml``).
"""
