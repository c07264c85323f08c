"""Post-call webhooks: a signed JSON event for every ended call, delivered from a durable outbox.

    from telephony.webhooks import CallEndHookStore, WebhookConfig, WebhookSender, verify

``WebhookConfig`` (the URL and secret, validated), ``WebhookSender`` (the outbox's delivery loop),
``CallEndHookStore`` (the call store every transport writes to, telling the sender when a call
ended), ``call_event`` (the event's fields) and ``verify`` (the receiver's check). docs/webhooks.md.
"""

from telephony.webhooks.config import WebhookConfig
from telephony.webhooks.event import OUTCOMES, call_event, delivery_id, event_body
from telephony.webhooks.sender import CallEndHookStore, WebhookSender
from telephony.webhooks.signing import sign, signed_headers, verify

__all__ = ["OUTCOMES", "CallEndHookStore", "WebhookConfig", "WebhookSender", "call_event", "delivery_id",
           "event_body", "sign", "signed_headers", "verify"]
