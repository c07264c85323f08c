"""The embedded agent's state machine on scripted transcripts of both example agents."""

from pathlib import Path

import pytest

from agent.conversation import CallTool, Conversation, EndCall, Say, SlotFilled, State, Transfer
from agent.slots import digits_in
from agent.spec import load_spec, parse_spec
from pipeline.turn_end import looks_unfinished, one_word_answers

EXAMPLES = Path(__file__).resolve().parents[2] / "agent" / "examples"


@pytest.fixture(scope="module")
def receptionist():
    return load_spec(EXAMPLES / "receptionist.yaml", env={})


@pytest.fixture(scope="module")
def orders():
    return load_spec(EXAMPLES / "order_status.yaml", env={})


def said(actions) -> str:
    return " ".join(a.text for a in actions if isinstance(a, Say))


def test_greets_first(receptionist):
    assert Conversation(receptionist).start() == [Say(receptionist.greeting)]


@pytest.mark.parametrize("question, expected", [
    ("what are your opening hours", "Monday to Friday"),
    ("are you open on saturday", "Saturday from nine"),
    ("where are you located", "42 River Street"),
    ("is there parking", "free parking"),
    ("what insurance do you take", "Delta Dental"),
    ("how much does a cleaning cost", "ninety five dollars"),
    ("i have a really bad toothache", "emergency line"),
    # pocketsphinx-style garbling: "barking" for "parking", "except" for "accept"
    ("is there barking", "free parking"),
    ("what insurance do you except", "Delta Dental"),
])
def test_faq_answered_from_knowledge(receptionist, question, expected):
    conv = Conversation(receptionist)
    actions = conv.hear(question)
    assert expected in said(actions)
    assert said(actions).endswith(receptionist.messages.anything_else)
    assert conv.state is State.IDLE


@pytest.mark.parametrize("heard", ["do you take new paid and", "what a clear return doggy"])
def test_words_no_entry_explains_are_not_answered_at_a_guess(receptionist, orders, heard):
    """Guards the wrong facts of answers picked by a near sentence: every content word of a
    question must be the entry's ("paid", "doggy" are no entry's), so a misheard question gets
    an honest answer, as "how much is a filling" does (it had the cleaning price)."""
    spec = orders if "return" in heard else receptionist
    reply = said(Conversation(spec).hear(heard))
    assert not any(k.answer in reply for k in spec.knowledge), reply


@pytest.mark.parametrize("off_topic", ["blah blah", "the the"])
def test_off_topic_is_not_understood(receptionist, off_topic):
    assert Conversation(receptionist).hear(off_topic) == [Say(receptionist.messages.not_understood)]


@pytest.mark.parametrize("question", [
    "what's the weather like today", "who won the game last night", "can you sing me a song",
    "can I bring my dog to the appointment",
])
def test_a_question_it_cannot_answer_gets_an_honest_answer_and_a_message_offer(receptionist,
                                                                               question):
    """Guards the call where "can I bring my dog to the appointment" started a message (its
    word "appointment" is a trigger) instead of saying the agent does not know."""
    conv = Conversation(receptionist)
    m = receptionist.messages
    assert said(conv.hear(question)) == f"{m.cannot_answer} {m.offer_message}"
    # the offer is a yes/no question, and a caller may answer it with the task's first answer
    assert conv.expectation().expect == {"yes_no", "name"}
    actions = conv.hear("yes")                       # yes: the message task starts
    assert said(actions) == "Sure, I can take a message. May I have your name, please?"
    assert conv.state is State.COLLECTING
    assert conv.expectation().expect == {"name"}


def test_a_name_given_to_the_message_offer_starts_the_message(receptionist):
    """Guards the call where the offer's answer "my name is sarah jones" was heard with no name
    hint (the offer listened for the agent's phrases only) and written "sara jones"."""
    conv = Conversation(receptionist)
    conv.hear("what's the weather like today")
    assert "name" in conv.expectation().expect
    assert said(conv.hear("my name is sarah jones")) == "I have your name as Sarah Jones. Is that right?"
    assert conv.expectation().expect == {"yes_no"}


def test_two_misses_offer_a_person_and_yes_transfers(receptionist):
    conv = Conversation(receptionist)
    conv.hear("blah blah")
    actions = conv.hear("purple monkey dishwasher")
    assert said(actions).endswith(receptionist.messages.offer_transfer)
    assert conv.state is State.OFFERED_TRANSFER
    actions = conv.hear("yes please")
    assert actions == [Say(receptionist.messages.transfer),
                       Transfer(receptionist.handoffs[0], "caller accepted a transfer")]


