"""The agent spec: one YAML file that says who the agent is and what it can do.

    spec = load_spec("agent/examples/receptionist.yaml")   # -> AgentSpec, or raises SpecError

A spec names the agent and its persona (the system prompt of LLM backends), the greeting, the
knowledge it answers from (question/answer pairs, or ``document:`` files split into passages),
the slots it collects, the tasks that use them (a trigger, the slots, an optional tool, what to
say when done), its tools, hand-off targets, a DTMF menu, limits and canned messages, and the
voice it speaks with (``voice: joe``, one of ``pipeline.voices.VOICES``), and what a call it places
does when a machine or nobody answers (``voicemail:``).

Every mistake raises :class:`agent.errors.SpecError` whose message starts ``path:line:`` (line
numbers come from the YAML node marks). String values may use ``${VAR}`` and ``${VAR:-default}``;
they are expanded against the ``env`` mapping given to :func:`load_spec` (none: no variables;
the command line passes ``os.environ``, which only it reads).
"""

from __future__ import annotations

import os
import re
import string
from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any, TypeVar, get_args

import yaml

from agent.errors import SpecError
from agent.schema import schema_problems
from agent.spec_model import (
    AgentSpec,
    DtmfAction,
    DtmfOption,
    HandoffKind,
    HandoffSpec,
    HoldAudio,
    HttpMethod,
    KnowledgeItem,
    LimitsSpec,
    LLMSpec,
    MessagesSpec,
    RecordingSpec,
    SlotKind,
    SlotSpec,
    TaskSpec,
    ToolKind,
    ToolSpec,
    TransferMode,
    VoicemailSpec,
)
from pipeline.errors import ConfigError
from pipeline.options import RecordingFormat
from pipeline.recordings_s3 import RecordingsS3Config
from pipeline.voicemail import OnMachine, OnUnknown

__all__ = [
    "AgentSpec", "DtmfOption", "HandoffSpec", "KnowledgeItem", "LLMSpec", "LimitsSpec",
    "MessagesSpec", "SlotSpec", "TaskSpec", "ToolSpec", "VoicemailSpec", "load_spec", "parse_spec",
]

_Option = TypeVar("_Option", bound=str)


def _options(literal: Any) -> tuple[Any, ...]:
    """A ``Literal``'s allowed values, in order: the spec accepts exactly what the types say."""
    return get_args(literal)


_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


