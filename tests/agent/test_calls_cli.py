"""``parley calls list`` / ``parley calls show`` over a real SQLite file."""

import argparse
import json

import pytest

from agent.calls_cli import default_db_path, format_call, register_cli
from pipeline.records import CallRecord
from pipeline.records_sqlite import SQLiteCallStore


@pytest.fixture
def db(tmp_path):
    path = tmp_path / "calls.db"
    store = SQLiteCallStore(path)
    old = CallRecord(call_sid="CAold", transport="twilio", started_at=1_700_000_000.0,
                     ended_at=1_700_000_095.0, end_reason="caller said goodbye",
                     greeting="Thanks for calling Acme Shop.")
    t = old.turn(1)
    t.user_text, t.agent_text = "where is my harder", "I have order number 1 2 3. Is that right?"
    t.latency_ms = {"total": 640.0, "tts": None}
    t = old.turn(2)
    t.user_text = "yes"
    t.agent_text = "Order 1 2 3 has shipped."
    t.agent_text_heard, t.interrupted = "Order 1 2 3", True
    t.tool_calls.append({"name": "lookup_order", "arguments": {"order_number": "123"},
                         "result": {"status": "has shipped"}, "duration_ms": 42.4})
    t.events.append({"kind": "slot", "data": {"name": "order_number", "value": "123"}})
    store.open(old)
    store.open(CallRecord(call_sid="CAnew", transport="webrtc", started_at=1_700_000_500.0))
    store.close()
    return path


def run(argv: list[str], capsys) -> tuple[int, str, str]:
    parser = argparse.ArgumentParser(prog="parley")
    register_cli(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    code = args.func(args)
    out, err = capsys.readouterr()
    return code, out, err


def test_list_prints_a_table_newest_first(db, capsys):
    code, out, _ = run(["calls", "list", "--db", str(db)], capsys)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["CALL", "STARTED", "LENGTH", "TURNS", "TRANSPORT", "END"]
    assert lines[1].startswith("CAnew") and "live" in lines[1] and "in progress" in lines[1]
    assert lines[2].startswith("CAold") and "1:35" in lines[2]
    assert lines[2].rstrip().endswith("caller said goodbye")


def test_list_json(db, capsys):
    code, out, _ = run(["calls", "list", "--json", "--db", str(db), "--limit", "1"], capsys)
    assert code == 0
    assert [c["call_sid"] for c in json.loads(out)] == ["CAnew"]


def test_show_prints_the_transcript_with_tool_calls(db, capsys):
    code, out, _ = run(["calls", "show", "CAold", "--db", str(db)], capsys)
    assert code == 0
    assert out.splitlines()[0] == "Call CAold (twilio)"
    assert "  agent:  Thanks for calling Acme Shop." in out
    assert "  caller: where is my harder" in out
    assert ('  tool:   lookup_order({"order_number": "123"}) -> {"status": "has shipped"} [42 ms]'
            in out)
    assert "  event:  slot order_number = '123'" in out
    assert "  agent:  Order 1 2 3 has shipped.  (caller heard: 'Order 1 2 3')" in out
    assert "  latency: total 640 ms" in out
    assert out.index("where is my harder") < out.index("lookup_order") < out.index("has shipped.")


def test_show_json_and_unknown_call(db, capsys):
    code, out, _ = run(["calls", "show", "CAold", "--json", "--db", str(db)], capsys)
    data = json.loads(out)
    assert code == 0 and data["turns"][1]["tool_calls"][0]["name"] == "lookup_order"
    code, _, err = run(["calls", "show", "CAnope", "--db", str(db)], capsys)
    assert code == 1 and "no call 'CAnope'" in err


def test_missing_database_says_where_it_looked(tmp_path, capsys):
    code, _, err = run(["calls", "list", "--db", str(tmp_path / "none.db")], capsys)
    assert code == 1 and "no call records at" in err and "none.db" in err


def test_empty_database(tmp_path, capsys):
    SQLiteCallStore(tmp_path / "e.db").close()
    assert run(["calls", "list", "--db", str(tmp_path / "e.db")], capsys)[1] == "no calls yet\n"


def test_default_db_path():
    assert str(default_db_path({"PARLEY_DB": "/x/y.db"})) == "/x/y.db"
    assert str(default_db_path({})).endswith(".local/share/parley/calls.db")


def test_format_call_of_an_empty_call():
    text = format_call(CallRecord(call_sid="CA1", transport="twilio", started_at=0.0))
    assert "in progress" in text and "caller:" not in text


def test_format_call_says_who_answered_a_screened_call():
    record = CallRecord(call_sid="c1", transport="sip", started_at=0.0, answered_by="machine", voicemail_left=True)
    assert "  answered by: machine, voicemail message left" in format_call(record).splitlines()
    record.voicemail_left = None
    record.answered_by = "human"
    assert "  answered by: human" in format_call(record).splitlines()
    assert "answered by" not in format_call(CallRecord(call_sid="c2", transport="sip", started_at=0.0))


def test_format_call_says_how_a_transfer_went():
    record = CallRecord(call_sid="c1", transport="sip", started_at=0.0, transfer={
        "mode": "warm", "target": "sip:desk@pbx", "outcome": "no-answer", "detail": "busy (486 Busy Here)"})
    assert "  transfer: warm transfer to sip:desk@pbx: no-answer (busy (486 Busy Here))" in format_call(record).splitlines()
    record.transfer = {"mode": "blind", "requested": "warm", "target": "+15550100"}
    assert "  transfer: blind transfer to +15550100 (warm asked for)" in format_call(record).splitlines()
    assert "transfer:" not in format_call(CallRecord(call_sid="c2", transport="sip", started_at=0.0))
