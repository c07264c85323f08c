"""The embedded agent inside a real pipecat pipeline (pipecat's run_test)."""

import dataclasses
from pathlib import Path

import pytest
from aiohttp import web
from pipecat.audio.dtmf.types import KeypadEntry
from pipecat.frames.frames import (
    BotStartedSpeakingFrame,
    BotStoppedSpeakingFrame,
    EndWorkerFrame,
    InputDTMFFrame,
    LLMContextFrame,
    LLMTextFrame,
    UserStartedSpeakingFrame,
    VADUserStartedSpeakingFrame,
)
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.tests.utils import SleepFrame, run_test

from agent.conversation import Conversation
from agent.embedded import CONTINUATION_S, EmbeddedAgentProcessor
from agent.examples.order_api import make_app
from agent.spec import load_spec
from agent.tools import ToolBox
from pipeline.frames import (
    AgentEventFrame,
    Recognition,
    RecognitionFrame,
    RecognitionHintsFrame,
    TransferCallFrame,
)

EXAMPLES = Path(__file__).resolve().parents[2] / "agent" / "examples"


async def _run_test(*args, **kwargs):
    """pipecat's run_test, with the agent's recognition hints (upstream after every step,
    tested on their own below) taken out of the upstream frames."""
    expected_up = kwargs.pop("expected_up_frames", None)
    down, up = await run_test(*args, **kwargs)
    up = [f for f in up if not isinstance(f, RecognitionHintsFrame)]
    if expected_up is not None:
        assert [type(f) for f in up] == expected_up
    return down, up


def turn(text: str) -> LLMContextFrame:
    ctx = LLMContext()
    ctx.add_message({"role": "user", "content": text})
    return LLMContextFrame(context=ctx)


def texts(frames) -> list[str]:
    return [f.text for f in frames if isinstance(f, LLMTextFrame)]


def events(frames, kind: str) -> list[dict]:
    return [f.data for f in frames if isinstance(f, AgentEventFrame) and f.kind == kind]


def receptionist(**limits):
    spec = load_spec(EXAMPLES / "receptionist.yaml", env={})
    return dataclasses.replace(spec, limits=dataclasses.replace(spec.limits, **limits))


@pytest.fixture
async def order_api():
    runner = web.AppRunner(make_app({"12345": {"status": "has shipped",
                                               "detail": "It should arrive on Tuesday."}}))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    await runner.cleanup()


async def test_greets_and_answers_a_question():
    spec = receptionist()
    down, up = await _run_test(EmbeddedAgentProcessor(spec),
                              frames_to_send=[turn("what are your opening hours")])
    said = texts(down)
    assert said[0] == spec.greeting
    assert said[1].startswith("We are open Monday to Friday")
    assert up == []


async def test_takes_a_message_and_records_the_slots():
    spec = receptionist()
    down, _ = await run_test(EmbeddedAgentProcessor(spec, greet_on_start=False), frames_to_send=[
        turn("i want to leave a message"), turn("my name is ann lee"), turn("yes"),
        turn("five five five oh one two three"), turn("yes"), turn("please call me back"),
    ])
    assert events(down, "slot") == [{"name": "name", "value": "Ann Lee"},
                                    {"name": "phone", "value": "5550123"},
                                    {"name": "message", "value": "please call me back"}]
    assert texts(down)[-1].startswith("Thank you, Ann Lee.")


async def test_asking_for_a_person_says_so_then_transfers_upstream():
    spec = receptionist()
    down, up = await _run_test(EmbeddedAgentProcessor(spec, greet_on_start=False),
                              frames_to_send=[turn("can I talk to a real person")],
                              expected_up_frames=[TransferCallFrame])
    assert texts(down) == [spec.messages.transfer]
    assert (up[0].kind, up[0].target) == ("dial", "+15550100")
    assert events(down, "transfer")[0]["handoff"] == "front_desk"


async def test_goodbye_ends_the_call_after_the_farewell():
    spec = receptionist()
    down, up = await _run_test(EmbeddedAgentProcessor(spec, greet_on_start=False),
                              frames_to_send=[turn("okay goodbye")],
                              expected_up_frames=[EndWorkerFrame])
    assert texts(down) == [spec.messages.goodbye]
    assert events(down, "hangup") == [{"reason": "caller said goodbye"}]


async def test_dtmf_zero_transfers():
    down, up = await _run_test(
        EmbeddedAgentProcessor(receptionist(), greet_on_start=False),
        frames_to_send=[InputDTMFFrame(button=KeypadEntry.ZERO)],
        expected_up_frames=[TransferCallFrame])
    assert any(isinstance(f, InputDTMFFrame) for f in down)   # passed on, too


