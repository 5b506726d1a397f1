# Two commands do all the set-up on a fresh machine: `make run` and `make test`.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
ENGINE  := $(BIN)/engine
RESULTS ?= results
# When make started (seconds since the epoch): `make run` prints its whole time, set-up included.
START   := $(shell date +%s)
# Python's bytecode cache stays on for everything make starts. A machine-wide PYTHONDONTWRITEBYTECODE=1 (this
# workplace's shells set it) makes every interpreter compile each module it imports again: each pytest worker,
# each `engine` subprocess, the checkout's own engine/ and tests/ (pytest's assertion rewriting too). Measured on
# a fresh clone, bench/README.md "make test and make run". The caches land in .venv and gitignored __pycache__.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: run test test-slow test-local lint bench notebook clean

# Through install.py, which prints a line at least every 8 s: creating a venv and upgrading pip is silent
# otherwise (15-22 s on a loaded machine, bench/README.md "make run, line by line").
$(BIN)/python:
	$(PY) engine/local/install.py --log $(VENV)/setup.log --run \
	  sh -c '$(PY) -m venv $(VENV) && $(BIN)/pip install --upgrade pip'

# Stamps re-install only when pyproject.toml changes. uv installs the [dev] tools in ~4 s where pip takes ~60 s
# (measured on a fresh clone, bench/README.md "make test and make run"); pip stays the fallback (no network to uv's index,
# an index only pip.conf names) and installs [local], whose llama-cpp-python wheel sits in pip's cache.
# No --compile-bytecode: it compiles all 15,000 modules of [dev] (25-32 s) where the tests import ~1,900, which
# Python compiles once on first import now that the bytecode cache is on (see unexport above).
$(VENV)/.dev: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q uv && $(BIN)/uv pip install -q --python $(BIN)/python -e '.[dev]' \
	  || { echo "uv could not install [dev]; falling back to pip" >&2; $(BIN)/pip install -q -e '.[dev]'; }
	touch $@

# The [local] extra compiles llama.cpp once (pip caches the wheel): install.py shows the compile's progress
# instead of minutes of silence, and builds only what the embedded model's server loads. `make run` needs
# no [dev] tools, so a first run does not wait for them.
$(VENV)/.local: pyproject.toml | $(BIN)/python
	$(BIN)/python engine/local/install.py --log $(VENV)/install-local.log $(BIN)/pip install -e '.[local]'
	touch $@

# The second validate grades the judges only: the first has just checked every golden (in the sandbox, seconds).
run: $(VENV)/.local
	$(ENGINE) validate suites/
	$(ENGINE) validate --judges --no-golden-check suites/
	$(ENGINE) run suites/ --out $(RESULTS)
	$(ENGINE) analyze $(RESULTS)/latest
	$(ENGINE) report $(RESULTS)/latest -o $(RESULTS)/report.html >/dev/null
	@t=$$(( $$(date +%s) - $(START) )); d="$$t s"; [ $$t -lt 60 ] || d="$$((t / 60)) min $$((t % 60)) s"; \
	 echo "make run took $$d, set-up included; the report: $(RESULTS)/report.html"
	@echo "next: \`source $(VENV)/bin/activate\` puts \`engine\` on your PATH (then: engine view $(RESULTS), engine run" \
	  "suites/ ...), or call $(ENGINE) as it is; \`make notebook\` opens notebooks/analysis.ipynb on this run"

# JupyterLab on notebooks/analysis.ipynb, reading the last run ($(RESULTS)/latest); the [notebook] extra installs
# on first use. It serves until Ctrl-C, and the URL it prints opens the notebook itself (default_url); no other
# target and no CI step starts it. No browser is opened where there is no display (a text-mode browser would take
# over the terminal); as root (a container, CI) Jupyter needs --allow-root.
JUPYTER_FLAGS = $(if $(or $(DISPLAY),$(WAYLAND_DISPLAY),$(filter Darwin,$(shell uname -s))),,--no-browser) \
                $(if $(filter 0,$(shell id -u)),--allow-root)

$(VENV)/.notebook: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q uv && $(BIN)/uv pip install --python $(BIN)/python -e '.[notebook]' \
	  || { echo "uv could not install [notebook]; falling back to pip" >&2; $(BIN)/pip install -e '.[notebook]'; }
	touch $@

notebook: $(VENV)/.notebook
	@[ -e $(RESULTS)/latest ] || { echo "no run in $(RESULTS)/ yet: \`make run\` first (or engine run SUITES --out" \
	  "$(RESULTS))" >&2; exit 2; }
	@echo "JupyterLab on notebooks/analysis.ipynb, reading $(RESULTS)/latest; open the URL it prints (Ctrl-C stops it)"
	ENGINE_RESULTS=$(abspath $(RESULTS))/latest $(BIN)/jupyter lab notebooks/analysis.ipynb \
	  --LabApp.default_url=/lab/tree/analysis.ipynb $(JUPYTER_FLAGS)

PYTEST  := $(BIN)/python -m pytest -q -p no:cacheprovider
# One pytest worker per core (pytest-xdist); `make test JOBS=0` runs in one process.
JOBS    ?= auto

# Every test but the `slow` and `local_model` ones (see test-slow and test-local; .ci/run runs all three).
test: $(VENV)/.dev lint
	$(PYTEST) -n $(JOBS)

# End to end through heavy outside parts: a two-node Ray cluster, moto's S3 server, headless Chromium.
test-slow: $(VENV)/.dev
	$(PYTEST) -m slow

# The tests that start the real embedded models (gemma-3-270m, SmolLM2-135M-Instruct under llama-cpp-python).
test-local: $(VENV)/.dev $(VENV)/.local
	$(PYTEST) -m local_model

lint: $(VENV)/.dev
	$(BIN)/ruff check .
	$(BIN)/mypy engine
	# --no-cache: grimp's cache keeps one file-times index for both readings of `if TYPE_CHECKING:` imports, so
	# a checkout that once ran the other reading got stale answers back (a fresh read of engine/ takes ~1 s).
	$(BIN)/lint-imports --no-cache

bench: $(VENV)/.dev
	$(BIN)/python bench/run_all.py

clean:
	rm -rf $(VENV) $(RESULTS) build *.egg-info