def test_message_taken_with_confirmations_and_a_no_correction(receptionist):
    conv = Conversation(receptionist)
    script = [
        ("hi i'd like to leave a message for the dentist",
         "Sure, I can take a message. May I have your name, please?"),
        ("my name is john smith", "I have your name as John Smith. Is that right?"),
        ("no", "Sorry about that. Could you spell your name for me, letter by letter?"),
        ("it's jon smyth", "I have your name as Jon Smyth. Is that right?"),
        ("yes that's right",
         "What is the best phone number to reach you? Please say it digit by digit."),
        ("five five five oh one two three", "I have your number as 5 5 5, 0 1 2 3. Is that right?"),
        ("no it's five five five oh one two four",
         "I have your number as 5 5 5, 0 1 2 4. Is that right?"),
        ("yeah", "And what would you like me to pass on?"),
        ("please tell the doctor my crown came loose and i need an appointment this week",
         "Thank you, Jon Smyth. I have passed on your message, and someone will call you back "
         "at 5 5 5, 0 1 2 4. " + receptionist.messages.anything_else),
    ]
    filled = []
    for heard, reply in script:
        actions = conv.hear(heard)
        filled += [a for a in actions if isinstance(a, SlotFilled)]
        assert said(actions) == reply, heard
    assert filled == [SlotFilled("name", "Jon Smyth"), SlotFilled("phone", "5550124"),
                      SlotFilled("message", "my crown came loose and i need an appointment "
                                            "this week")]
    assert conv.values == {"name": "Jon Smyth", "phone": "5550124",
                           "message": "my crown came loose and i need an appointment this week"}
    assert conv.hear("no thanks") == [Say(receptionist.messages.goodbye), EndCall("caller is done")]
    assert conv.state is State.ENDED
    assert conv.hear("hello?") == []


def test_introducing_oneself_starts_the_message_with_the_name(receptionist):
    conv = Conversation(receptionist)
    actions = conv.hear("hi my name is don grid")
    assert said(actions) == "I have your name as Don Grid. Is that right?"
    assert conv.state is State.CONFIRMING


@pytest.mark.parametrize("heard", [
    "i would like to leave the magnet high",      # as pocketsphinx heard it
    "who low i would like to leah message",       # "hello, ...": a request, not a question
])
def test_garbled_request_for_a_message(receptionist, heard):
    conv = Conversation(receptionist)   # "(hello,) I would like to leave a message"
    assert said(conv.hear(heard)) == "Sure, I can take a message. May I have your name, please?"


def test_phone_with_too_few_digits_is_asked_again(receptionist):
    conv = Conversation(receptionist)
    conv.hear("can you take a message")
    conv.hear("mary")
    conv.hear("yes")
    assert conv.state is State.COLLECTING
    actions = conv.hear("five five five")
    assert said(actions).startswith("Sorry, I didn't get the whole number.")
    assert conv.state is State.COLLECTING
    actions = conv.hear("it is 5 5 5 0 1 9 9")
    assert said(actions) == "I have your number as 5 5 5, 0 1 9 9. Is that right?"


def test_a_number_asked_again_offers_the_keypad_and_takes_the_keys(receptionist):
    """A voice the recogniser hears badly says the same digits the same way again: asked again,
    the caller is offered the keypad; the number typed then # is read back like a said one."""
    conv = Conversation(receptionist)
    conv.hear("can you take a message")
    conv.hear("mary")
    conv.hear("yes")
    prompt = conv.spec.slot("phone").prompt
    assert said(conv.hear("five five five three nine")) == (
        f"Sorry, I didn't get the whole number. {prompt} "
        "You can also type it on your keypad, then press pound.")
    for key in "5553091215":
        assert conv.dtmf(key) == []
    assert said(conv.dtmf("#")) == "I have your number as 5 5 5, 3 0 9, 1 2 1 5. Is that right?"
    # a read-back the caller says no to: asked again, the keypad offered again
    assert said(conv.hear("no")) == (f"Sorry about that. {prompt} "
                                     "You can also type it on your keypad, then press pound.")
    # a name asked again offers no keypad
    conv = Conversation(receptionist)
    conv.hear("can you take a message")
    conv.hear("mary")
    assert "keypad" not in said(conv.hear("no"))


