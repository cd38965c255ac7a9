PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: serve cluster test check bench example clean

$(STAMP): pyproject.toml setup.py
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test,spark]'
	touch $(STAMP)

# The embedded defaults: data in ./data/logs, tiered storage on, remote storage in ./data/remote,
# the web console on http://127.0.0.1:8080 (loopback only: it has no authentication)
# (extra settings: make serve ARGS="--override key=value ...").
serve: $(STAMP)
	$(BIN)/tierlog serve --override remote.log.storage.system.enable=true \
		--override rsm.config.uri=file://$(abspath data/remote) \
		--override console.listener=http://127.0.0.1:8080 $(ARGS)

# A local cluster: ZooKeeper on 127.0.0.1:2181 and brokers 1-3 on 127.0.0.1:9092-9094, data in
# ./data/cluster; Ctrl-C stops them all (extra settings: make cluster ARGS="--override k=v").
cluster: $(STAMP)
	$(BIN)/tierlog cluster --data-dir data/cluster $(ARGS)

# kafkajs for the integration tests (tests/integration/js), from the npm registry.
JS_STAMP := tests/integration/js/node_modules/.package-lock.json
$(JS_STAMP): tests/integration/js/package.json tests/integration/js/package-lock.json
	npm ci --prefix tests/integration/js --no-audit --no-fund

# quixstreams in a venv of its own (its confluent-kafka pin clashes with ours), from PyPI; the quix
# test makes it too when it is missing (tests/integration/quix_venv.py).
QUIX_STAMP := .cache/quixstreams-venv/.requirements
$(QUIX_STAMP): tests/integration/quix/requirements.txt $(STAMP)
	$(BIN)/python -m tests.integration.quix_venv
	touch $@

test: $(STAMP) $(JS_STAMP) $(QUIX_STAMP)
	scripts/check

example: $(STAMP)
	$(BIN)/python examples/daily_pipeline.py

bench: $(STAMP)
	$(BIN)/python -m pip install -q -e '.[test,spark,bench]'
	$(BIN)/python bench/run.py

clean:
	rm -rf $(VENV) data .cache
