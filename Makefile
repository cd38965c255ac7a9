PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: serve test check bench example clean

$(STAMP): pyproject.toml setup.py
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test,spark]'
	touch $(STAMP)

# The embedded defaults: data in ./data/logs, tiered storage on, remote storage in ./data/remote
# (extra settings: make serve ARGS="--override key=value ...").
serve: $(STAMP)
	$(BIN)/tierlog serve --override remote.log.storage.system.enable=true \
		--override rsm.config.uri=file://$(abspath data/remote) $(ARGS)

# kafkajs for the integration tests (tests/integration/js), from the npm registry.
JS_STAMP := tests/integration/js/node_modules/.package-lock.json
$(JS_STAMP): tests/integration/js/package.json tests/integration/js/package-lock.json
	npm ci --prefix tests/integration/js --no-audit --no-fund

test: $(STAMP) $(JS_STAMP)
	scripts/check

example: $(STAMP)
	$(BIN)/python examples/daily_pipeline.py

bench: $(STAMP)
	$(BIN)/python -m pip install -q -e '.[test,spark,bench]'
	$(BIN)/python bench/run.py

clean:
	rm -rf $(VENV) data