def test_a_name_asked_again_is_asked_spelled_and_the_letters_make_the_name(receptionist):
    """A name read back wrong is heard the same wrong way when said again (mbrola's "david
    miller" heard "emma miller" three times): the caller is asked to spell it, the recogniser
    listens for letters, and the letters are joined into the name (split into a first and a
    last name where the recogniser's names table reads them so)."""
    conv = Conversation(receptionist)
    conv.hear("can you take a message")
    assert said(conv.hear("my name is emma miller")) == (
        "I have your name as Emma Miller. Is that right?")
    assert said(conv.hear("no")) == (
        "Sorry about that. Could you spell your name for me, letter by letter?")
    assert conv.expectation().expect == {"spelling", "name"}
    assert said(conv.hear("d a v i d m i double l e r")) == (
        "I have your name as David Miller. Is that right?")
    assert conv.expectation().expect == {"yes_no"}
    actions = conv.hear("yes")
    assert SlotFilled("name", "David Miller") in actions
    assert "spell" not in said(actions)
    assert conv.expectation().expect == {"digits"}       # the next slot: no letters
    # a name not heard at all is asked spelled at once; the caller may say it whole instead
    conv = Conversation(receptionist)
    conv.hear("can you take a message")
    assert said(conv.hear("um")) == (
        "Sorry, I didn't get that. Could you spell your name for me, letter by letter?")
    assert said(conv.hear("it's sarah jones")) == (
        "I have your name as Sarah Jones. Is that right?")
    # a correction spelled while confirming
    conv = Conversation(receptionist)
    conv.hear("can you take a message")
    conv.hear("my name is emma miller")
    assert said(conv.hear("no it's d a v i d")) == "I have your name as David. Is that right?"


def test_a_phone_number_asked_tells_the_recogniser_how_many_digits_it_needs(receptionist, orders):
    """The end of turn holds a caller who stopped short of a phone number's usual ten digits
    (at a comma of "five five five, three oh nine, ..."); an order number has no usual length."""
    conv = Conversation(receptionist)
    assert conv.expectation().min_digits == 0
    conv.hear("can you take a message")
    conv.hear("mary")
    conv.hear("yes")
    hints = conv.expectation()
    assert hints.expect == {"digits"} and hints.min_digits == 10
    conv.hear("five five five oh one two three")
    assert conv.expectation().min_digits == 0                # "Is that right?": a yes or a no
    conv = Conversation(orders)
    conv.start()
    conv.hear("i want to check on my order")
    hints = conv.expectation()
    assert hints.expect == {"digits"} and hints.min_digits == 0


def test_the_agents_hints_tell_a_lone_misheard_word_from_an_answer(receptionist):
    """The end of turn holds a one-word turn that answers nothing the agent asked ("hello,"
    heard "holt" after "Sorry, I didn't catch that"), and lets a name, a yes or a goodbye end
    at once where the agent asked for one."""
    conv = Conversation(receptionist)
    conv.start()
    conv.hear("i was like believe a s a")                     # not understood: asked again

    def held(word: str) -> bool:
        return looks_unfinished(word, answers=one_word_answers(conv.expectation()))

    assert held("holt") and not held("goodbye")
    conv.hear("can you take a message")                        # "May I have your name?"
    assert not held("mary") and not held("holt")              # a name asked: any word
    conv.hear("mary")                                          # "I have your name as Mary..."
    assert not held("yes") and not held("no") and held("holt")


def test_unclear_confirmation_asks_yes_or_no(receptionist):
    conv = Conversation(receptionist)
    conv.hear("leave a message")
    actions = conv.hear("ann")
    assert conv.state is State.CONFIRMING
    actions = conv.hear("hmm")
    assert said(actions) == (f"{receptionist.messages.yes_or_no} "
                             "I have your name as Ann. Is that right? "
                             "You can also press 1 for yes, or 2 for no.")


@pytest.mark.parametrize("request_text", [
    "can i talk to a person", "agent", "i want a human", "operator please",
    "let me speak to someone", "representative", "i would like to speak to the dentist",
])
def test_asking_for_a_person_transfers_with_the_first_handoff(receptionist, request_text):
    conv = Conversation(receptionist)
    actions = conv.hear(request_text)
    assert actions == [Say(receptionist.messages.transfer),
                       Transfer(receptionist.handoffs[0], "caller asked for a person")]
    assert conv.state is State.ENDED


