"""``parley chat``: talk to an agent in text, as a caller would on a call.

    parley chat --agent agent/examples/receptionist.yaml
    parley chat --agent agent/examples/order_status.yaml --tool 'lookup_order={"status": "has shipped"}'
    printf 'how much is a cleaning\\n#0\\n' | parley chat --agent agent/examples/receptionist.yaml
    parley chat --agent agent/examples/receptionist.yaml --voice           # hear the replies too
    parley chat --agent agent/examples/receptionist.yaml --voice slt --voice-out replies/

Each line is one caller turn; a line that starts with ``#`` presses the keys after it (``#1``
presses 1, ``#12345#`` types 12345 then pound); ``/slots`` prints the slots so far, ``/quit`` (or
end of input) hangs up. Under each answer go the agent's actions (slots filled, tool calls with
their arguments and replies, transfers, the hang-up) and, when they changed, its slots. The agent
is the one a call gets (:class:`agent.console.AgentConsole`); ``--tool`` gives a webhook tool a
canned reply instead of calling it. ``--voice [NAME]`` speaks each reply with a shipped voice on
the machine's speaker (``agent.chat_voice``; without one, it says so once and goes on in text),
``--voice-out DIR`` keeps each reply as a WAV file.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from typing import Any, TextIO

from agent.chat_voice import ChatVoice
from agent.console import AgentConsole, ConsoleTurn
from agent.errors import AgentError
from agent.spec import load_spec
from pipeline.voices import DEFAULT_VOICE, VOICES

__all__ = ["format_event", "parse_tool_replies", "register_cli"]


def format_event(event: dict[str, Any]) -> str:
    """One action of the agent, for a person to read."""
    kind, data = event.get("kind", "event"), event.get("data", {})
    if kind == "slot":
        return f"slot {data.get('name')} = {data.get('value')!r}"
    if kind == "tool_call":
        args = json.dumps(data.get("arguments", {}), sort_keys=True)
        outcome = (f"error: {data['error']}" if data.get("error") is not None
                   else json.dumps(data.get("result"), sort_keys=True, default=str))
        return f"tool {data.get('name')}({args}) -> {outcome}"
    if kind == "transfer":
        return f"transfer ({data.get('kind')}) to {data.get('target')} [{data.get('reason', '')}]"
    if kind == "hangup":
        return f"hang up [{data.get('reason', '')}]"
    return f"{kind} {json.dumps(data, sort_keys=True, default=str)}"


def parse_tool_replies(items: list[str]) -> dict[str, dict[str, Any]]:
    """``--tool NAME=JSON`` values as ``{name: reply}``; AgentError names a bad one."""
    out: dict[str, dict[str, Any]] = {}
    for item in items:
        name, sep, body = item.partition("=")
        try:
            reply = json.loads(body) if sep else None
        except json.JSONDecodeError as exc:
            raise AgentError(f"--tool {item!r}: the reply is not JSON: {exc.msg}") from exc
        if not name or not isinstance(reply, dict):
            raise AgentError(f"--tool {item!r}: expected NAME={{JSON object}}")
        out[name] = reply
    return out


async def _show(turn: ConsoleTurn, console: AgentConsole, before: dict[str, str], out: TextIO,
                voice: ChatVoice | None = None) -> None:
    for text in turn.said:
        out.write(f"agent> {text}\n")
        if voice is not None:
            out.flush()
            await asyncio.to_thread(voice.speak, text)
    for event in turn.events:
        out.write(f"        · {format_event(event)}\n")
    if console.slots != before:
        out.write("        slots: " + ", ".join(f"{k}={v}" for k, v in console.slots.items()) + "\n")
    if turn.ended:
        out.write("[the call has ended]\n")
    out.flush()


async def chat(args: argparse.Namespace, lines: TextIO, out: TextIO) -> int:
    spec = load_spec(args.agent, env=os.environ)
    echo = not lines.isatty()                 # piped input: show what the caller said
    out.write(f"{spec.name} ({spec.llm.backend} agent). One line a turn; #1 presses 1; "
              "/slots, /quit.\n")
    voice = None
    if getattr(args, "voice", None) or getattr(args, "voice_out", None):
        def note(line: str) -> None:
            out.write(line + "\n")
        voice = await asyncio.to_thread(ChatVoice.open, args.voice or DEFAULT_VOICE, play=bool(args.voice),
                                        out_dir=args.voice_out, note=note)
    async with AgentConsole(spec, tools=parse_tool_replies(args.tool), env=os.environ,
                            call_sid="chat") as console:
        await _show(await console.started(), console, {}, out, voice)
        while not console.ended:
            if not echo:
                out.write("you> ")
                out.flush()
            line = await asyncio.to_thread(lines.readline)
            if not line:
                break
            text = line.strip()
            if echo and text:
                out.write(f"you> {text}\n")
            if text in ("/quit", "/exit"):
                break
            if text == "/slots":
                out.write(f"        slots: {json.dumps(console.slots)}\n")
                continue
            before = dict(console.slots)
            try:
                turn = (await console.press(text[1:]) if text.startswith("#")
                        else await console.say(text))
            except AgentError as exc:
                out.write(f"[{exc}]\n")
                continue
            await _show(turn, console, before, out, voice)
    return 0


def _run(args: argparse.Namespace) -> int:
    return asyncio.run(chat(args, sys.stdin, sys.stdout))


def register_cli(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``parley chat``; it sets ``func`` to an ``(args) -> exit code``."""
    p = subparsers.add_parser(
        "chat", help="talk to an agent in text, as a call would run it",
        description="Talk to an agent in text: the agent a call gets (embedded or an LLM "
                    "backend, its tools, slots and transfers), no phone. One line a turn; a "
                    "line starting with # presses keys (#1). With --voice, hear each reply too.")
    p.add_argument("--agent", required=True, metavar="FILE", help="the agent spec (YAML)")
    p.add_argument("--tool", action="append", default=[], metavar="NAME=JSON",
                   help="answer webhook tool NAME with this JSON object instead of calling it "
                        "(repeatable)")
    p.add_argument("--voice", nargs="?", const=DEFAULT_VOICE, metavar="NAME",
                   help=f"speak each reply on this machine's speaker with a shipped voice "
                        f"({', '.join(VOICES)}; default {DEFAULT_VOICE}) or a voice folder; set "
                        "PARLEY_PLAYER to a command that plays a WAV from its stdin to choose the player")
    p.add_argument("--voice-out", metavar="DIR",
                   help="keep each reply as a WAV file in DIR (NNN-agent.wav), with or without a speaker")
    p.set_defaults(func=_run)
    return p
