"""The TwiML that connects a call to parley's media stream, for inbound and outbound calls alike.

    stream_twiml("wss://parley.example.com/twilio/stream", "https://parley.example.com/twilio/connect-done",
                 {"CallSid": "CA...", "From": "+15550100"})
    # <Response><Connect action="..."><Stream url="wss://..."><Parameter name="CallSid" value="CA..."/>...

The stream URL drops query strings (Twilio's rule), so per-call data rides in ``<Parameter>``s
and arrives in the stream's ``start.customParameters``. A call parley places (``outbound``) gets
its parameters to the voice webhook in the webhook URL's query, each as ``param.NAME=VALUE``:
Twilio signs the whole URL, so they cannot be changed on the way, and any server behind the same
proxy can answer the webhook.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from xml.sax.saxutils import quoteattr

__all__ = ["PARAM_PREFIX", "params_from_query", "stream_twiml"]

PARAM_PREFIX = "param."
XML_HEAD = '<?xml version="1.0" encoding="UTF-8"?>'


def stream_twiml(stream_url: str, action_url: str | None, params: Mapping[str, str]) -> str:
    """``<Connect action><Stream url>`` with one ``<Parameter>`` per item of ``params``; without
    ``action_url`` the call ends when its stream does."""
    parameters = "".join(f"<Parameter name={quoteattr(k)} value={quoteattr(v)}/>" for k, v in params.items())
    action = f" action={quoteattr(action_url)}" if action_url is not None else ""
    return (f"{XML_HEAD}<Response><Connect{action}><Stream url={quoteattr(stream_url)}>"
            f"{parameters}</Stream></Connect></Response>")


def params_from_query(query: Iterable[tuple[str, str]]) -> dict[str, str]:
    """The ``param.NAME=VALUE`` items of a (signed) webhook URL's query, as ``{NAME: VALUE}``."""
    return {k.removeprefix(PARAM_PREFIX): v for k, v in query if k.startswith(PARAM_PREFIX) and len(k) > len(PARAM_PREFIX)}
