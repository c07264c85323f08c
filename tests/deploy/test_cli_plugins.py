"""The parley command's plug-in commands: the harness's ``call`` and ``eval`` come through the
``parley.commands`` entry point group (the product never imports the harness), and a plug-in that
cannot be loaded costs one line on stderr, not the command line."""

from __future__ import annotations

import importlib.metadata

from deploy import cli


def _commands(parser) -> set[str]:
    sub = next(a for a in parser._actions if a.dest == "command")
    return set(sub.choices)


def test_the_harness_commands_come_through_the_entry_point():
    names = {ep.value for ep in importlib.metadata.entry_points(group=cli.PLUGIN_GROUP)}
    assert "harness.cli:register_cli" in names
    assert {"serve", "calls", "data", "train", "call", "eval"} <= _commands(cli.build_parser())


def test_a_plug_in_that_cannot_load_is_one_line_and_the_rest_works(monkeypatch, capsys):
    broken = importlib.metadata.EntryPoint(name="broken", value="no_such_package.cli:register_cli",
                                           group=cli.PLUGIN_GROUP)
    monkeypatch.setattr(importlib.metadata, "entry_points",
                        lambda group: [broken] if group == cli.PLUGIN_GROUP else [])
    commands = _commands(cli.build_parser())
    assert "serve" in commands and "call" not in commands
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("parley: commands of 'broken'") and "not loaded" in err[0]