def test_someone_calling_back_is_a_message_not_a_transfer(receptionist):
    conv = Conversation(receptionist)
    actions = conv.hear("could someone call me back")
    assert not any(isinstance(a, Transfer) for a in actions)
    assert conv.state is State.COLLECTING


def test_after_anything_else(receptionist):
    conv = Conversation(receptionist)
    conv.hear("where are you")
    assert "free parking" in said(conv.hear("no, but is there parking"))   # a no, then a question
    assert said(conv.hear("yes")) == "Sure. What can I help you with?"
    conv.hear("where are you")
    assert conv.hear("great thank you") == [Say(receptionist.messages.goodbye),
                                            EndCall("caller is done")]


def test_goodbye_ends_in_any_state(receptionist):
    conv = Conversation(receptionist)
    conv.hear("leave a message")
    assert conv.hear("actually never mind goodbye") == [
        Say(receptionist.messages.goodbye), EndCall("caller said goodbye")]


def test_repeat_that_says_the_last_thing_again(receptionist):
    conv = Conversation(receptionist)
    first = conv.hear("where are you")
    assert conv.hear("sorry can you repeat that") == first
    conv.hear("leave a message")
    assert said(conv.hear("say that again")) == (
        "Sure, I can take a message. May I have your name, please?")
    assert conv.state is State.COLLECTING


def test_silence_prompts_then_goodbye(receptionist):
    conv = Conversation(receptionist)
    conv.start()
    assert conv.silence() == [Say(receptionist.messages.silence_prompt)]
    assert conv.silence() == [Say(receptionist.messages.silence_prompt)]
    assert conv.silence() == [Say(receptionist.messages.goodbye), EndCall("caller silent")]
    assert conv.silence() == []


def test_speech_resets_the_silence_count_and_prompts_repeat_the_question(receptionist):
    conv = Conversation(receptionist)
    conv.silence()
    conv.silence()
    conv.hear("leave a message")
    assert said(conv.silence()) == (
        f"{receptionist.messages.silence_prompt} May I have your name, please?")


def test_dtmf_menu(receptionist):
    conv = Conversation(receptionist)
    assert "Saturday from nine to one" in said(conv.dtmf("1"))
    assert conv.dtmf("5") == [Say(receptionist.messages.not_understood)]
    assert conv.dtmf("0") == [Say(receptionist.messages.transfer),
                              Transfer(receptionist.handoffs[0], "caller pressed 0")]


def test_max_call_length_ends_politely(receptionist):
    conv = Conversation(receptionist)
    assert conv.timeout() == [Say(receptionist.messages.goodbye), EndCall("max call length")]


def test_empty_transcript_asks_to_repeat(receptionist):
    assert Conversation(receptionist).hear("  ") == [Say(receptionist.messages.repeat_prompt)]


# --- the order-status line -----------------------------------------------------------------


def test_order_lookup_with_garbled_trigger(orders):
    conv = Conversation(orders)
    conv.start()
    # "order" heard as "harder" (pocketsphinx at 8 kHz)
    actions = conv.hear("i want to check on my harder")
    assert said(actions) == orders.slot("order_number").prompt
    actions = conv.hear("one two three four five")
    assert said(actions) == "I have order number 1 2 3 4 5. Is that right?"
    actions = conv.hear("yes")
    assert actions == [SlotFilled("order_number", "12345"), Say(orders.messages.filler),
                       CallTool("lookup_order", {"order_number": "12345"})]
    assert conv.state is State.WAITING_TOOL
    actions = conv.tool_result("lookup_order", {
        "found": True, "order_number": "12345", "status": "has shipped",
        "detail": "It should arrive on Tuesday."})
    assert said(actions) == ("Order 1 2 3 4 5 has shipped. It should arrive on Tuesday. "
                             + orders.messages.anything_else)
    assert conv.state is State.IDLE


@pytest.mark.parametrize("heard, starts_task", [
    ("how long does shipping take", False),
    ("how many business days does shipping take", False),
    ("has my order shipped", True),            # "order" is no shipping keyword
    ("i want to track my package it shipped", True),
])
def test_a_trigger_that_is_the_questions_own_keyword_asks_the_question(orders, heard,
                                                                       starts_task):
    """Guards the call where "shipping" (the order task's "shipped") started an order lookup."""
    conv = Conversation(orders)
    conv.start()
    reply = said(conv.hear(heard))
    assert (reply == orders.slot("order_number").prompt) is starts_task, reply
    assert reply.startswith("Standard shipping takes") is not starts_task, reply


