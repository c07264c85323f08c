"""Do whole calls succeed? Scripted callers with goals, in voices the recogniser never trained on.

    .venv/bin/python benchmarks/bench_conversations.py [--voices flite:slt espeak:en-us+f3]
        [--repeat 2] [--stt ssm whisper] [--quick] [--goals message order] [--keep-logs]
        [--apart] [--caller scripted|listening]

Each call has a goal a real caller would have: ask the opening hours, the address, parking or
insurance, leave a message with a name and a 10-digit number (read back and confirmed, or
corrected after a "no"), ask for a person, say goodbye, and, on the order-status line, check an
order by its number or ask how long shipping takes. The caller speaks each step with a held-out
voice (flite's slt as the scripted caller speaks it, espeak-ng's en-us+f3 and mbrola us1, when
installed, as WAV files), over Twilio's protocol to a real ``parley serve`` on loopback, waiting
for each answer. Every call is placed twice in the same run: to a server on parley's streaming
SSM recogniser and to one on Whisper tiny.en (``--stt whisper``), the upper bound: at the same
moment, or with ``--apart`` one after the other, so that neither server's latency counts the
other's work (on a 2-core machine a Whisper decode holds a core just when the SSM server answers).

Scored from the server's call record (``GET /calls/{sid}``) and what the caller heard:

- task success: the goal reached (the right answer read out, the slots filled with the right
  values, the transfer made, the call ended on a goodbye);
- slots exactly right: name and number values as said;
- 10-digit numbers exactly right;
- yes/no understood: after a caller's "yes" the slot is kept, after a "no" it is asked again;
- false turn ends: server turns beyond the caller's utterances (a turn cut at a comma), and how
  many of them the agent took back because the caller talked over the reply to the fragment
  (the two parts answered as one: ``agent.embedded.CONTINUATION_S``);
- v2v p50/p95/p99: end of caller speech to the first agent audio byte.

Prints one JSON line (per recogniser, and the SSM's score minus Whisper's).

``--caller listening``: a caller who answers what the agent says instead of reading a fixed
script, as a person does. The same goals, names and numbers: it opens with the script's first
words; says "yes" to a read-back that is right and "no" to one that is wrong (then gives the
value again when asked); gives its name, number or message when asked for them; presses 1 or 2
when offered the keypad after an unsure yes/no, and types its number and # when a number
is asked again with the keypad offered; spells its name, letter by letter, when asked to
(``spelled_out``: "dee, eigh, vee, eye, dee. em, eye, ..."); says its question again after
"Sorry, I didn't catch that" (at most twice in a row) and after "anything else?" when its
question has not been answered yet; says the script's last words once the goal is reached. It
reads the agent's words from the server's live call record (a person hears them; how well the
agent's own speech is heard is bench_tts's question).
A WAV voice says a repeated line anew (another rate and pitch, as a person would); flite's slt
says it the same. The scores are as above, but yes/no understood is judged on each read-back the
caller answered (kept after a "yes", asked again after a "no"), ``turns`` counts the caller's
steps per call (p50/p95: each thing said, each key or keyed number), ``numbers_keyed`` the
numbers typed when the agent offered the keypad, and ``names_spelled`` the names spelled when
it asked.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import shutil
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from common import git_sha  # noqa: E402

from agent.slots import digits_in  # noqa: E402
from benchmarks.serve_process import ServeProcess, free_port  # noqa: E402
from harness.callers.twilio import CallerConfig, CallerUtterance, run_call  # noqa: E402
from harness.callers.script import spelled_out  # noqa: E402
from telephony.twilio.signature import SIGNATURE_HEADER, compute_signature  # noqa: E402

TOKEN = "bench-conv-" + "0" * 24
_SYNTH_LOCK = threading.Lock()
NAMES = ["michael brown", "sarah jones", "david miller", "anna lee", "james wilson",
         "mary johnson", "robert taylor", "linda davis", "peter clark", "susan white"]
_DIGIT = "zero one two three four five six seven eight nine".split()


@dataclass
class Script:
    """One call: what the caller says, and what must happen for the goal to count as reached."""

    agent: str                             # "receptionist" | "orders"
    goal: str
    steps: list[str]
    answer: str | None = None              # a phrase one of the agent's replies must hold
    slots: dict[str, str] = field(default_factory=dict)   # slot -> the exact value
    transfer: bool = False
    hangup: bool = False
    yes_no: list[tuple[int, bool]] = field(default_factory=list)   # (step index, said yes)


def _spoken(digits: str, rng: random.Random) -> str:
    groups = [digits[:3], digits[3:6], digits[6:]] if len(digits) == 10 else [digits]
    return ", ".join(" ".join("oh" if c == "0" and rng.random() < 0.3 else _DIGIT[int(c)]
                              for c in g) for g in groups)


def scripts(rng: random.Random) -> list[Script]:
    out = [
        Script("receptionist", "hours", ["what are your opening hours", "no thank you"],
               answer="Monday to Friday", hangup=True),
        Script("receptionist", "address", ["where are you located", "thank you, goodbye"],
               answer="River Street", hangup=True),
        Script("receptionist", "parking", ["is there parking", "no thanks, goodbye"],
               answer="free parking", hangup=True),
        Script("receptionist", "insurance", ["do you take cigna insurance", "goodbye"],
               answer="Cigna", hangup=True),
        Script("receptionist", "person", ["can I talk to a person please"], transfer=True),
        Script("receptionist", "goodbye", ["thank you, goodbye"], hangup=True),
        Script("orders", "shipping", ["how long does shipping take", "no thank you"],
               answer="business days", hangup=True),
        Script("orders", "order", ["one two three four five", "yes", "no thank you"],
               answer="has shipped", slots={"order_number": "12345"}, yes_no=[(1, True)],
               hangup=True),
    ]
    for opener in ("I would like to leave a message", "hello, I would like to leave a message"):
        name = rng.choice(NAMES)
        digits = "555" + "".join(str(rng.randrange(10)) for _ in range(7))
        out.append(Script(
            "receptionist", "message" if "hello" not in opener else "message after a comma",
            [opener, f"my name is {name}", "yes", _spoken(digits, rng), "yes",
             "please call me back about my appointment", "no thank you"],
            slots={"name": name.title(), "phone": digits},
            yes_no=[(2, True), (4, True)], hangup=True))
    name = rng.choice(NAMES)
    wrong, digits = "555" + "0" * 7, "555" + "".join(str(rng.randrange(10)) for _ in range(7))
    out.append(Script(
        "receptionist", "message, number corrected",
        ["can you take a message", f"my name is {name}", "yes", _spoken(wrong, rng), "no",
         _spoken(digits, rng), "yes", "please call me back", "goodbye"],
        slots={"name": name.title(), "phone": digits},
        yes_no=[(2, True), (4, False), (6, True)], hangup=True))
    return out


# --- running the calls --------------------------------------------------------------------------

class Server(ServeProcess):
    def __init__(self, name: str, extra: list[str], log_dir: str, env: dict[str, str],
                 log_level: str = "WARNING"):
        port = free_port()
        super().__init__(name, ["-m", "deploy.cli", "serve", "--port", str(port),
                                "--log-level", log_level, *extra],
                         port=port, log_path=Path(log_dir) / f"{name}.log",
                         env={"TWILIO_AUTH_TOKEN": TOKEN, **env})

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/twilio/stream"


def order_api(log_dir: Path) -> tuple[ServeProcess, dict[str, str]]:
    """The example order service on a free port (``wait_ready`` it) and the servers' environment
    that points the order line's tool at it."""
    port = free_port()
    api = ServeProcess("order-api", ["-m", "agent.examples.order_api", "--port", str(port)],
                       port=port, log_path=log_dir / "order-api.log")
    return api, {"ORDER_API_URL": f"http://127.0.0.1:{port}"}