class _Reader:
    """Reads YAML nodes into values; every error names the file and the node's line."""

    def __init__(self, source: str, env: Mapping[str, str], base_dir: Path | None):
        self.source = source
        self.env = env
        self.base_dir = base_dir

    def fail(self, node: yaml.Node | None, message: str) -> SpecError:
        line = node.start_mark.line + 1 if node is not None else 1
        return SpecError(f"{self.source}:{line}: {message}")

    def mapping(self, node: yaml.Node, what: str, allowed: set[str]) -> dict[str, yaml.Node]:
        if not isinstance(node, yaml.MappingNode):
            raise self.fail(node, f"{what} must be a mapping")
        out: dict[str, yaml.Node] = {}
        for key, value in node.value:
            if not isinstance(key, yaml.ScalarNode):
                raise self.fail(key, f"{what}: keys must be plain names")
            if key.value not in allowed:
                raise self.fail(key, f"{what}: unknown key {key.value!r} "
                                     f"(expected one of: {', '.join(sorted(allowed))})")
            if key.value in out:
                raise self.fail(key, f"{what}: duplicate key {key.value!r}")
            out[key.value] = value
        return out

    def seq(self, node: yaml.Node, what: str) -> list[yaml.Node]:
        if isinstance(node, yaml.ScalarNode) and node.value in ("", "~", "null"):
            return []
        if not isinstance(node, yaml.SequenceNode):
            raise self.fail(node, f"{what} must be a list")
        return list(node.value)

    def string(self, node: yaml.Node, what: str, *, empty_ok: bool = False) -> str:
        if not isinstance(node, yaml.ScalarNode) or node.tag == "tag:yaml.org,2002:null":
            raise self.fail(node, f"{what} must be a string")
        text = _ENV_REF.sub(self._expand(node, what), node.value).strip()
        if not text and not empty_ok:
            raise self.fail(node, f"{what} must not be empty")
        return text

    def _expand(self, node: yaml.Node, what: str):
        def sub(m: re.Match) -> str:
            value = self.env.get(m.group(1))
            if value is None:
                if m.group(2) is None:
                    raise self.fail(node, f"{what}: environment variable {m.group(1)} is not "
                                          "set and has no default (write ${VAR:-default})")
                return m.group(2)
            return value
        return sub

    def number(self, node: yaml.Node, what: str, *, integer: bool = False,
               minimum: float = 0.0) -> float:
        value = self.plain(node)
        ok = isinstance(value, int) if integer else isinstance(value, (int, float))
        if not ok or isinstance(value, bool):
            raise self.fail(node, f"{what} must be {'an integer' if integer else 'a number'}")
        if value < minimum:
            raise self.fail(node, f"{what} must be at least {minimum:g}")
        return value

    def boolean(self, node: yaml.Node, what: str) -> bool:
        value = self.plain(node)
        if not isinstance(value, bool):
            raise self.fail(node, f"{what} must be true or false")
        return value

    def choice(self, node: yaml.Node, what: str, options: tuple[_Option, ...]) -> _Option:
        value = self.string(node, what)
        for option in options:
            if value == option:
                return option
        raise self.fail(node, f"{what} must be one of {', '.join(options)}, not {value!r}")

    def strings(self, node: yaml.Node, what: str) -> tuple[str, ...]:
        if isinstance(node, yaml.ScalarNode):
            return (self.string(node, what),)
        return tuple(self.string(n, what) for n in self.seq(node, what))

    def key(self, node: yaml.Node, what: str) -> str:
        """A scalar as text, whatever YAML made of it (``1`` and ``"1"`` are the same key)."""
        if not isinstance(node, yaml.ScalarNode):
            raise self.fail(node, f"{what} must be a single value")
        return node.value.strip()

    @staticmethod
    def plain(node: yaml.Node) -> Any:
        loader = yaml.SafeLoader("")
        try:
            return loader.construct_object(node, deep=True)
        finally:
            loader.dispose()


def _dataclass_keys(cls) -> set[str]:
    return {f.name for f in fields(cls)}


def _knowledge(r: _Reader, node: yaml.Node) -> tuple[KnowledgeItem, ...]:
    items: list[KnowledgeItem] = []
    for i, item_node in enumerate(r.seq(node, "knowledge")):
        what = f"knowledge[{i}]"
        m = r.mapping(item_node, what, {"question", "answer", "keywords", "document"})
        if "document" in m:
            if len(m) > 1:
                raise r.fail(item_node, f"{what}: a document item takes only 'document'")
            items += _document(r, m["document"], what)
            continue
        for required in ("question", "answer"):
            if required not in m:
                raise r.fail(item_node, f"{what}: missing {required!r}")
        keywords = r.strings(m["keywords"], f"{what}.keywords") if "keywords" in m else ()
        items.append(KnowledgeItem(r.string(m["question"], f"{what}.question"),
                                   r.string(m["answer"], f"{what}.answer"), keywords))
    return tuple(items)


def _document(r: _Reader, node: yaml.Node, what: str) -> list[KnowledgeItem]:
    """A text file split into passages at blank lines; a passage's first line is its question."""
    name = r.string(node, f"{what}.document")
    path = Path(name) if r.base_dir is None else r.base_dir / name
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise r.fail(node, f"{what}.document: cannot read {path}: {exc.strerror}") from exc
    passages = [p.strip() for p in re.split(r"\n\s*\n", text) if p.strip()]
    items = []
    for passage in passages:
        first, _, rest = passage.partition("\n")
        heading = first.lstrip("#").strip()
        body = " ".join(line.strip() for line in rest.splitlines()).strip() or heading
        items.append(KnowledgeItem(question=heading, answer=body))
    if not items:
        raise r.fail(node, f"{what}.document: {path} has no text")
    return items