def test_order_number_said_straight_after_the_greeting(orders):
    conv = Conversation(orders)
    conv.start()
    actions = conv.hear("it's two four six eight oh")
    assert said(actions) == "I have order number 2 4 6 8 0. Is that right?"


def test_order_number_typed_on_the_keypad(orders):
    conv = Conversation(orders)
    conv.hear("order status please")
    for key in "2468":
        assert conv.dtmf(key) == []
    actions = conv.dtmf("#")
    assert said(actions) == "I have order number 2 4 6 8. Is that right?"
    actions = conv.dtmf("1")  # 1 = yes while confirming
    assert CallTool("lookup_order", {"order_number": "2468"}) in actions


def test_tool_failure_offers_a_person(orders):
    conv = Conversation(orders)
    conv.hear("where is my package, the number is 1 2 3 4 5")
    conv.hear("yes")
    actions = conv.tool_failed("lookup_order", "tool lookup_order: HTTP 500")
    assert said(actions) == f"{orders.messages.fallback} {orders.messages.offer_transfer}"
    assert conv.hear("no") == [Say(orders.messages.anything_else)]
    assert conv.state is State.IDLE


def test_faq_still_answered_on_the_order_line(orders):
    conv = Conversation(orders)
    assert "thirty days" in said(conv.hear("what is your return policy"))
    assert "three to five business days" in said(conv.hear("how long does shipping take"))


def test_dtmf_end_call_option(orders):
    assert Conversation(orders).dtmf("9") == [Say(orders.messages.goodbye),
                                              EndCall("caller pressed 9")]


def test_no_handoff_configured_says_so():
    spec = parse_spec("name: x\ngreeting: Hi.\n")
    conv = Conversation(spec)
    actions = conv.hear("talk to a human")
    assert said(actions).startswith(spec.messages.no_handoff)
    assert not any(isinstance(a, Transfer) for a in actions)
    assert conv.state is State.IDLE


def test_template_missing_a_field_falls_back_to_a_description(orders):
    conv = Conversation(orders)
    conv.hear("order 12345")
    conv.hear("yes")
    actions = conv.tool_result("lookup_order", {"eta": "Tuesday"})
    assert said(actions).startswith("Here is what I found: eta Tuesday.")


@pytest.mark.parametrize("question, expected", [
    ("do you take cigna", "Delta Dental, Cigna and Aetna"),
    ("when are you open", "Monday to Friday"),
    ("what time do you close on saturday", "Monday to Friday"),
    ("where can i park my car", "free parking"),
    ("i have a terrible toothache", "dental emergency"),
    ("are you taking new patients", "welcoming new patients"),
    ("what is the address", "42 River Street"),
    ("how much is a filling", None), ("do you do teeth whitening", None),
    ("do you have wifi", None), ("what is your phone number", None),
])
def test_questions_are_matched_by_meaning_and_the_rest_is_not_guessed(receptionist, encoder,
                                                                       question, expected):
    """Guards the embedded agent's wrong facts on perfect text: "do you take cigna" got the
    new-patients answer and "how much is a filling" the cleaning price."""
    reply = said(Conversation(receptionist, encoder).hear(question))
    if expected is None:
        m = receptionist.messages
        assert reply == f"{m.cannot_answer} {m.offer_message}", reply
    else:
        assert expected in reply, reply


@pytest.mark.parametrize("heard", ["the by", "good by", "thank you by", "okay buy"])
def test_a_goodbye_the_recogniser_split_still_ends_the_call(receptionist, heard):
    """Guards the calls where "goodbye" was heard as "the by" (3 of 5) and the call went on."""
    conv = Conversation(receptionist)
    actions = conv.hear(heard)
    assert isinstance(actions[-1], EndCall) and conv.state is State.ENDED


def test_by_inside_a_sentence_is_no_goodbye(receptionist):
    conv = Conversation(receptionist)
    conv.hear("can i stop by on saturday to pay my bill")
    assert conv.state is not State.ENDED