async def _record(server: Server, call_sid: str) -> dict:
    url = f"http://127.0.0.1:{server.port}/calls/{call_sid}"
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session:
        for _ in range(10):
            headers = {SIGNATURE_HEADER: compute_signature(TOKEN, url, {})}
            async with session.get(url, headers=headers) as resp:
                data = await resp.json(content_type=None) if resp.status == 200 else {}
            if data.get("ended"):
                return data
            await asyncio.sleep(0.3)
    return data


def _wav_steps(steps: list[str], voice_name: str, folder: Path, seed: int) -> list[CallerUtterance]:
    """The steps spoken by a voice of ``ssm_engine.data.voices``, as WAV utterances."""
    from ssm_engine.data.audio import write_wav
    from ssm_engine.data.voices import voice

    v = voice(voice_name)
    rng = np.random.default_rng(seed)
    out = []
    with _SYNTH_LOCK:            # the same call goes to every server at once: speak it once
        for i, text in enumerate(steps):
            path = folder / f"{abs(hash((voice_name, text, seed)))}-{i}.wav"
            if not path.exists():
                x, rate = v.synthesize(text, rng)
                tmp = path.with_suffix(".tmp")
                write_wav(tmp, x, rate)
                tmp.replace(path)
            out.append(CallerUtterance(wav=path))
    return out


