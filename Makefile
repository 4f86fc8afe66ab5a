# The two commands (see README.md):
#   make demo   - set up, then plan the example queue on the sandbox (no cloud account)
#   make test   - set up, then run the whole test suite
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin

.PHONY: demo test venv postgres clean

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "fleetctl needs Python 3.11+, found " + sys.version.split()[0]'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	@touch $@

demo: venv
	$(BIN)/fleetctl policy validate policies/example.yaml
	$(BIN)/fleetctl jobs submit examples/jobs.yaml
	$(BIN)/fleetctl plan

# The store tests start a real PostgreSQL; install the server if it is missing.
postgres:
	@command -v initdb >/dev/null 2>&1 || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || { \
	  echo "installing the PostgreSQL server for the store tests"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null; }

test: venv postgres
	$(BIN)/python -m pytest -n 2 --dist loadgroup -q

clean:
	rm -rf $(VENV) .fleetctl .pytest_cache .hypothesis