def test_rollback_restores_every_part_of_the_dialogue(receptionist):
    """Each step of a message call is taken back whole: every attribute an input changes is in
    the checkpoint (a field added to Conversation and forgotten there fails here)."""
    conv = Conversation(receptionist)
    conv.start()
    steps = ["blah blah", "i want to leave a message", "my name is ann lee", "yes",
             "five five five oh one two three", "no", "five five five oh one two four", "yes"]
    for text in steps:
        before = {k: (dict(v) if isinstance(v, dict) else v) for k, v in vars(conv).items()}
        cp = conv.checkpoint()
        first = conv.hear(text)
        assert vars(conv) != before or text == "blah blah"
        conv.rollback(cp)
        assert vars(conv) == before
        assert conv.hear(text) == first          # and the turn, heard again, goes the same way


@pytest.mark.parametrize("heard", [
    "hello i would like to check my order",        # the README's demo, heard right
    "joe le i was like to check my order",         # as the SSM recogniser hears it in flite slt
    "the i toward like to check my order",         # and in another call
    "i would like to order a pizza",
])
def test_a_request_nothing_covers_gets_an_honest_answer_and_a_message_offer(receptionist, encoder,
                                                                            heard):
    """Guards the README's demo call: a clear request the dental receptionist has no task or
    answer for got "Sorry, I didn't catch that", as if it had not been heard."""
    conv = Conversation(receptionist, encoder)
    m = receptionist.messages
    assert said(conv.hear(heard)) == f"{m.cannot_do} {m.offer_message}"
    assert said(conv.hear("no")) == m.anything_else


@pytest.mark.parametrize("heard", ["i would like to", "i want to pay"])
def test_a_request_in_words_the_agent_knows_is_not_called_impossible(receptionist, encoder,
                                                                      heard):
    """"pay" is the keyword of parking and of insurance: a request the agent did not place is
    not understood, not one it cannot help with (nor answered from either at a guess)."""
    reply = said(Conversation(receptionist, encoder).hear(heard))
    assert reply == receptionist.messages.not_understood


def test_a_request_in_one_entrys_words_is_answered(receptionist, encoder):
    """"i need directions": every word the address's (its keyword), so it is answered."""
    assert "42 River Street" in said(Conversation(receptionist, encoder).hear("i need directions"))


def _heard(text: str, *spotted: tuple[str, float], confidence: float = 0.5):
    from ssm_engine.stt.hints import Recognition

    return Recognition(text, confidence, ((text, confidence),), spotted=tuple(spotted))


def test_the_recogniser_is_asked_to_spot_the_agents_keywords(receptionist):
    conv = Conversation(receptionist)
    conv.start()
    keywords = conv.expectation().keywords
    assert {"parking", "insurance", "cigna", "take a message"} <= set(keywords)
    conv.hear("i want to leave a message")                  # asking for a name: no keywords
    assert conv.expectation().keywords == ()


@pytest.mark.parametrize("heard, spotted, expected", [
    # as the SSM recogniser heard these callers in bench_conversations, and what it spotted
    ("do day city answer", [("insurance", -0.6), ("cigna", -0.9)], "I think you asked about insurance"),
    ("in occur in", [("parking", -0.9)], "I think you asked about parking"),
    ("ricky simmons", [("message", -0.5)], "Sure, I can take a message"),
    # a yes word in a turn that answers no yes/no question is no answer
    ("you you take again sure and", [("insurance", -0.02)], "I think you asked about insurance"),
    # a person spotted is offered, not put through at a guess
    ("can acosta recently", [("person", -0.4)], "Would you like me to put you through to a person?"),
])
def test_a_spotted_keyword_answers_a_turn_whose_words_said_nothing(receptionist, heard, spotted,
                                                                   expected):
    """Guards the insurance calls that came out "do day city answer" and got "I don't have the
    answer to that" while the phone head had heard "insurance"."""
    conv = Conversation(receptionist)
    conv.start()
    reply = said(conv.hear(heard, _heard(heard, *spotted)))
    assert reply.startswith(expected), reply


@pytest.mark.parametrize("spotted", [
    [("parking", -1.2)],                                    # under SPOTTED_MIN_SCORE
    [("parking", -0.9), ("address", -1.0)],                 # two questions heard about alike
    [("parking", -0.9), ("park", -0.2), ("located", -0.3)],  # the same: the best of each counts
    [],
])
def test_a_weak_or_split_spotting_is_not_acted_on(receptionist, spotted):
    conv = Conversation(receptionist)
    conv.start()
    reply = said(conv.hear("in occur in", _heard("in occur in", *spotted)))
    assert reply == receptionist.messages.not_understood


