# Two commands do all set-up on a fresh machine (Python 3.11 + make; Node comes from the Pipfile):
#   make run    install everything, then run the census tuning study locally (the embedded default)
#   make test   install everything, then run the whole test suite (what CI runs)
#   make test-fast  the same without the tests that train models: the edit-test loop
#   make image  the cpu trainer image, built with this machine's Docker or Podman (see the README)
# Each target installs pipenv if it is missing and runs `pipenv sync --dev` first: slow once, ~1 s when warm.
# Afterwards every tool is in .venv/bin, so the README's commands need nothing on PATH: .venv/bin/python,
# .venv/bin/pytest, .venv/bin/cdktn (or `. .venv/bin/activate` once, then the bare names).

SHELL := /bin/bash
PYTHON ?= python3
PIPENV_VERSION := 2026.10.3
PIPENV := $(PYTHON) -m pipenv

# The virtualenv lives in .venv so tools, CI caches and the device runner all find it in one place.
export PIPENV_VENV_IN_PROJECT := 1
export PIPENV_YES := 1
export PIPENV_NOSPIN := 1
export PIPENV_VERBOSITY := -1
# The CDK CLI otherwise checks for updates and sends telemetry; runs stay offline and deterministic.
export CHECKPOINT_DISABLE := 1

RUN_JOB ?= jobs/census_tuning.yaml
RUN_ARGS ?=
PYTEST_ARGS ?=

.PHONY: run test test-fast image deps python-deps node-deps pipenv lint synth scan clean

run: deps
	$(PIPENV) run python scripts/run_job.py $(RUN_JOB) --local $(RUN_ARGS)

# Two pytest-xdist workers, a test file each at a time (module fixtures are built once): most tests wait on
# single-threaded TensorFlow imports and tracing in subprocesses, so two overlap well on two cores (11m39s
# serial -> 9m31s). PYTEST_WORKERS=0 runs serially in one process.
PYTEST_WORKERS ?= 2
XDIST_ARGS := $(if $(filter 0,$(PYTEST_WORKERS)),,-n $(PYTEST_WORKERS) --dist loadfile)

# pytest exits 5 when it collects nothing (e.g. a PYTEST_ARGS filter matches no test): report it, don't fail.
test: deps
	@status=0; $(PIPENV) run pytest $(XDIST_ARGS) $(PYTEST_ARGS) || status=$$?; \
	if [ $$status -eq 5 ]; then echo "pytest collected no tests"; status=0; fi; exit $$status

# The edit-test loop: everything but the tests that train real models (marker `training`, see
# `pytest --markers`) and those that build and run the trainer image (`container`). CI runs the complete
# `make test`.
test-fast: PYTEST_ARGS += -m "not training and not container"
test-fast: test

# The cpu trainer image, built here with Docker or Podman (whichever answers) as localhost/trainer:cpu-<hash>,
# the tag Cloud Build would give it; nothing is rebuilt while the tag exists. Where no registry can be reached
# the base is a Debian bookworm bootstrapped once with debootstrap (root; jobs/local/base_image.py).
image: python-deps
	$(PIPENV) run python scripts/build_image.py --local cpu

deps: python-deps node-deps

pipenv:
	@$(PIPENV) --version >/dev/null 2>&1 || $(PYTHON) -m pip install --user "pipenv==$(PIPENV_VERSION)" \
	  || $(PYTHON) -m pip install "pipenv==$(PIPENV_VERSION)" \
	  || $(PYTHON) -m pip install --user --break-system-packages "pipenv==$(PIPENV_VERSION)"

python-deps: pipenv
	$(PIPENV) sync --dev

# The CDK CLI (cdktn-cli, pinned in package-lock.json) runs on the Node that the Pipfile installs into .venv.
# .venv/bin/cdktn runs it from any shell, with that Node first on PATH (cdktf.json's app is `python ...`, the
# venv's) and CHECKPOINT_DISABLE set: without it the CLI's update check prints a red getaddrinfo error offline.
CDKTN := .venv/bin/cdktn

node-deps: $(CDKTN)

node_modules/.package-lock.json: package-lock.json | python-deps
	$(PIPENV) run npm ci --no-audit --no-fund --loglevel=error

$(CDKTN): node_modules/.package-lock.json
	@printf '%s\n' '#!/bin/sh' \
	  '# Written by make (Makefile, node-deps): the pinned CDK CLI on this virtualenv'"'"'s Node, offline by default.' \
	  'bin=$$(cd "$$(dirname "$$0")" && pwd)' \
	  'PATH="$$bin:$$PATH" CHECKPOINT_DISABLE="$${CHECKPOINT_DISABLE-1}" exec "$$bin/../../node_modules/.bin/cdktn" "$$@"' \
	  >$@ && chmod +x $@

lint: python-deps
	$(PIPENV) run ruff check .
	$(PIPENV) run actionlint .github/workflows/*.yml

# Every stack: <env> (CI applies it) and <env>-bootstrap (a project administrator applies it), see infra/README.md.
synth: deps
	$(CDKTN) synth

# checkov on each stack directory on its own, with that stack's own skips: passed/failed/skipped per stack.
scan: synth
	$(PIPENV) run python -m infra.policy cdktf.out

clean:
	rm -rf cdktf.out .local dist build *.egg-info
