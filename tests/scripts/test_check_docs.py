"""scripts/check-docs, which ``make lint`` runs, on a temp tree: it catches a long README, work
dated by sessions or issue numbers, and links between markdown files that do not resolve, and
leaves "session" in its own senses (SIP, WebRTC, HTTP) alone."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "check-docs"


def _module():
    loader = importlib.machinery.SourceFileLoader("check_docs", str(SCRIPT))
    spec = importlib.util.spec_from_loader("check_docs", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


check_docs = _module()


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


GOOD = {
    "README.md": "# parley\n\nSee [getting started](docs/getting-started.md#first-call).\n",
    "docs/getting-started.md": "# Getting started\n\n## First call\n\n[back](../README.md), "
                               "[a script](../scripts/x.py), [section](#first-call), [web](https://x.org/a.md)\n",
    "scripts/x.py": '"""Each SIP session has its RTP; a WebRTC session, an HTTP session: this ' + 'session id."""\n',
}


def test_a_clean_tree_passes(tmp_path):
    root = _tree(tmp_path, GOOD)
    assert check_docs.check(root) == []
    assert subprocess.run([sys.executable, str(SCRIPT), str(root)], capture_output=True).returncode == 0


def test_a_readme_over_the_limit_fails(tmp_path):
    root = _tree(tmp_path, {**GOOD, "README.md": "line\n" * (check_docs.README_MAX_LINES + 1)})
    (fault,) = check_docs.check(root)
    assert fault.startswith("README.md:301: 301 lines")


S, ISSUE = "session", "issue"  # the faults' words, apart: this file must pass the check itself


@pytest.mark.parametrize("text", [f"measured in the 35th {S}", f"the twenty-second {S} found it",
                                  f"rerun at the {S}'s end", f"written in this {S}",
                                  f"({S} of 2026-11-30, fifth)", f"as {ISSUE} 22 asks", f"{ISSUE}s 25, 26",
                                  f"joe's 26th-{S} run", f"as the 39th\n{S} found"])
def test_work_dated_by_a_session_or_an_issue_number_fails(tmp_path, text):
    root = _tree(tmp_path, {**GOOD, "docs/notes.md": f"# Notes\n\nA figure {text}.\n",
                            "pkg/mod.py": "# " + text.replace("\n", "\n# ") + "\n"})
    faults = check_docs.check(root)
    assert [f.split(":")[:2] for f in faults] == [["docs/notes.md", "3"], ["pkg/mod.py", "1"]]
    assert all("dates work" in f for f in faults)
    result = subprocess.run([sys.executable, str(SCRIPT), str(root)], capture_output=True, text=True)
    assert result.returncode == 1 and "docs/notes.md:3:" in result.stdout


@pytest.mark.parametrize("link, why", [("docs/missing.md", "no such file"),
                                       ("docs/getting-started.md#no-such-heading", "no heading"),
                                       ("#nowhere", "no heading")])
def test_a_link_that_does_not_resolve_fails(tmp_path, link, why):
    root = _tree(tmp_path, {**GOOD, "README.md": f"# parley\n\nSee [this]({link}).\n"})
    (fault,) = check_docs.check(root)
    assert fault.startswith("README.md:3: link to") and why in fault


def test_links_in_code_are_not_links(tmp_path):
    root = _tree(tmp_path, {**GOOD, "docs/code.md": "# Code\n\n```\n[x](nowhere.md)\n```\n\n`[y](nowhere.md)`\n"})
    assert check_docs.check(root) == []