def _slots(r: _Reader, node: yaml.Node) -> tuple[SlotSpec, ...]:
    out = []
    for i, n in enumerate(r.seq(node, "slots")):
        what = f"slots[{i}]"
        m = r.mapping(n, what, _dataclass_keys(SlotSpec))
        if "name" not in m or "prompt" not in m:
            raise r.fail(n, f"{what}: needs 'name' and 'prompt'")
        out.append(SlotSpec(
            name=r.string(m["name"], f"{what}.name"),
            prompt=r.string(m["prompt"], f"{what}.prompt"),
            kind=r.choice(m["kind"], f"{what}.kind", _options(SlotKind))
            if "kind" in m else "text",
            confirm=r.boolean(m["confirm"], f"{what}.confirm") if "confirm" in m else True,
            confirm_prompt=r.string(m["confirm_prompt"], f"{what}.confirm_prompt")
            if "confirm_prompt" in m else None,
            sensitive=r.boolean(m["sensitive"], f"{what}.sensitive") if "sensitive" in m else False,
        ))
    _unique(r, node, "slots", [s.name for s in out])
    return tuple(out)


def _recording(r: _Reader, node: yaml.Node) -> RecordingSpec:
    m = r.mapping(node, "recording", _dataclass_keys(RecordingSpec))
    return RecordingSpec(
        enabled=r.boolean(m["enabled"], "recording.enabled") if "enabled" in m else False,
        announce=r.string(m["announce"], "recording.announce") if "announce" in m else None,
        retention_days=int(r.number(m["retention_days"], "recording.retention_days", integer=True, minimum=1))
        if "retention_days" in m else None,
        format=r.choice(m["format"], "recording.format", _options(RecordingFormat)) if "format" in m else "opus",
        s3=_s3_url(r, m["s3"]) if "s3" in m else None,
        kms_key=r.string(m["kms_key"], "recording.kms_key") if "kms_key" in m else None,
        keep_local=r.boolean(m["keep_local"], "recording.keep_local") if "keep_local" in m else False,
    )


def _s3_url(r: _Reader, node: yaml.Node) -> str:
    url = r.string(node, "recording.s3")
    try:
        RecordingsS3Config.parse(url)
    except ConfigError as exc:
        raise r.fail(node, f"recording.s3: {exc}") from None
    return url


def _tools(r: _Reader, node: yaml.Node) -> tuple[ToolSpec, ...]:
    out = []
    for i, n in enumerate(r.seq(node, "tools")):
        what = f"tools[{i}]"
        m = r.mapping(n, what, _dataclass_keys(ToolSpec))
        if "name" not in m:
            raise r.fail(n, f"{what}: needs 'name'")
        name = r.string(m["name"], f"{what}.name")
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,63}", name):
            raise r.fail(m["name"], f"{what}.name must be an identifier (letters, digits, _)")
        kind: ToolKind = r.choice(m["kind"], f"{what}.kind", _options(ToolKind)) \
            if "kind" in m else "webhook"
        url = r.string(m["url"], f"{what}.url") if "url" in m else None
        if kind == "webhook":
            if url is None:
                raise r.fail(n, f"{what}: a webhook tool needs 'url'")
            if not re.match(r"https?://", url):
                raise r.fail(m["url"], f"{what}.url must start with http:// or https://")
        schema: dict = {"type": "object", "properties": {}}
        if "input_schema" in m:
            schema = r.plain(m["input_schema"])
            problems = schema_problems(schema, f"{what}.input_schema")
            if not problems and schema.get("type") != "object":
                problems = [f"{what}.input_schema must have type: object"]
            if problems:
                raise r.fail(m["input_schema"], "; ".join(problems))
        out.append(ToolSpec(
            name=name,
            description=r.string(m["description"], f"{what}.description")
            if "description" in m else name.replace("_", " "),
            kind=kind, url=url,
            method=r.choice(m["method"], f"{what}.method", _options(HttpMethod))
            if "method" in m else "POST",
            input_schema=schema,
            timeout_s=r.number(m["timeout_s"], f"{what}.timeout_s", minimum=0.01)
            if "timeout_s" in m else 3.0,
            retries=int(r.number(m["retries"], f"{what}.retries", integer=True))
            if "retries" in m else 1,
            say_result=r.string(m["say_result"], f"{what}.say_result")
            if "say_result" in m else None,
        ))
    _unique(r, node, "tools", [t.name for t in out])
    return tuple(out)


