# Every target installs what it needs into .venv first (pinned in requirements/dev.txt).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
export JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION := 1
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 20

.PHONY: install run test lint typecheck unit reference synth deploy bench faults clean

$(STAMP): pyproject.toml requirements/dev.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements/dev.txt
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps -e .
	touch $(STAMP)

install: $(STAMP)

run: install ## the whole gateway on http://127.0.0.1:$${GATEWAY_PORT:-8080} with an embedded AWS
	$(BIN)/hermes-gateway local

lint: install
	$(BIN)/ruff check .

typecheck: install
	$(BIN)/mypy

test: lint typecheck ## every check CI runs: lint, types, unit, integration, e2e and infra tests
	$(BIN)/python -m pytest -n 2 --dist loadfile

unit: install
	$(BIN)/python -m pytest tests/unit -q

reference: install ## rewrite docs/configuration.md from the settings' declarations (a test fails when it is stale)
	$(BIN)/python -m hermes_gateway.settings.reference > docs/configuration.md

synth: install ## the real stack to cdk.out, offline, layer bundled without docker, cdk-nag checked
	$(BIN)/python infra/app.py

deploy: install ## check the prerequisites (config, Node.js, AWS credentials, bootstrap), then cdk deploy
	$(BIN)/hermes-gateway deploy

bench: install ## cost per message, idle cost, cold starts, ack path, hops, local throughput (bench/results/latest.json)
	$(BIN)/python bench/run_all.py

faults: install ## the whole gateway under load with injected faults, then delivery under platform faults (bench/results/faults-latest.json, delivery-faults-latest.json)
	$(BIN)/python bench/faults.py --size full
	$(BIN)/python bench/delivery_faults.py

clean:
	rm -rf cdk.out .pytest_cache .mypy_cache .ruff_cache