class ListeningCaller:
    """A caller with ``script``'s goal who answers what the agent says (``--caller listening``;
    the rules are in the module docstring). Called with the agent's last words; keeps the
    bookkeeping the score needs."""

    MAX_REPEATS = 2          # the same line said again in a row at most this often
    MAX_ASKS = 3             # the caller's question, in all

    def __init__(self, script: Script, voice_name: str, folder: Path, seed: int) -> None:
        self.script, self.voice_name, self.folder, self.seed = script, voice_name, folder, seed
        steps = script.steps
        self.opener, self.closing = steps[0], steps[-1]
        self.name = script.slots.get("name", "").lower()
        self.digits = script.slots.get("phone") or script.slots.get("order_number") or ""
        self.message = next((x for x in steps if x.startswith("please")), "please call me back")
        # the number corrected: first a wrong number, as in the script
        self.slip = steps[3] if script.goal == "message, number corrected" else None
        self.said: list[str] = []
        self.replies: list[str] = []
        self.yes_no: list[bool] = []
        self._answered: bool | None = None       # the last read-back's answer, judged next turn
        self._asks = 0
        self._closing = False
        self._renditions = 0
        self.keyed = 0                           # numbers typed on the keypad when offered
        self.key_steps = 0                       # steps keyed (a 1 or a 2, a number and #)
        self.spelled = 0                         # names spelled when asked

    def _reached(self) -> bool:
        return bool(self.script.answer) and any(
            self.script.answer.lower() in r.lower() for r in self.replies)

    def _repeats(self, text: str) -> int:
        n = 0
        for x in reversed(self.said):
            if x != text:
                break
            n += 1
        return n

    async def _say(self, text: str) -> CallerUtterance:
        self.said.append(text)
        if text == self.opener:
            self._asks += 1
        if text == self.closing:
            self._closing = True
        if self.voice_name.startswith("flite:"):
            return CallerUtterance(text=text)
        self._renditions += 1            # a line said again is said anew: another rate and pitch
        utts = await asyncio.to_thread(_wav_steps, [text], self.voice_name, self.folder,
                                       self.seed * 1000 + self._renditions)
        return utts[0]

    def _judge(self, h: str) -> None:
        """Whether the agent understood the caller's last answer to a read-back."""
        if self._answered is None:
            return
        if self._answered:
            self.yes_no.append("sorry about that" not in h and "yes or a no" not in h)
        else:
            self.yes_no.append("sorry about that" in h or "trouble getting that right" in h)
        self._answered = None

    def _readback_right(self, h: str) -> bool:
        if "name" in h:
            return bool(self.name) and self.name in h
        if "number" in h:
            return digits_in(h) == self.digits
        return True

    async def __call__(self, heard: str) -> CallerUtterance | None:
        h = heard.lower()
        if not self.said:
            return await self._say(self.opener)
        self.replies.append(heard)
        self._judge(h)
        if self._closing:
            return None
        if "yes or a no" in h and "press 1" in h:       # unsure of the answer: the keypad
            self._answered = right = self._readback_right(h)
            self.key_steps += 1
            return CallerUtterance(dtmf="1" if right else "2")
        if "is that right" in h:
            self._answered = right = self._readback_right(h)
            return await self._say("yes" if right else "no")
        if "spell your name" in h and self.name:
            self.spelled += 1
            return await self._say(spelled_out(self.name))
        if "your name" in h and self.name:
            return await self._say(f"my name is {self.name}")
        if self.digits and "keypad" in h and "press pound" in h:   # a number asked again
            self.keyed += 1
            self.key_steps += 1
            return tuple(CallerUtterance(dtmf=k) for k in self.digits + "#")
        if self.digits and ("phone number" in h or "number to reach you" in h
                            or "order number" in h):
            if self.slip is not None and self.slip not in self.said:
                return await self._say(self.slip)
            return await self._say(_spoken(self.digits, random.Random(self.seed)))
        if "pass on" in h:
            return await self._say(self.message)
        if "leave a message?" in h:
            return await self._say("yes" if "message" in self.script.goal else "no")
        if "put you through" in h:
            return await self._say("yes" if self.script.transfer else "no")
        unheard = any(k in h for k in ("didn't catch", "repeat that", "another way",
                                       "still there"))
        if self.script.answer and not self._reached() and self._asks < self.MAX_ASKS \
                and (unheard or "anything else" in h):
            return await self._say(self.opener)
        if unheard and self._repeats(self.said[-1]) <= self.MAX_REPEATS:
            return await self._say(self.said[-1])
        return await self._say(self.closing)