def _handoffs(r: _Reader, node: yaml.Node) -> tuple[HandoffSpec, ...]:
    out = []
    for i, n in enumerate(r.seq(node, "handoffs")):
        what = f"handoffs[{i}]"
        m = r.mapping(n, what, {"name", "kind", "target", "mode", "timeout_s", "hold_audio"})
        if not {"name", "kind", "target"} <= set(m):
            raise r.fail(n, f"{what}: needs 'name', 'kind' and 'target'")
        kind = r.choice(m["kind"], f"{what}.kind", _options(HandoffKind))
        target = r.string(m["target"], f"{what}.target")
        if kind == "dial" and not re.fullmatch(r"\+?[0-9]{3,15}", target):
            raise r.fail(m["target"], f"{what}.target must be a phone number like +15550100")
        if kind == "enqueue" and not re.fullmatch(r"WW[0-9a-fA-F]{32}", target):
            raise r.fail(m["target"], f"{what}.target must be a TaskRouter workflow SID (WW...)")
        if kind == "sip" and not target.startswith(("sip:", "sips:")):
            raise r.fail(m["target"], f"{what}.target must be a sip: URI")
        mode: TransferMode = r.choice(m["mode"], f"{what}.mode", _options(TransferMode)) if "mode" in m else "blind"
        if mode == "warm" and kind == "enqueue":
            raise r.fail(m["mode"], f"{what}.mode: a queue cannot be warm-transferred (it has no person to brief)")
        out.append(HandoffSpec(
            r.string(m["name"], f"{what}.name"), kind, target, mode=mode,
            timeout_s=r.number(m["timeout_s"], f"{what}.timeout_s", minimum=1) if "timeout_s" in m else 20.0,
            hold_audio=r.choice(m["hold_audio"], f"{what}.hold_audio", _options(HoldAudio))
            if "hold_audio" in m else "music"))
    _unique(r, node, "handoffs", [h.name for h in out])
    return tuple(out)


def _tasks(r: _Reader, node: yaml.Node) -> tuple[TaskSpec, ...]:
    out = []
    for i, n in enumerate(r.seq(node, "tasks")):
        what = f"tasks[{i}]"
        m = r.mapping(n, what, _dataclass_keys(TaskSpec))
        if "name" not in m or "triggers" not in m:
            raise r.fail(n, f"{what}: needs 'name' and 'triggers'")
        out.append(TaskSpec(
            name=r.string(m["name"], f"{what}.name"),
            triggers=r.strings(m["triggers"], f"{what}.triggers"),
            slots=r.strings(m["slots"], f"{what}.slots") if "slots" in m else (),
            tool=r.string(m["tool"], f"{what}.tool") if "tool" in m else None,
            done=r.string(m["done"], f"{what}.done") if "done" in m else "",
            intro=r.string(m["intro"], f"{what}.intro") if "intro" in m else "",
        ))
    _unique(r, node, "tasks", [t.name for t in out])
    return tuple(out)


