# Two commands: `make run` and `make test`. Both create .venv when missing and install
# the project into it; the stamp file re-installs only when pyproject.toml changes.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TEST_STAMP := $(VENV)/.installed-test

.PHONY: run test bench lint clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip uv

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/uv pip install --python $(BIN)/python --quiet -e .
	touch $(STAMP)

$(TEST_STAMP): $(STAMP)
	$(BIN)/uv pip install --python $(BIN)/python --quiet -e '.[test]'
	touch $(TEST_STAMP)

run: $(STAMP)
	$(BIN)/dockyard serve $(ARGS)

# End-to-end tests mostly wait on servers and jobs: two workers halve the wall time.
TEST_WORKERS ?= 2

test: $(TEST_STAMP)
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) $(ARGS)

bench: $(TEST_STAMP)
	$(BIN)/python -m bench $(ARGS)

lint: $(TEST_STAMP)
	$(BIN)/ruff check dockyard tests bench
	$(BIN)/lint-imports
	$(BIN)/mypy

clean:
	rm -rf $(VENV) .dockyard