def test_what_the_words_say_comes_before_what_was_spotted(receptionist):
    conv = Conversation(receptionist)
    conv.start()
    reply = said(conv.hear("what are your opening hours",
                           _heard("what are your opening hours", ("insurance", -0.1))))
    assert "Monday to Friday" in reply and "I think" not in reply
    # a sure "no" to "anything else?" ends the call whatever was spotted; an unsure one is
    # asked again, not taken for the spotted question
    cp = conv.checkpoint()
    actions = conv.hear("no thank you", _heard("no thank you", ("parking", -0.1), confidence=0.9))
    assert isinstance(actions[-1], EndCall)
    conv.rollback(cp)
    reply = said(conv.hear("no thank you", _heard("no thank you", ("parking", -0.1))))
    assert reply == receptionist.messages.not_understood


@pytest.mark.parametrize("request_, first_reply", [
    ("I would like to leave a message. my name is Maria Lopez and my number is 415 555 0199",
     "I have your name as Maria Lopez. Is that right?"),
    ("can someone call me back at 415 555 0123",
     "Sure, I can take a message. May I have your name, please?"),
])
def test_a_request_that_carries_its_slots_is_not_asked_for_them_again(receptionist, request_,
                                                                        first_reply):
    """Guards the call where "I would like to leave a message. my name is Maria Lopez and my
    number is 415 555 0199" was answered "May I have your name, please?": what the caller says
    up front is taken, read back as usual, and only the missing slots are asked."""
    conv = Conversation(receptionist)
    assert said(conv.hear(request_)) == first_reply
    prompts = []
    answers = {"name": "Jane Doe", "message": "please call me about my crown"}
    for _ in range(8):
        if conv.state is State.CONFIRMING:
            conv.hear("yes")
        elif conv.state is State.COLLECTING:
            prompts.append(conv.slot)
            conv.hear(answers[conv.slot])      # the phone is never asked (a KeyError)
        else:
            break
    assert conv.values["phone"] == digits_in(request_)
    assert prompts[-1] == "message" and conv.state is State.IDLE
    assert ("name" in prompts) is ("Maria" not in request_)


def test_a_name_and_number_given_to_the_name_question_are_both_taken(receptionist):
    conv = Conversation(receptionist)
    conv.hear("I would like to leave a message")
    assert said(conv.hear("Maria Lopez, and my number is 415 555 0199")) == (
        "I have your name as Maria Lopez. Is that right?")
    assert said(conv.hear("yes")) == "I have your number as 4 1 5, 5 5 5, 0 1 9 9. Is that right?"
    assert said(conv.hear("yes")) == receptionist.slot("message").prompt


def test_this_is_urgent_is_no_name(receptionist):
    assert said(Conversation(receptionist).hear("this is urgent, I need to leave a message")) == (
        "Sure, I can take a message. May I have your name, please?")


def test_a_warm_transfer_summary_names_the_request_and_the_slots_but_no_sensitive_one():
    spec = parse_spec("""\
name: Acme desk
greeting: Hello.
slots:
  - name: name
    prompt: Your name?
    kind: name
  - name: card
    prompt: Your card number?
    kind: number
    sensitive: true
""", env={})
    conv = Conversation(spec)
    conv.hear("I have a question about my invoice.")
    conv.values.update(name="Ada Lovelace", card="4111111111111111")
    summary = conv.transfer_summary()
    assert summary == ("Hello, this is Acme desk. I have a caller on the line. They said: I have a question "
                       "about my invoice. Their name: Ada Lovelace. Connecting you now.")
    assert "4111" not in summary


def test_nobody_answering_a_warm_transfer_offers_a_message_and_yes_takes_it(receptionist):
    conv = Conversation(receptionist)
    conv.hear("can i talk to a person")
    assert conv.state is State.ENDED
    back = conv.transfer_outcome("no-answer")
    assert said(back) == f"{receptionist.messages.no_handoff} {receptionist.messages.offer_message}"
    assert conv.state is State.IDLE
    assert said(conv.hear("yes please")).endswith(receptionist.slot("name").prompt)
    assert conv.state is State.COLLECTING


def test_a_joined_warm_transfer_ends_the_agents_part(receptionist):
    conv = Conversation(receptionist)
    conv.hear("can i talk to a person")
    assert conv.transfer_outcome("joined") == [] and conv.state is State.ENDED
    assert conv.hear("hello?") == []
