"""Test-wide settings."""

import pipecat.tests.utils as pipecat_test_utils

# pipecat's run_test gives a pipeline 1 s to start. Starting ours loads models (a pocketsphinx
# decoder alone takes ~0.45 s idle), and on a loaded 2-core CI machine that overran 1 s and
# failed tests at random. Regression guard for that flake: allow 20 s to start.
pipecat_test_utils.run_test.__kwdefaults__["start_timeout"] = 20.0

# SSM recognizers compile their k-frame prefill (torch.compile, ~30 s cold) unless told not to.
# Tests that only need a working recognizer run it eagerly (servers they start inherit this);
# the compiled path has its own tests, which ask for it explicitly.
import os  # noqa: E402

os.environ.setdefault("PARLEY_STT_COMPILE", "0")
