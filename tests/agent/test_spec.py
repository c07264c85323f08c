"""Agent specs: the examples load, mistakes name their line, ${VAR:-default} expands."""

from pathlib import Path

import pytest

from agent.errors import SpecError
from agent.spec import AgentSpec, LimitsSpec, load_spec, parse_spec

EXAMPLES = Path(__file__).resolve().parents[2] / "agent" / "examples"

MINIMAL = """\
name: Test line
greeting: Hello.
"""


def test_receptionist_example_loads():
    spec = load_spec(EXAMPLES / "receptionist.yaml", env={})
    assert spec.name == "Riverside Dental reception"
    assert [s.name for s in spec.slots] == ["name", "phone", "message"]
    assert [s.confirm for s in spec.slots] == [True, True, False]
    assert spec.slot("phone").kind == "phone"
    assert len(spec.knowledge) == 7
    assert spec.tasks[0].slots == ("name", "phone", "message")
    assert spec.handoff().target == "+15550100"
    assert {o.key: o.action for o in spec.dtmf_menu} == {"1": "say", "0": "transfer"}
    assert spec.llm.backend == "embedded"
    assert spec.messages.goodbye.startswith("Thank you for calling Riverside Dental")


def test_order_status_example_loads_with_its_url_from_the_environment():
    spec = load_spec(EXAMPLES / "order_status.yaml", env={})
    tool = spec.tool("lookup_order")
    assert tool is not None and tool.kind == "webhook"
    assert tool.url == "http://127.0.0.1:8099/orders/lookup"
    assert tool.input_schema["required"] == ["order_number"]
    assert spec.tasks[0].tool == "lookup_order"
    assert spec.limits == LimitsSpec(max_call_s=300, silence_prompt_s=8, max_silence_prompts=2)
    spec2 = load_spec(EXAMPLES / "order_status.yaml", env={"ORDER_API_URL": "http://orders:80"})
    assert spec2.tool("lookup_order").url == "http://orders:80/orders/lookup"


def test_minimal_spec_gets_defaults():
    spec = parse_spec(MINIMAL)
    assert isinstance(spec, AgentSpec)
    assert spec.persona == "" and spec.knowledge == () and spec.limits == LimitsSpec()
    assert spec.messages.not_understood


def test_the_voice_is_one_of_the_shipped_voices():
    assert parse_spec(MINIMAL).voice is None               # the server's default
    assert parse_spec(MINIMAL + "voice: joe\n").voice == "joe"


def test_env_reference_without_default_must_be_set():
    text = MINIMAL + "persona: You work for ${COMPANY}.\n"
    assert parse_spec(text, env={"COMPANY": "Acme"}).persona == "You work for Acme."
    with pytest.raises(SpecError, match=r"<spec>:3: .*COMPANY is not set"):
        parse_spec(text, env={})


def test_documents_are_split_into_passages(tmp_path):
    (tmp_path / "faq.md").write_text("# Opening hours\nNine to five.\n\n# Parking\nBehind the shop.\n")
    (tmp_path / "spec.yaml").write_text(MINIMAL + "knowledge:\n  - document: faq.md\n")
    spec = load_spec(tmp_path / "spec.yaml")
    assert [(k.question, k.answer) for k in spec.knowledge] == [
        ("Opening hours", "Nine to five."), ("Parking", "Behind the shop.")]


def test_a_handoff_is_blind_unless_declared_warm():
    spec = parse_spec(MINIMAL + "handoffs:\n  - name: front\n    kind: dial\n    target: '+15550100'\n"
                      "  - name: desk\n    kind: sip\n    target: sip:desk@pbx.example\n    mode: warm\n"
                      "    timeout_s: 12\n    hold_audio: tone\n", env={})
    front, desk = spec.handoffs
    assert (front.mode, front.timeout_s, front.hold_audio) == ("blind", 20.0, "music")
    assert (desk.mode, desk.timeout_s, desk.hold_audio) == ("warm", 12, "tone")


