"""The system prompt an LLM backend gets: persona, knowledge, what to collect, tools, call details.

    prompt = build_system_prompt(spec, tools=runner.schemas(), params={"caller_name": "Ann"})

The prompt is plain text in sections. Knowledge goes in as question/answer pairs the model must
answer from; tasks tell it which details to collect and which function completes them; the tool
list repeats each function's one-line description (the schemas travel with the request too);
``params`` are the call's custom parameters (Twilio ``<Parameter>``s), given as call details.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from agent.spec import AgentSpec

_VOICE_RULES = (
    "You are talking to a caller on the phone; everything you write is spoken aloud.",
    "Answer in one to three short sentences of plain speech: no lists, no markdown, no emojis.",
    "Write numbers the way a person would say them.",
    "If you are not sure what the caller said, ask them to repeat it.",
)


def _function_name(schema: dict) -> str:
    return (schema.get("function") or schema).get("name", "")


def _function_description(schema: dict) -> str:
    return (schema.get("function") or schema).get("description", "")


def build_system_prompt(
    spec: AgentSpec,
    *,
    tools: Sequence[dict] = (),
    params: Mapping[str, str] | None = None,
) -> str:
    """The system prompt for ``spec``; ``tools`` are OpenAI-style function schemas."""
    persona = spec.persona.strip() or f"You are {spec.name}, a voice assistant."
    sections = [persona, "\n".join(_VOICE_RULES)]
    if spec.language and not spec.language.lower().startswith("en"):
        sections.append(f"Speak {spec.language}.")
    if spec.knowledge:
        lines = ["Answer questions only from this knowledge. If the answer is not here, say "
                 "you do not know and offer to take a message or transfer the caller."]
        for item in spec.knowledge:
            lines.append(f"Q: {item.question}\nA: {item.answer}")
        sections.append("\n".join(lines))
    names = {_function_name(t) for t in tools}
    for task in spec.tasks:
        if task.name not in names:
            continue
        lines = [f"When the caller wants to {task.name.replace('_', ' ')}, collect these "
                 "details one at a time:"]
        for slot_name in task.slots:
            slot = spec.slot(slot_name)
            check = " Read it back to confirm it." if slot.confirm else ""
            lines.append(f"- {slot.name} ({slot.kind}): ask \"{slot.prompt}\"{check}")
        lines.append(f"Then call the {task.name} function with them.")
        sections.append("\n".join(lines))
    if tools:
        lines = ["Functions you can call:"]
        lines += [f"- {_function_name(t)}: {_function_description(t)}" for t in tools]
        lines.append("Never read function names or JSON to the caller.")
        sections.append("\n".join(lines))
    if params:
        lines = ["Call details:"] + [f"- {key}: {value}" for key, value in sorted(params.items())]
        sections.append("\n".join(lines))
    return "\n\n".join(sections)
