# Two commands matter: `make demo` and `make test`. Everything else supports them.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test lint typecheck contracts unit bench reliability proto gpu-check clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python scripts/demo.py

test: $(STAMP) lint typecheck contracts unit

lint: $(STAMP)
	$(BIN)/ruff check src tests bench scripts

typecheck: $(STAMP)
	$(BIN)/mypy src

contracts: $(STAMP)
	$(BIN)/lint-imports

unit: $(STAMP)
	$(BIN)/pytest -q -m "not reliability"

bench: $(STAMP)
	$(BIN)/python -m bench

reliability: $(STAMP)
	$(BIN)/pytest -q -m reliability

gpu-check: $(STAMP)
	$(BIN)/python scripts/gpu-check

proto: $(STAMP)
	$(BIN)/python scripts/gen_proto.py

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info