def _dtmf(r: _Reader, node: yaml.Node) -> tuple[DtmfOption, ...]:
    out = []
    for i, n in enumerate(r.seq(node, "dtmf_menu")):
        what = f"dtmf_menu[{i}]"
        m = r.mapping(n, what, {"key", "action", "value"})
        if "key" not in m or "action" not in m:
            raise r.fail(n, f"{what}: needs 'key' and 'action'")
        key = r.key(m["key"], f"{what}.key")
        if not re.fullmatch(r"[0-9*#]", key):
            raise r.fail(m["key"], f"{what}.key must be one of 0-9, * or #")
        action = r.choice(m["action"], f"{what}.action", _options(DtmfAction))
        value = r.string(m["value"], f"{what}.value") if "value" in m else ""
        if action in ("say", "tool") and not value:
            raise r.fail(n, f"{what}: action {action!r} needs a 'value'")
        out.append(DtmfOption(key, action, value))
    _unique(r, node, "dtmf_menu", [o.key for o in out])
    return tuple(out)


def _simple(r: _Reader, node: yaml.Node, cls, what: str):
    """A flat section of strings and numbers (limits, llm, messages) into its dataclass."""
    m = r.mapping(node, what, _dataclass_keys(cls))
    defaults = cls()
    values: dict[str, Any] = {}
    for key, value_node in m.items():
        default = getattr(defaults, key)
        if isinstance(default, bool):
            values[key] = r.boolean(value_node, f"{what}.{key}")
        elif isinstance(default, int):
            values[key] = int(r.number(value_node, f"{what}.{key}", integer=True))
        elif isinstance(default, float):
            values[key] = float(r.number(value_node, f"{what}.{key}"))
        else:
            values[key] = r.string(value_node, f"{what}.{key}")
    if cls is LLMSpec and "backend" in values and values["backend"] not in (
            "embedded", "openai", "bedrock"):
        raise r.fail(m["backend"], f"{what}.backend must be one of embedded, openai, bedrock")
    return cls(**values)


VOICEMAIL_MAX_WAIT_S = (3.0, 120.0)  # the detector decides by 3 s; a machine's greeting rarely runs past a minute


def _voicemail(r: _Reader, node: yaml.Node) -> VoicemailSpec:
    m = r.mapping(node, "voicemail", _dataclass_keys(VoicemailSpec))
    message = _template(r, m["message"], "voicemail.message") if "message" in m else None
    on_machine: OnMachine = r.choice(m["on_machine"], "voicemail.on_machine", _options(OnMachine)) \
        if "on_machine" in m else "leave_message"
    if on_machine == "leave_message" and message is None:
        raise r.fail(node, "voicemail: on_machine leave_message needs a 'message' (or on_machine: hang_up)")
    max_wait_s = VoicemailSpec.max_wait_s
    if "max_wait_s" in m:
        low, high = VOICEMAIL_MAX_WAIT_S
        max_wait_s = float(r.number(m["max_wait_s"], "voicemail.max_wait_s", minimum=low))
        if max_wait_s > high:
            raise r.fail(m["max_wait_s"], f"voicemail.max_wait_s must be at most {high:g}")
    return VoicemailSpec(
        message=message, on_machine=on_machine,
        on_unknown=r.choice(m["on_unknown"], "voicemail.on_unknown", _options(OnUnknown))
        if "on_unknown" in m else "greet",
        max_wait_s=max_wait_s,
    )


def _template(r: _Reader, node: yaml.Node, what: str) -> str:
    """Text with ``{field}`` names of the call's parameters (``{{`` for a brace); some words of its
    own, so it never fills to nothing."""
    text = r.string(node, what)
    try:
        parts = list(string.Formatter().parse(text))
    except ValueError as exc:
        raise r.fail(node, f"{what}: {exc} (write {{{{ for a literal brace)") from exc
    for _literal, name, spec, conversion in parts:
        if name is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise r.fail(node, f"{what}: {{{name}}} is not a parameter name (letters, digits, _)")
        if spec or conversion:
            raise r.fail(node, f"{what}: {{{name}}} takes no format or conversion")
    if not any(re.search(r"\w", literal) for literal, *_ in parts):
        raise r.fail(node, f"{what} must have some words besides its {{fields}}")
    return text


