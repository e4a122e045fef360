# Two commands: `make run` and `make test`. Both create .venv when missing and install
# the project into it; the stamp file re-installs only when pyproject.toml changes.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TEST_STAMP := $(VENV)/.installed-test
# The SageMaker SDK v3 wants a newer boto3 than dockyard pins: a venv of its own.
SDK3 := $(VENV)/sdk-v3
SDK3_STAMP := $(SDK3)/.installed
# Every module compiled to bytecode ahead of time: a Python that may not write it (as
# with PYTHONDONTWRITEBYTECODE) would otherwise compile SQLAlchemy & co. from source on
# each start of the server, an agent or a CLI command - seconds, not a fraction of one.
COMPILED := $(VENV)/.compiled

.PHONY: run test bench lint clean sandbox browser images

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip uv

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/uv pip install --python $(BIN)/python --quiet -e .
	touch $(STAMP)

$(TEST_STAMP): $(STAMP)
	$(BIN)/uv pip install --python $(BIN)/python --quiet -e '.[test]'
	touch $(TEST_STAMP)

$(SDK3_STAMP): tests/sdk/v3-requirements.txt | $(BIN)/python
	$(BIN)/uv venv --quiet --allow-existing --python $(BIN)/python $(SDK3)
	$(BIN)/uv pip install --python $(SDK3)/bin/python --quiet --compile-bytecode \
	  -r tests/sdk/v3-requirements.txt
	touch $(SDK3_STAMP)

$(COMPILED): $(STAMP) $(wildcard $(TEST_STAMP))
	-$(BIN)/python -m compileall -q -j 0 $(VENV)/lib >/dev/null
	touch $(COMPILED)

# The job sandbox's tools (docs/security.md), from Debian's packages when missing.
SANDBOX_TOOLS := bwrap slirp4netns setpriv nsenter
SANDBOX_PACKAGES := bubblewrap slirp4netns util-linux

sandbox:
	@missing=""; for tool in $(SANDBOX_TOOLS); do \
	  command -v $$tool >/dev/null 2>&1 || missing="$$missing $$tool"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing the job sandbox's tools:$$missing"; \
	    export DEBIAN_FRONTEND=noninteractive; \
	    apt-get update -qq && apt-get install -y -qq $(SANDBOX_PACKAGES) >/dev/null; \
	  else \
	    echo "warning: the job sandbox needs$$missing: apt-get install $(SANDBOX_PACKAGES)"; \
	    echo "         (as root); until then jobs fail, or run unconfined with"; \
	    echo "         make run ARGS=--unsafe-no-sandbox (see docs/security.md)"; \
	  fi; \
	fi

# The console's browser tests drive Debian's Chromium (never a downloaded browser).
browser:
	@if [ ! -x /usr/bin/chromium ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing chromium for the console's browser tests"; \
	    export DEBIAN_FRONTEND=noninteractive; \
	    apt-get update -qq && apt-get install -y -qq chromium >/dev/null; \
	  else \
	    echo "warning: the console's browser tests need /usr/bin/chromium: apt-get install chromium"; \
	  fi; \
	fi

# Container images are pulled with skopeo (and the tests build some with umoci).
images:
	@if ! command -v skopeo >/dev/null 2>&1 || ! command -v umoci >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing skopeo and umoci for container images"; \
	    export DEBIAN_FRONTEND=noninteractive; \
	    apt-get update -qq && apt-get install -y -qq skopeo umoci >/dev/null; \
	  else \
	    echo "warning: container images need skopeo (and the tests umoci): apt-get install skopeo umoci"; \
	  fi; \
	fi

run: $(STAMP) $(COMPILED) sandbox
	@$(BIN)/python -m compileall -q dockyard >/dev/null
	$(BIN)/dockyard serve $(ARGS)

# End-to-end tests mostly wait on servers and jobs: two workers halve the wall time.
TEST_WORKERS ?= 2

test: $(TEST_STAMP) $(SDK3_STAMP) $(COMPILED) sandbox browser images
	@$(BIN)/python -m compileall -q dockyard >/dev/null
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) $(ARGS)

bench: $(TEST_STAMP) $(COMPILED) sandbox
	@$(BIN)/python -m compileall -q dockyard >/dev/null
	$(BIN)/python -m bench $(ARGS)

lint: $(TEST_STAMP)
	$(BIN)/ruff check dockyard tests bench
	$(BIN)/lint-imports
	$(BIN)/mypy

clean:
	rm -rf $(VENV) .dockyard