async def test_silence_prompts_then_hangs_up():
    spec = receptionist(silence_prompt_s=0.1, max_silence_prompts=1)
    down, up = await _run_test(EmbeddedAgentProcessor(spec, greet_on_start=False), frames_to_send=[
        BotStoppedSpeakingFrame(), SleepFrame(0.3),   # the agent finished; nobody talks
        BotStoppedSpeakingFrame(), SleepFrame(0.3),   # the prompt played; still nothing
    ], expected_up_frames=[EndWorkerFrame])
    assert texts(down) == [spec.messages.silence_prompt, spec.messages.goodbye]
    assert events(down, "hangup") == [{"reason": "caller silent"}]


async def test_the_caller_speaking_stops_the_silence_timer():
    spec = receptionist(silence_prompt_s=0.15)
    down, up = await _run_test(EmbeddedAgentProcessor(spec, greet_on_start=False), frames_to_send=[
        BotStoppedSpeakingFrame(), SleepFrame(0.05), UserStartedSpeakingFrame(), SleepFrame(0.3),
    ])
    assert texts(down) == []
    assert up == []


async def test_max_call_length_ends_the_call():
    spec = receptionist(max_call_s=0.1)
    down, up = await _run_test(EmbeddedAgentProcessor(spec, greet_on_start=False),
                              frames_to_send=[SleepFrame(0.3)],
                              expected_up_frames=[EndWorkerFrame])
    assert events(down, "hangup") == [{"reason": "max call length"}]


async def test_order_lookup_calls_the_webhook_without_blocking(order_api):
    spec = load_spec(EXAMPLES / "order_status.yaml", env={"ORDER_API_URL": order_api})
    agent = EmbeddedAgentProcessor(spec, ToolBox(spec), greet_on_start=False)
    down, up = await _run_test(agent, frames_to_send=[
        turn("where is my order"), turn("one two three four five"), turn("yes"),
        turn("how long does shipping take"),   # arrives while the lookup may be in flight
        SleepFrame(0.5),
    ])
    said = texts(down)
    assert said[:3] == [spec.slot("order_number").prompt,
                        "I have order number 1 2 3 4 5. Is that right?",
                        spec.messages.filler]
    assert said[3].startswith("Order 1 2 3 4 5 has shipped. It should arrive on Tuesday.")
    assert said[4].startswith("Standard shipping takes three to five business days.")
    [call] = events(down, "tool_call")
    assert call["name"] == "lookup_order"
    assert call["arguments"] == {"order_number": "12345"}
    assert call["result"]["status"] == "has shipped"
    assert call["duration_ms"] > 0


async def test_unreachable_webhook_is_spoken_as_a_fallback():
    spec = load_spec(EXAMPLES / "order_status.yaml", env={"ORDER_API_URL": "http://127.0.0.1:9"})
    tool = dataclasses.replace(spec.tools[0], timeout_s=0.2, retries=0)
    spec = dataclasses.replace(spec, tools=(tool, *spec.tools[1:]))
    down, up = await _run_test(EmbeddedAgentProcessor(spec, greet_on_start=False), frames_to_send=[
        turn("order one two three four five"), turn("yes"), SleepFrame(0.4),
    ])
    [call] = events(down, "tool_call")
    assert "cannot connect" in call["error"]
    assert texts(down)[-1] == f"{spec.messages.fallback} {spec.messages.offer_transfer}"


async def test_typing_digits_without_pound_gets_a_silence_prompt():
    spec = load_spec(EXAMPLES / "order_status.yaml", env={})
    spec = dataclasses.replace(spec, limits=dataclasses.replace(spec.limits, silence_prompt_s=0.1))
    down, _ = await run_test(EmbeddedAgentProcessor(spec, greet_on_start=False), frames_to_send=[
        turn("order status"), SleepFrame(0.05),   # DTMF frames are system frames: they jump queues
        InputDTMFFrame(button=KeypadEntry.ONE), InputDTMFFrame(button=KeypadEntry.TWO),
        SleepFrame(0.3),
    ])
    prompt = spec.slot("order_number").prompt
    assert texts(down) == [prompt, f"{spec.messages.silence_prompt} {prompt}"]


