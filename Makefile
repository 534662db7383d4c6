# Two commands set up everything on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
CONFIG ?= deploy/server.properties

.PHONY: run cluster test test-slow fuzz bench clean kcat kafka-jars librdkafka-suite

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -e .
	touch $@

$(VENV)/.test-installed: $(VENV)/.installed
	$(PIP) install -q -e '.[test,spark]'
	touch $@

run: $(VENV)/.installed
	$(VENV)/bin/strata broker --config $(CONFIG)

# Three brokers (node ids 1-3 on 9092-9094, metrics 9101-9103) from deploy/cluster/broker-N.properties, data in
# ./data/cluster; Ctrl-C stops them. A broker that dies is not restarted (docs/operations.md).
cluster: $(VENV)/.installed
	$(PY) deploy/cluster/run_cluster.py

kcat:
	@command -v kcat >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq kcat; \
	  else sudo apt-get update -qq && sudo apt-get install -y -qq kcat; fi; }

# Apache Kafka's pinned jars (deploy/apache-kafka/pom.xml) into ~/.m2, their classpath into .cache/ (no-op when current).
kafka-jars: $(VENV)/.test-installed
	PYTHON=$(PY) deploy/apache-kafka/resolve.sh

# librdkafka's own test-runner (its transaction tests run in the slow suite, tests/kafka/test_librdkafka_suite.py, which
# builds it on first use): Debian's pinned source built once under .cache/librdkafka/ (no-op when built).
librdkafka-suite: $(VENV)/.test-installed kafka-jars
	$(PY) -m tests.librdkafka_suite build

# Everything but the suites marked slow (kill -9 rounds, long randomized runs): those are `make test-slow`, and CI
# (.ci/run) runs both.
test: $(VENV)/.test-installed kcat kafka-jars
	$(PY) -m pytest -q -rs --durations=25 -m "not slow" tests

test-slow: $(VENV)/.test-installed kcat kafka-jars
	$(PY) -m pytest -q -rs --durations=40 -m slow tests

# Coverage-guided fuzzing of the request decoders and the record-batch parser, longer than the slow suite's run;
# a crash leaves its input in .cache/fuzz/. FUZZ_SECONDS per target.
FUZZ_SECONDS ?= 600
fuzz: $(VENV)/.test-installed
	mkdir -p .cache/fuzz
	for t in requests batches; do STRATA_FUZZ_CORPUS=.cache/fuzz/$$t $(PY) tests/fuzz/fuzz_parsers.py $$t \
	  -max_total_time=$(FUZZ_SECONDS) -rss_limit_mb=2048 -artifact_prefix=.cache/fuzz/ || exit 1; done

bench: $(VENV)/.test-installed kafka-jars
	$(PY) bench/produce_fetch.py

clean:
	rm -rf $(VENV) data .cache