async def place(server: Server, script: Script, voice_name: str, folder: Path,
                seed: int, listening: bool = False) -> dict:
    if listening:
        caller = ListeningCaller(script, voice_name, folder, seed)
        report = await run_call(CallerConfig(
            url=server.url, auth_token=TOKEN, utterances=(), respond=caller, max_turns=14,
            voice=voice_name.split(":", 1)[1] if voice_name.startswith("flite:") else "slt",
            timeout_s=60 + 15 * 14, reply_timeout_s=25.0))
        record = await _record(server, report.call_sid)
        return score_listening(script, report, record, caller) | {
            "voice": voice_name, "goal": script.goal, "agent": script.agent}
    if voice_name.startswith("flite:"):
        utts = tuple(CallerUtterance(text=s) for s in script.steps)
        flite_voice = voice_name.split(":", 1)[1]
    else:
        utts = tuple(await asyncio.to_thread(_wav_steps, script.steps, voice_name, folder, seed))
        flite_voice = "slt"
    report = await run_call(CallerConfig(url=server.url, auth_token=TOKEN, utterances=utts,
                                         voice=flite_voice, timeout_s=60 + 15 * len(utts),
                                         reply_timeout_s=25.0))
    record = await _record(server, report.call_sid)
    return score(script, report, record) | {"voice": voice_name, "goal": script.goal,
                                            "agent": script.agent}


def _goal(script: Script, record: dict) -> tuple[bool, list[bool], list[bool]]:
    """From the server's record: the goal reached, each slot exactly right, each 10-digit one."""
    turns = record.get("turns", [])
    replies = [record.get("greeting", "")] + [t.get("agent_text", "") for t in turns]
    events = [e for t in turns for e in t.get("events", [])]
    slots: dict[str, str] = {}
    for e in events:
        if e.get("kind") == "slot":
            slots[e["data"]["name"]] = e["data"]["value"]
    kinds = {e.get("kind") for e in events}
    ok = True
    if script.answer:
        ok &= any(script.answer.lower() in r.lower() for r in replies)
    for name, value in script.slots.items():
        ok &= slots.get(name) == value
    if script.transfer:
        ok &= "transfer" in kinds
    if script.hangup:
        ok &= "hangup" in kinds or bool(record.get("end_reason"))
    slot_right = [slots.get(n) == v for n, v in script.slots.items()]
    phone = [slots.get(n) == v for n, v in script.slots.items() if len(v) == 10]
    return bool(ok), slot_right, phone


def score_listening(script: Script, report, record: dict, caller: ListeningCaller) -> dict:
    turns = record.get("turns", [])
    ok, slot_right, phone = _goal(script, record)
    events = [e for t in turns for e in t.get("events", [])]
    spoken = len(caller.said)
    return {
        "success": ok, "slots_right": slot_right, "phone_right": phone, "yes_no": caller.yes_no,
        # keys open no turn in the record (their answer joins the turn before): only speech does
        "false_turn_ends": max(0, len(turns) - spoken),
        "continued": sum(e.get("kind") == "continued" for e in events),
        "v2v_ms": [t.v2v_ms for t in report.turns if t.v2v_ms is not None],
        "heard": [t.get("user_text", "") for t in turns],
        "said": caller.said, "turns": spoken + caller.key_steps, "keyed": caller.keyed,
        "spelled": caller.spelled,
    }


