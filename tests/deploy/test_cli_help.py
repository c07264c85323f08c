"""What the ``parley`` command line says when asked for help or given a wrong argument: every
example in a ``--help`` parses as shown, an argument error is one line, a port in use and a bare
``parley deploy plan`` are said at once and say what to give."""

from __future__ import annotations

import argparse
import logging
import shlex
import socket

import pytest

from deploy.cli import build_parser, main


def _parsers(parser: argparse.ArgumentParser, path: tuple[str, ...] = ("parley",)):
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, (*path, name))


def _examples() -> list[str]:
    """Every line of every help text (description and epilog) that runs a ``parley`` command."""
    found: dict[str, None] = {}
    for _path, parser in _parsers(build_parser()):
        for text in (parser.description or "", parser.epilog or ""):
            for line in text.splitlines():
                line = line.strip()
                if line.startswith("parley "):
                    found[line] = None
    return list(found)


def test_the_help_texts_have_examples():
    examples = _examples()
    assert len(examples) >= 20
    assert any(e.startswith("parley call ") for e in examples)


@pytest.mark.parametrize("example", _examples())
def test_every_example_in_a_help_text_parses_as_shown(example, capsys):
    """Regression: `parley --help`'s `parley call` example lacked the --auth-token it needs."""
    argv = shlex.split(example, comments=True)[1:]
    argv = [a.replace("...", "x") for a in argv]  # an elided image tag (`--image ...:0.2.0`)
    args = build_parser().parse_args(argv)
    assert callable(args.func)
    if argv[0] == "call":  # the caller refuses no token at run time: every example gives one
        assert args.auth_token


@pytest.mark.parametrize("argv, flag", [(["serve", "--port", "99999"], "--port"),
                                        (["serve", "--no-such-option"], "--no-such-option"),
                                        (["deploy"], "STEP")])
def test_an_argument_error_is_one_line_without_the_usage(argv, flag, capsys):
    """Regression: `--port 99999` printed the 21-line usage before the one line that mattered."""
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(argv)
    assert exc.value.code == 2
    (err,) = capsys.readouterr().err.strip().splitlines()
    assert err.startswith("parley") and flag in err and "--help" in err and "usage:" not in err


def test_the_help_still_has_the_usage(capsys):
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["serve", "--help"])
    assert exc.value.code == 0 and capsys.readouterr().out.startswith("usage: parley serve")


def test_a_port_in_use_is_said_before_anything_loads(monkeypatch, capsys):
    """Regression: a port in use was said only after ~25 s of loading the models."""
    from deploy import serve_cli

    def never(*_a, **_k):
        raise AssertionError("loaded before the port was checked")

    monkeypatch.setattr(serve_cli, "_load_agent_spec", never)
    monkeypatch.setattr(serve_cli, "_load_ssm_voice", never)
    monkeypatch.setattr(serve_cli, "_prewarm_ssm_stt", never)
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        assert main(["serve", "--insecure-dev", "--port", str(port)]) == 2
    (err,) = capsys.readouterr().err.strip().splitlines()
    assert err.startswith(f"parley serve: cannot listen on 127.0.0.1:{port}: ")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as held:
        held.bind(("127.0.0.1", 0))
        port = held.getsockname()[1]
        assert main(["serve", "--insecure-dev", "--port", "0", "--sip-port", str(port)]) == 2
    (err,) = capsys.readouterr().err.strip().splitlines()
    assert err.startswith(f"parley serve: cannot listen for SIP on udp://127.0.0.1:{port}: ")


def test_a_bare_deploy_plan_says_what_to_give(capsys):
    """Regression: `parley deploy plan` alone said only "name: required"."""
    assert main(["deploy", "plan"]) == 2
    (err,) = capsys.readouterr().err.strip().splitlines()
    assert "-f FILE" in err and "--name" in err and "--region" in err and "--role-arn" in err


@pytest.mark.parametrize("level, aioice", [("INFO", logging.WARNING), ("WARNING", logging.WARNING),
                                           ("ERROR", logging.ERROR), ("DEBUG", logging.DEBUG)])
def test_aioice_logs_warnings_at_info(level, aioice):
    """aioice logs every ICE pair's state change at INFO: a browser call flooded the log."""
    from deploy.logs import configure_logging

    try:
        configure_logging(level)
        assert logging.getLogger("aioice").level == aioice
    finally:
        configure_logging("WARNING")


@pytest.mark.parametrize("argv, env, words", [
    (["--webhook-url", "crm.example.com/hook"], {"PARLEY_WEBHOOK_SECRET": "s" * 32}, "http:// or https://"),
    (["--webhook-url", "https://crm.example.com/hook"], {}, "--webhook-secret or PARLEY_WEBHOOK_SECRET"),
    ([], {"PARLEY_WEBHOOK_URL": "https://crm.example.com/h", "PARLEY_WEBHOOK_SECRET": "short"}, "at least 16"),
    (["--webhook-secret", "s" * 32], {}, "without --webhook-url"),
])
def test_a_bad_webhook_setting_is_one_line_before_anything_loads(monkeypatch, capsys, argv, env, words):
    from deploy import serve_cli

    def never(*_a, **_k):
        raise AssertionError("loaded before the webhook settings were checked")

    monkeypatch.setattr(serve_cli, "_load_agent_spec", never)
    for name in ("PARLEY_WEBHOOK_URL", "PARLEY_WEBHOOK_SECRET"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert main(["serve", "--insecure-dev", "--port", "0", *argv]) == 2
    (err,) = capsys.readouterr().err.strip().splitlines()
    assert err.startswith("parley serve: ") and words in err, err
