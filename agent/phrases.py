"""The words the embedded agent listens for in any state: repeat, a person, goodbye, thanks; the
question words and the words too generic to explain a question; its own key phrases (the
recogniser's hints when nothing else is expected).
"""

from __future__ import annotations

from agent.retrieval import find_phrase, phrase_end, similar

__all__ = ["FRAME", "GENERIC", "GOODBYE", "HUMAN_STRONG", "HUMAN_WEAK", "KEY_PHRASES", "QUESTION_WORDS",
           "REPEAT", "REQUESTS", "TALK", "THANKS", "has_any", "request_end", "says_goodbye",
           "wants_human"]

REPEAT = ("repeat", "say that again", "say again", "come again", "pardon", "what did you say",
          "one more time", "didn't hear", "did not hear", "didn't catch", "say it again")
HUMAN_STRONG = ("person", "human", "agent", "operator", "representative", "transfer")
# with a word of TALK: "can I speak to the dentist" asks for a person (it had matched the
# emergency answer by meaning)
HUMAN_WEAK = ("someone", "somebody", "receptionist", "staff", "anyone", "real", "dentist",
              "doctor", "nurse", "hygienist", "manager")
TALK = ("talk", "speak", "put me through", "connect me", "get me")
GOODBYE = ("goodbye", "good bye", "bye", "bye bye", "hang up", "that's all", "that is all",
           "that's everything", "nothing else", "i'm done", "we're done")
THANKS = {"thanks", "thank", "you", "very", "much", "great", "that's", "it", "ok", "okay",
          "cheers", "perfect", "lovely", "good"}
QUESTION_WORDS = {"can", "could", "do", "does", "did", "is", "are", "will", "would", "what",
                  "where", "when", "how", "why", "which", "who", "may", "should", "what's",
                  "where's", "who's", "how's", "when's"}
GENERIC = {"bring", "come", "go", "get", "make", "please", "someone", "somebody", "doctor",
           "dentist", "team", "back", "them", "him", "her", "one", "today", "tomorrow"}
# Words that frame a question without naming its subject: a question's other words must all be
# explained by the knowledge entry that answers it (agent/knowledge.py). General English, not any
# one agent's: degree and manner ("really", "exactly"), time deixis ("today", "now"), verbs of
# asking and wanting ("wondering", "tell"), particles ("up", "back"), judgements ("bad", "ok"),
# and the words a caller names the business by ("office", "practice", "clinic").
FRAME = frozenset("""
really very exactly just also still even actually usually normally typically currently right now
ever already quite pretty too there here somewhere anywhere anyone anything something somebody
someone today tomorrow tonight soon wondering wonder ask asking tell let show give help happen
mean find look looking become sign up back out about around over bring come go get make please
bad terrible awful good great fine ok okay nice possible able allowed accept accepting except
lot bit little office practice clinic place business time until many don't taking work talk
call leave typical typically usual usually normal normally stuff thing things item items
buy bought purchased last week ago yesterday
""".split())
# a caller saying what they want: a request, whatever word came first ("who low [hello], I would
# like to leave a message" is not a question). "i was like" is how the SSM recogniser hears "I
# would like" in flite's voices (bench_conversations: "i was like to leah at in", "i was like
# too leave a s in", the README's demo "i was like to check my order").
REQUESTS = ("i would like", "i'd like", "i want", "i need", "i wanna", "i'd love", "i was like")
KEY_PHRASES = ("goodbye", "thank you goodbye", "that's all thank you", "talk to a person",
               "can you repeat that", "no thank you")


def has_any(ws: list[str], phrases: tuple[str, ...]) -> bool:
    return any(find_phrase(ws, p) for p in phrases)


def request_end(ws: list[str]) -> int | None:
    """Where the request form ends in ``ws`` (the index of the first word of what is asked for):
    one of ``REQUESTS``, or "i <word> like to", "I would like to" with its second word misheard
    ("the i toward like to check my order"); None when there is none."""
    for phrase in REQUESTS:
        end = phrase_end(ws, phrase)
        if end is not None:
            return end
    return next((k + 4 for k in range(len(ws) - 3)
                 if ws[k] == "i" and ws[k + 2:k + 4] == ["like", "to"]), None)


def wants_human(ws: list[str]) -> bool:
    strong = any(similar(w, p) for w in ws for p in HUMAN_STRONG)
    weak = any(w in HUMAN_WEAK for w in ws) and has_any(ws, TALK)
    return strong or weak


def says_goodbye(ws: list[str]) -> bool:
    # a short turn ending in "by" is a goodbye the recogniser split ("the by", "good by")
    misheard = len(ws) <= 3 and ws[-1:] in (["by"], ["buy"])
    return "bye" in ws or "goodbye" in ws or misheard or has_any(ws, GOODBYE)