def score(script: Script, report, record: dict) -> dict:
    turns = record.get("turns", [])
    replies = [record.get("greeting", "")] + [t.get("agent_text", "") for t in turns]
    events = [e for t in turns for e in t.get("events", [])]
    ok, slot_right, phone = _goal(script, record)
    # a turn cut at a comma shifts the server's turns after it: the answer to step k's read-back
    # is the first turn from k on (within the extra turns) that follows an "Is that right?"
    extra = max(0, len(turns) - len(script.steps))
    yes_no = []
    for step, said_yes in script.yes_no:
        at = next((i for i in range(step, min(len(turns), step + extra + 1))
                   if "is that right" in replies[i].lower()), step)
        if at >= len(turns):
            yes_no.append(False)
            continue
        t = turns[at]
        kept = any(e.get("kind") == "slot" for e in t.get("events", []))
        asked_again = t.get("agent_text", "").startswith("Sorry about that")
        yes_no.append(kept if said_yes else asked_again)
    return {
        "success": bool(ok), "slots_right": slot_right, "phone_right": phone, "yes_no": yes_no,
        "false_turn_ends": max(0, len(turns) - len(script.steps)),
        # turns the agent took back because the caller talked over their reply: each joined
        # to the next (agent.embedded, CONTINUATION_S)
        "continued": sum(e.get("kind") == "continued" for e in events),
        "v2v_ms": [t.v2v_ms for t in report.turns if t.v2v_ms is not None],
        "heard": [t.get("user_text", "") for t in turns],
        "said": script.steps,
    }


def _pct(xs: list[float]) -> dict:
    if not xs:
        return {}
    return {f"p{q}": round(float(np.percentile(xs, q)), 1) for q in (50, 95, 99)}


def summarise(rows: list[dict]) -> dict:
    def rate(xs: list[bool]) -> float | None:
        return round(sum(xs) / len(xs), 3) if xs else None

    return {
        "calls": len(rows),
        "task_success": rate([r["success"] for r in rows]),
        "slots_exact": rate([x for r in rows for x in r["slots_right"]]),
        "phone_10_digits_exact": rate([x for r in rows for x in r["phone_right"]]),
        "yes_no_understood": rate([x for r in rows for x in r["yes_no"]]),
        "false_turn_ends": sum(r["false_turn_ends"] for r in rows),
        "false_turn_ends_taken_back": sum(min(r["continued"], r["false_turn_ends"]) for r in rows),
        "v2v_ms": _pct([v for r in rows for v in r["v2v_ms"]]),
        "by_goal": {g: rate([r["success"] for r in rows if r["goal"] == g])
                    for g in dict.fromkeys(r["goal"] for r in rows)},
        **({"turns": {k: v for k, v in _pct([r["turns"] for r in rows]).items() if k != "p99"},
            "numbers_keyed": sum(r["keyed"] for r in rows),
            "names_spelled": sum(r["spelled"] for r in rows)}
           if rows and "turns" in rows[0] else {}),
    }


