"""An outbound call's answering plan from the agent's spec: its ``voicemail:`` section with the
message filled from the call's parameters.

    plan = answering_plan(spec, {"name": "Dana", "to": "sip:+15550100@carrier"})   # None: no section

The message's ``{field}`` names are the call's parameters (``parley dial --param name=Dana``,
``from``, ``to``, a contact centre's ``X-`` headers). A field the call does not carry is left
out (the words around it stay) and its name logged, never its value: a message is still left.
The composition root hands this to the call server as its plan factory
(``telephony.calls.AnsweringPlanFactory``), as it hands over the agent factory.
"""

from __future__ import annotations

import logging
import re
import string
from collections.abc import Mapping

from agent.spec_model import AgentSpec
from pipeline.answering import AnsweringConfig
from pipeline.voicemail import AnsweringPlan

__all__ = ["answering_plan", "fill_message"]

log = logging.getLogger(__name__)


def fill_message(template: str, params: Mapping[str, str]) -> str:
    """``template`` with its fields from ``params``; missing ones empty, the spacing tidied."""
    out: list[str] = []
    missing: list[str] = []
    for literal, name, _spec, _conversion in string.Formatter().parse(template):
        out.append(literal)
        if name is not None:
            value = params.get(name)
            if value is None:
                missing.append(name)
            out.append(value or "")
    if missing:
        log.warning("voicemail message: the call has no %s; left out", ", ".join(sorted(set(missing))))
    text = " ".join("".join(out).split())
    return re.sub(r"\s+([,.;:!?])", r"\1", text)


def answering_plan(spec: AgentSpec, params: Mapping[str, str]) -> AnsweringPlan | None:
    """The plan of one call the agent places, or None when the spec has no ``voicemail:``."""
    section = spec.voicemail
    if section is None:
        return None
    return AnsweringPlan(on_machine=section.on_machine,
                         message=fill_message(section.message, params) if section.message else "",
                         on_unknown=section.on_unknown,
                         detector=AnsweringConfig(max_wait_s=section.max_wait_s))
