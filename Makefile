# Two commands do all the set-up on a fresh machine: `make run` and `make test`.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
ENGINE  := $(BIN)/engine
RESULTS ?= results

.PHONY: run test test-local lint bench clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# Stamps re-install only when pyproject.toml changes.
$(VENV)/.dev: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

$(VENV)/.local: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[dev,local]'
	touch $@

run: $(VENV)/.local
	$(ENGINE) validate suites/
	$(ENGINE) run suites/ --out $(RESULTS)
	$(ENGINE) analyze $(RESULTS)/latest
	$(ENGINE) report $(RESULTS)/latest -o $(RESULTS)/report.html

test: $(VENV)/.dev lint
	$(BIN)/python -m pytest -q -p no:cacheprovider

# The tests that start the real embedded model (gemma-3-270m under llama-cpp-python).
test-local: $(VENV)/.local
	$(BIN)/python -m pytest -q -p no:cacheprovider -m local_model

lint: $(VENV)/.dev
	$(BIN)/ruff check .
	$(BIN)/mypy engine
	$(BIN)/lint-imports

bench: $(VENV)/.dev
	$(BIN)/python bench/run_all.py

clean:
	rm -rf $(VENV) $(RESULTS) build *.egg-info
