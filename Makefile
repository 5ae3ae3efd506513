# Two commands matter: `make demo` and `make test`. Everything else supports them.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# Two stamps: the runtime dependencies (all `make demo` needs) and, on top of
# them, the development tools (`make test`: linters, type checker, test libraries).
RUNTIME := $(VENV)/.runtime
STAMP   := $(VENV)/.installed

# A .venv left by another Python (or with its interpreter gone) is made again
# rather than half-used: the stamp names the Python minor version it was built
# with, and VENV_BROKEN forces a rebuild whatever the stamps say.
PY_VERSION  := $(shell $(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])')
VENV_PYTHON := $(shell $(BIN)/python -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)
VENV_BROKEN := $(if $(filter $(PY_VERSION),$(VENV_PYTHON)),,yes)
MARK        := $(VENV)/.python-$(PY_VERSION)

.PHONY: demo test lint typecheck contracts unit e2e bench reliability proto gpu-check clean FORCE

$(MARK): $(if $(VENV_BROKEN),FORCE)
	@if [ -n "$(VENV_BROKEN)" ]; then \
		echo "$(VENV) is missing or not made by $(PYTHON) $(PY_VERSION): creating it"; \
		rm -rf $(VENV) && $(PYTHON) -m venv $(VENV); \
	fi
	@touch $@

$(RUNTIME): pyproject.toml $(MARK)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e .
	@touch $@

# One install for both: on a fresh clone `make test` resolves the packages once.
$(STAMP): pyproject.toml $(MARK)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $@ $(RUNTIME)

# DRA mode's demo runs the test suite's emulated Kubernetes API (kmock), a development package.
demo: $(if $(filter dra,$(KUBELET_API)),$(STAMP),$(RUNTIME))
	$(BIN)/python scripts/demo.py

# The type check and the import contracts run beside the e2e layer, which
# mostly waits on processes and sockets; the output stays grouped per target.
test: $(STAMP)
	$(MAKE) --no-print-directory lint unit
	$(MAKE) --no-print-directory -j3 --output-sync=target typecheck contracts e2e

lint: $(STAMP)
	$(BIN)/ruff check src tests bench scripts

typecheck: $(STAMP)
	$(BIN)/mypy src

contracts: $(STAMP)
	$(BIN)/lint-imports

# The test layers, marked by directory (tests/layers.py). One worker per CPU:
# most tests wait on a process, a socket or the emulated API server. Python
# may cache bytecode here even where the environment says not to: each worker
# rewrites every test module's asserts on import, about 6 s of CPU per run
# that the cache saves from the second run on.
PYTEST := env -u PYTHONDONTWRITEBYTECODE $(BIN)/pytest

# unit: in-process, no subprocess; under a minute on two cores.
unit: $(STAMP)
	$(PYTEST) -q -n auto -m unit tests/unit

# e2e: the real processes (the plugin, kubelet-sim, gpu-feature-discovery, the
# MPS daemon, helm, the demo) against the kubelet simulator; and the fault
# suites of tests/reliability in their short form.
e2e: $(STAMP)
	$(PYTEST) -q -n auto -m "e2e or (reliability and not long)" tests/e2e tests/reliability

# reliability: the fault suites in full, their long forms and the soak.
reliability: $(STAMP)
	$(PYTEST) -q -m reliability tests/reliability

bench: $(STAMP)
	$(BIN)/python -m bench

gpu-check: $(RUNTIME)
	$(BIN)/python scripts/gpu-check

proto: $(STAMP)
	$(BIN)/python scripts/gen_proto.py

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info
