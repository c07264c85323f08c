"""Test-wide settings."""

import pipecat.tests.utils as pipecat_test_utils

# pipecat's run_test gives a pipeline 1 s to start. Starting ours loads models (a pocketsphinx
# decoder alone takes ~0.45 s idle), and on a loaded 2-core CI machine that overran 1 s and
# failed tests at random. Regression guard for that flake: allow 20 s to start.
pipecat_test_utils.run_test.__kwdefaults__["start_timeout"] = 20.0

# `parley serve` and `parley eval stt` compile the SSM recognizer's k-frame prefill (torch.compile,
# ~30 s cold) unless PARLEY_STT_COMPILE=0: the servers tests start as processes run it eagerly.
# (In process, engines are eager unless asked; the compiled path has its own tests, which ask.)
import os  # noqa: E402

os.environ.setdefault("PARLEY_STT_COMPILE", "0")
