"""parley serve's argument parsing that needs no server: --stt-warm, --stt-procs, --tts-procs,
--stt-compile."""

from __future__ import annotations

import os

import pytest

from deploy.cli import build_parser


@pytest.mark.parametrize("text, counts", [("4", (4, 1)), ("11:5", (11, 5)), ("0:0", (0, 0))])
def test_stt_warm_takes_phone_and_browser_counts(text, counts):
    args = build_parser().parse_args(["serve", "--stt-warm", text])
    assert args.stt_warm == counts


def test_stt_warm_limit_is_what_the_pool_keeps_idle():
    from deploy.serve_args import SPHINX_MAX_IDLE
    from pipeline.engines.sphinx import SphinxPool

    assert SphinxPool().max_idle == SPHINX_MAX_IDLE


def test_stt_warm_defaults_to_four_phone_and_one_browser_decoder():
    assert build_parser().parse_args(["serve"]).stt_warm == (4, 1)


@pytest.mark.parametrize("text", ["x", "-1", "3:y", "17", "1:2:3"])
def test_stt_warm_rejects_what_is_not_two_small_counts(text, capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--stt-warm", text])
    assert "--stt-warm" in capsys.readouterr().err


def test_engines_run_in_worker_processes_by_default():
    from deploy.serve_args import DEFAULT_STT_PROCS

    args = build_parser().parse_args(["serve"])
    assert (args.stt_procs, args.tts_procs) == (DEFAULT_STT_PROCS, 1)
    assert DEFAULT_STT_PROCS == min(8, max(1, (os.cpu_count() or 2) - 1))
    args = build_parser().parse_args(["serve", "--stt-procs", "0", "--tts-procs", "0"])
    assert (args.stt_procs, args.tts_procs) == (0, 0)
    assert build_parser().parse_args(["serve", "--stt-procs", "8"]).stt_procs == 8


@pytest.mark.parametrize("flag, text", [("--stt-procs", "-1"), ("--stt-procs", "9"), ("--stt-procs", "two"),
                                        ("--tts-procs", "2"), ("--tts-procs", "-1")])
def test_process_counts_out_of_range_are_refused(flag, text, capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", flag, text])
    assert flag in capsys.readouterr().err


@pytest.mark.parametrize("model", ["stt", "tts"])
def test_compile_is_on_unless_the_environment_turns_it_off(monkeypatch, model):
    env, flag, dest = f"PARLEY_{model.upper()}_COMPILE", f"--{model}-compile", f"{model}_compile"
    monkeypatch.delenv(env, raising=False)
    assert getattr(build_parser().parse_args(["serve"]), dest) == "on"
    assert getattr(build_parser().parse_args(["serve", flag, "off"]), dest) == "off"
    monkeypatch.setenv(env, "0")                                 # as the test suite runs
    assert getattr(build_parser().parse_args(["serve"]), dest) == "off"
    assert getattr(build_parser().parse_args(["serve", flag, "on"]), dest) == "on"


def test_version_and_ports_out_of_range(capsys):
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["--version"])
    assert exc.value.code == 0 and capsys.readouterr().out.startswith("parley 0.")
    for flag in ("--port", "--sip-port"):
        with pytest.raises(SystemExit):
            build_parser().parse_args(["serve", flag, "65536"])
        assert "a port is 0..65535" in capsys.readouterr().err


def test_model_server_device_defaults_to_auto_and_cuda_without_a_gpu_stops_at_start(capsys):
    """`parley model-server --device`: auto by default; a GPU asked for on a machine
    where torch sees none is one line and exit 2 before anything loads or listens."""
    import torch

    from deploy.cli import main

    assert build_parser().parse_args(["model-server"]).device == "auto"
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: --device cuda starts")
    assert main(["model-server", "--device", "cuda", "--port", "0"]) == 2
    (err,) = capsys.readouterr().err.strip().splitlines()
    assert err.startswith(f"parley model-server: device 'cuda': torch {torch.__version__} sees no GPU")
    assert err.endswith("use --device cpu or auto")


def test_drain_seconds_out_of_range_or_not_a_number_are_refused(capsys):
    assert build_parser().parse_args(["serve"]).drain_s == 30.0
    assert build_parser().parse_args(["serve", "--drain-s", "0"]).drain_s == 0.0
    for text in ("-1", "nan", "3601", "soon"):
        with pytest.raises(SystemExit):
            build_parser().parse_args(["serve", "--drain-s", text])
        assert "--drain-s" in capsys.readouterr().err


def test_a_ready_file_in_no_folder_stops_serve_before_anything_loads(tmp_path, capsys):
    from deploy.cli import main

    where = tmp_path / "no-such-folder" / "ready.json"
    assert main(["serve", "--insecure-dev", "--agent", "echo", "--ready-file", str(where)]) == 2
    (err,) = capsys.readouterr().err.strip().splitlines()
    assert err == f"parley serve: --ready-file {where}: no folder {where.parent}"