def _voice(r: _Reader, node: yaml.Node) -> str:
    """One of the shipped voices, by name (the folder is the command line's business)."""
    from pipeline.voices import VOICES

    name = r.string(node, "voice")
    if name not in VOICES:
        raise r.fail(node, f"voice must be one of {', '.join(VOICES)}, not {name!r}")
    return name


def _unique(r: _Reader, node: yaml.Node, what: str, names: list[str]) -> None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise r.fail(node, f"{what}: {name!r} appears twice")
        seen.add(name)


_TOP = {f.name for f in fields(AgentSpec)}


def parse_spec(text: str, *, source: str = "<spec>", env: Mapping[str, str] | None = None,
               base_dir: Path | None = None) -> AgentSpec:
    """An :class:`AgentSpec` from YAML text; ``source`` names it in errors."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else 1
        raise SpecError(f"{source}:{line}: not valid YAML: {getattr(exc, 'problem', exc)}") from exc
    r = _Reader(source, {} if env is None else env, base_dir)
    if root is None:
        raise SpecError(f"{source}:1: the spec is empty")
    m = r.mapping(root, "the spec", _TOP)
    for required in ("name", "greeting"):
        if required not in m:
            raise r.fail(root, f"missing required key {required!r}")
    spec = AgentSpec(
        name=r.string(m["name"], "name"),
        persona=r.string(m["persona"], "persona") if "persona" in m else "",
        greeting=r.string(m["greeting"], "greeting"),
        language=r.string(m["language"], "language") if "language" in m else "en-US",
        knowledge=_knowledge(r, m["knowledge"]) if "knowledge" in m else (),
        slots=_slots(r, m["slots"]) if "slots" in m else (),
        tools=_tools(r, m["tools"]) if "tools" in m else (),
        handoffs=_handoffs(r, m["handoffs"]) if "handoffs" in m else (),
        limits=_simple(r, m["limits"], LimitsSpec, "limits") if "limits" in m else LimitsSpec(),
        llm=_simple(r, m["llm"], LLMSpec, "llm") if "llm" in m else LLMSpec(),
        dtmf_menu=_dtmf(r, m["dtmf_menu"]) if "dtmf_menu" in m else (),
        messages=_simple(r, m["messages"], MessagesSpec, "messages")
        if "messages" in m else MessagesSpec(),
        tasks=_tasks(r, m["tasks"]) if "tasks" in m else (),
        voice=_voice(r, m["voice"]) if "voice" in m else None,
        recording=_recording(r, m["recording"]) if "recording" in m else RecordingSpec(),
        voicemail=_voicemail(r, m["voicemail"]) if "voicemail" in m else None,
    )
    _cross_check(r, m, spec)
    return spec


def _cross_check(r: _Reader, m: dict[str, yaml.Node], spec: AgentSpec) -> None:
    """References between sections: task slots and tools, DTMF targets."""
    slot_names = {s.name for s in spec.slots}
    for i, task in enumerate(spec.tasks):
        node = m["tasks"].value[i]
        for name in task.slots:
            if name not in slot_names:
                raise r.fail(node, f"tasks[{i}]: unknown slot {name!r}")
        if task.tool is not None and spec.tool(task.tool) is None:
            raise r.fail(node, f"tasks[{i}]: unknown tool {task.tool!r}")
    for i, option in enumerate(spec.dtmf_menu):
        node = m["dtmf_menu"].value[i]
        if option.action == "tool" and spec.tool(option.value) is None:
            raise r.fail(node, f"dtmf_menu[{i}]: unknown tool {option.value!r}")
        if option.action == "transfer" and spec.handoff(option.value or None) is None:
            raise r.fail(node, f"dtmf_menu[{i}]: no hand-off {option.value or '(any)'!r}")


def load_spec(path: str | os.PathLike, *, env: Mapping[str, str] | None = None) -> AgentSpec:
    """Read and validate the spec at ``path``; ``document:`` paths are relative to its folder."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecError(f"{p}:1: cannot read the spec: {exc.strerror}") from exc
    return parse_spec(text, source=str(p), env=env, base_dir=p.parent)