async def test_hints_follow_the_conversation_and_an_unsure_yes_is_asked_again():
    """The recogniser is told what to listen for (a name for the name, digits for the number,
    a yes/no for the read-back), and a yes heard with little confidence never confirms a slot: guards the call
    where a caller's "no" was heard as "yeah" and a wrong number was kept."""
    spec = receptionist()
    unsure = Recognition("yeah", 0.4, (("yeah", 0.4), ("no", 0.35), ("nope", 0.25)))
    down, up = await run_test(EmbeddedAgentProcessor(spec, greet_on_start=False), frames_to_send=[
        turn("i want to leave a message"), turn("my name is ann lee"), turn("yes"),
        turn("five five five oh one two three"),
        RecognitionFrame(unsure), turn("yeah"),
        RecognitionFrame(Recognition("no", 0.9, (("no", 0.9), ("yeah", 0.1)))), turn("no"),
    ])
    hints = [f.hints for f in up if isinstance(f, RecognitionHintsFrame)]
    kinds = [set(h.expect) for h in hints]
    assert kinds == [{"name"}, {"yes_no"}, {"digits"}, {"yes_no"}, {"digits"}]   # on change
    idle = Conversation(spec).expectation()                  # at the start: the agent's intents
    assert "what are your opening hours" in idle.phrases and "goodbye" in idle.phrases
    # a message starts with a name, not a number, and "my name is ..." starts it: the first
    # turn listens for a name (bench_conversations: "my name is david miller" said at once was
    # "emma miller" without)
    assert idle.expect == frozenset({"name"})
    # the order line greets with "What is your order number?" and takes a number at once: its
    # first turn listens for digits beside its intents (bench_conversations: "one two three four
    # five" heard as "line to return five" without)
    orders = Conversation(load_spec(EXAMPLES / "order_status.yaml", env={})).expectation()
    assert orders.expect == frozenset({"digits"}) and "how long does shipping take" in orders.phrases
    said = texts(down)
    assert said[-2] == ("Sorry, was that a yes or a no? I have your number as 5 5 5, 0 1 2 3. "
                        "Is that right? You can also press 1 for yes, or 2 for no.")
    assert "phone" not in [e["name"] for e in events(down, "slot")]
    assert said[-1].startswith("Sorry about that.")          # the sure "no": asked again


async def test_a_caller_who_went_on_before_hearing_the_reply_is_answered_once():
    """Guards the README's demo call: "hello, I would like to ..." was cut at the comma, "hello"
    heard as "joe le"; the caller went on talking over the reply, which barge-in stopped, and the
    agent answered the rest alone, then ran one turn behind. The agent now takes the cut turn
    back and hears both parts as one."""
    spec = receptionist()
    down, _ = await run_test(EmbeddedAgentProcessor(spec, greet_on_start=False), frames_to_send=[
        turn("joe le"), SleepFrame(0.05),     # system frames jump queues: let the turn go first
        VADUserStartedSpeakingFrame(), UserStartedSpeakingFrame(),
        turn("i would like to leave a message"),
    ])
    said = texts(down)
    assert said[0] == spec.messages.not_understood and said[1].endswith(spec.slot("name").prompt)
    assert len(said) == 2
    assert events(down, "continued") == [{"previous": "joe le",
                                          "text": "i would like to leave a message"}]


async def test_a_cut_turn_is_taken_back_with_its_counters():
    """Two garbled halves of one sentence are one miss, not two (two would offer a person)."""
    spec = receptionist()
    down, _ = await run_test(EmbeddedAgentProcessor(spec, greet_on_start=False), frames_to_send=[
        turn("joe le"), SleepFrame(0.05),
        BotStartedSpeakingFrame(), UserStartedSpeakingFrame(),      # within CONTINUATION_S
        turn("blah blah blah"),
    ])
    assert texts(down) == [spec.messages.not_understood] * 2
    assert events(down, "continued") == [{"previous": "joe le", "text": "blah blah blah"}]


@pytest.mark.parametrize("between", [
    [BotStartedSpeakingFrame(), SleepFrame(CONTINUATION_S + 0.1)],   # heard half a second of it
    [BotStartedSpeakingFrame(), BotStoppedSpeakingFrame()],          # it played out
])
async def test_a_reply_the_caller_heard_is_not_taken_back(between):
    spec = receptionist()
    down, _ = await run_test(EmbeddedAgentProcessor(spec, greet_on_start=False), frames_to_send=[
        turn("blah blah"), SleepFrame(0.05), *between, UserStartedSpeakingFrame(),
        turn("blah blah blah"),
    ])
    assert events(down, "continued") == []
    assert texts(down)[-1] == f"{spec.messages.not_understood} {spec.messages.offer_transfer}"


async def test_a_turn_that_filled_a_slot_stands():
    """A confirmed slot is kept although the caller talked over the next question."""
    spec = receptionist()
    down, _ = await run_test(EmbeddedAgentProcessor(spec, greet_on_start=False), frames_to_send=[
        turn("i want to leave a message"), turn("my name is ann lee"), turn("yes"),
        SleepFrame(0.05), UserStartedSpeakingFrame(), turn("five five five oh one two three"),
    ])
    assert events(down, "continued") == []
    assert events(down, "slot") == [{"name": "name", "value": "Ann Lee"}]
    assert texts(down)[-1].startswith("I have your number as 5 5 5, 0 1 2 3.")