@pytest.mark.parametrize("extra, line, message", [
    ("colour: blue\n", 3, "unknown key 'colour'"),
    ("limits:\n  silence_prompt_s: soon\n", 4, "limits.silence_prompt_s must be a number"),
    ("limits:\n  max_silence_prompts: -1\n", 4, "must be at least 0"),
    ("slots:\n  - name: phone\n    prompt: Number?\n    kind: telephone\n", 6,
     "slots\\[0\\].kind must be one of"),
    ("slots:\n  - name: phone\n", 4, "needs 'name' and 'prompt'"),
    ("handoffs:\n  - name: desk\n    kind: dial\n    target: front desk\n", 6,
     "must be a phone number"),
    ("handoffs:\n  - name: flex\n    kind: enqueue\n    target: WW123\n", 6, "workflow SID"),
    ("handoffs:\n  - name: desk\n    kind: sip\n    target: sip:d@x\n    mode: hot\n", 7,
     "mode must be one of blind, warm"),
    ("handoffs:\n  - name: flex\n    kind: enqueue\n    target: WW" + "0" * 32 + "\n    mode: warm\n", 7,
     "a queue cannot be warm-transferred"),
    ("handoffs:\n  - name: desk\n    kind: sip\n    target: sip:d@x\n    timeout_s: 0\n", 7,
     "must be at least 1"),
    ("handoffs:\n  - name: desk\n    kind: sip\n    target: sip:d@x\n    hold_audio: jazz\n", 7,
     "hold_audio must be one of music, tone"),
    ("tools:\n  - name: lookup\n    kind: webhook\n", 4, "needs 'url'"),
    ("tools:\n  - name: lookup\n    url: ftp://x\n", 5, "must start with http"),
    ("tools:\n  - name: look up\n    url: http://x\n", 4, "must be an identifier"),
    ("tools:\n  - name: lookup\n    url: http://x\n    input_schema:\n      type: object\n"
     "      properties:\n        n: {type: bigint}\n", 7, "unknown type 'bigint'"),
    ("dtmf_menu:\n  - key: 12\n    action: say\n    value: hi\n", 4, "key must be one of"),
    ("dtmf_menu:\n  - key: 1\n    action: tool\n    value: nope\n", 4, "unknown tool 'nope'"),
    ("dtmf_menu:\n  - key: 0\n    action: transfer\n", 4, "no hand-off"),
    ("tasks:\n  - name: msg\n    triggers: [message]\n    slots: [name]\n", 4,
     "unknown slot 'name'"),
    ("llm:\n  backend: gpt\n", 4, "backend must be one of"),
    ("knowledge:\n  - question: Hours?\n", 4, "missing 'answer'"),
    ("knowledge:\n  - document: missing.md\n", 4, "cannot read"),
    ("greeting: again\n", 3, "duplicate key 'greeting'"),
    ("voice: amy\n", 3, "voice must be one of slt, joe, not 'amy'"),
])
def test_mistakes_name_the_file_and_line(extra, line, message):
    with pytest.raises(SpecError, match=rf"^my\.yaml:{line}: .*{message}"):
        parse_spec(MINIMAL + extra, source="my.yaml", env={})


def test_yaml_syntax_errors_name_the_line():
    with pytest.raises(SpecError, match=r"^s\.yaml:3: not valid YAML"):
        parse_spec("name: x\ngreeting: hi\n\tslots: []\n", source="s.yaml")


def test_missing_required_keys_and_unreadable_files(tmp_path):
    with pytest.raises(SpecError, match="missing required key 'greeting'"):
        parse_spec("name: x\n")
    with pytest.raises(SpecError, match=r"the spec is empty"):
        parse_spec("")
    with pytest.raises(SpecError, match=r"nope\.yaml:1: cannot read"):
        load_spec(tmp_path / "nope.yaml")


def test_a_slot_can_be_marked_sensitive():
    spec = parse_spec(MINIMAL + "slots:\n  - name: card\n    kind: number\n    prompt: Your card?\n"
                      "    sensitive: true\n  - name: name\n    prompt: Your name?\n", source="s.yaml", env={})
    assert [(s.name, s.sensitive) for s in spec.slots] == [("card", True), ("name", False)]
    with pytest.raises(SpecError, match=r"^s\.yaml:7: .*sensitive"):
        parse_spec(MINIMAL + "slots:\n  - name: card\n    kind: number\n    prompt: Your card?\n"
                   "    sensitive: maybe\n", source="s.yaml", env={})


def test_the_recording_section():
    spec = parse_spec(MINIMAL + "recording:\n  enabled: true\n  announce: This call is recorded.\n"
                      "  retention_days: 30\n", source="s.yaml", env={})
    assert (spec.recording.enabled, spec.recording.announce, spec.recording.retention_days) == \
        (True, "This call is recorded.", 30)
    assert not parse_spec(MINIMAL, env={}).recording.enabled
    with pytest.raises(SpecError, match=r"^s\.yaml:5: recording\.retention_days must be at least 1"):
        parse_spec(MINIMAL + "recording:\n  enabled: true\n  retention_days: 0\n", source="s.yaml", env={})
    assert spec.recording.format == "opus"                  # Ogg/Opus unless the spec asks for WAV
    assert parse_spec(MINIMAL + "recording:\n  format: wav\n", env={}).recording.format == "wav"
    with pytest.raises(SpecError, match=r"recording\.format must be one of opus, wav, not 'mp3'"):
        parse_spec(MINIMAL + "recording:\n  format: mp3\n", source="s.yaml", env={})