async def main_async(args: argparse.Namespace) -> dict:
    rng = random.Random(args.seed)
    # each script keeps its place (its seed: the voices' renditions) when goals are picked, so
    # a --goals run places the very calls the whole run did
    all_scripts = list(enumerate(s for _ in range(args.repeat) for s in scripts(rng)))
    if args.goals:
        all_scripts = [(i, s) for i, s in all_scripts if s.goal in args.goals]
    if args.quick:
        all_scripts = all_scripts[:3]
    log_dir = Path(tempfile.mkdtemp(prefix="parley-bench-conv-"))
    if args.keep_logs:
        print(f"server logs and caller WAVs are kept in {log_dir}", file=sys.stderr)
    wavs = log_dir / "wav"
    wavs.mkdir()
    api, env = order_api(log_dir)
    servers: dict[tuple[str, str], Server] = {}
    for stt in args.stt:
        for agent, spec in (("receptionist", "agent/examples/receptionist.yaml"),
                            ("orders", "agent/examples/order_status.yaml")):
            servers[(stt, agent)] = Server(f"{stt}-{agent}",
                                           ["--stt", stt, "--agent", spec], str(log_dir), env,
                                           "DEBUG" if args.keep_logs else "WARNING")
    results: dict[str, list[dict]] = {stt: [] for stt in args.stt}
    try:
        await asyncio.gather(api.wait_ready(), *(s.wait_ready(timeout_s=180)
                                                 for s in servers.values()))
        n = 0
        for i, script in all_scripts:
            for voice_name in args.voices:
                calls = [place(servers[(stt, script.agent)], script, voice_name, wavs, i,
                               args.caller == "listening")
                         for stt in args.stt]
                if args.apart:       # one server busy at a time: each latency is its own
                    rows = [await c for c in calls]
                else:                # the same call to every server at once: noise hits all
                    rows = await asyncio.gather(*calls)
                for stt, row in zip(args.stt, rows):
                    results[stt].append(row)
                n += 1
                print(f"[{n}/{len(all_scripts) * len(args.voices)}] {script.goal} "
                      f"({voice_name}): " + ", ".join(
                          f"{stt} {'ok' if results[stt][-1]['success'] else 'FAIL'}"
                          for stt in args.stt), file=sys.stderr, flush=True)
    finally:
        for s in servers.values():
            s.stop()
        api.stop()
        if not args.keep_logs:
            shutil.rmtree(log_dir, ignore_errors=True)
    out: dict = {"bench": "conversations", "voices": args.voices, "seed": args.seed,
                 "calls_placed": "apart" if args.apart else "together", "caller": args.caller,
                 "git": git_sha()}
    for stt, rows in results.items():
        out[stt] = summarise(rows)
        out[f"{stt}_failures"] = [{"goal": r["goal"], "voice": r["voice"], "said": r["said"],
                                   "heard": r["heard"]} for r in rows if not r["success"]][:12]
        out[f"{stt}_false_turn_ends"] = [{"said": r["said"], "heard": r["heard"]} for r in rows
                                         if r["false_turn_ends"]][:6]
    if "ssm" in results and "whisper" in results:
        a, b = out["ssm"]["task_success"], out["whisper"]["task_success"]
        if a is not None and b is not None:
            out["task_success_points_below_whisper"] = round(100 * (b - a), 1)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--voices", nargs="+", default=None,
                    help="held-out voices (default flite:slt, espeak:en-us+f3, and mbrola:mb-us1 "
                    "when installed)")
    ap.add_argument("--stt", nargs="+", default=["ssm", "whisper"],
                    choices=["ssm", "whisper", "sphinx"])
    ap.add_argument("--repeat", type=int, default=1, help="each script this many times (new "
                    "names and numbers)")
    ap.add_argument("--seed", type=int, default=22)
    ap.add_argument("--quick", action="store_true", help="three scripts only (a smoke run)")
    ap.add_argument("--goals", nargs="+", default=None, metavar="GOAL",
                    help="only the scripts with these goals (e.g. 'message after a comma' order)")
    ap.add_argument("--apart", action="store_true",
                    help="place each call to one recogniser's server after the other instead "
                    "of to all at once: on a small machine Whisper's decode of a turn takes a "
                    "core while the SSM server answers it, and the SSM's latency then measures "
                    "the neighbour (task scores are the same either way; the run takes longer)")
    ap.add_argument("--caller", choices=["scripted", "listening"], default="scripted",
                    help="scripted: each call's lines in a fixed order, whatever the agent says "
                    "(every run recorded before 2026-12-04, git 2ab7128); listening: a caller who "
                    "answers what the agent says, with the same goals (see above)")
    ap.add_argument("--keep-logs", action="store_true",
                    help="keep the servers' logs and the callers' WAVs (the folder is printed)")
    args = ap.parse_args(argv)
    if args.voices is None:
        args.voices = ["flite:slt", "espeak:en-us+f3"]
        if shutil.which("mbrola") and Path("/usr/share/mbrola/us1").exists():
            args.voices.append("mbrola:mb-us1")
    print(json.dumps(asyncio.run(main_async(args))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
