# Everything installs itself: a virtualenv with the Python deps, and the Kafka 3.9.2 jars
# from Maven Central into .cache/. Nothing needs to be installed by hand beyond
# python3 (3.11+), Java 17 and Maven. The tests also render a statement in Debian's
# chromium; `make test` installs it with apt-get when it is missing (as root, or with sudo).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
KAFKA_LIBS := .cache/kafka-3.9.2/libs
export GPULEDGER_KAFKA_LIBS ?= $(CURDIR)/$(KAFKA_LIBS)

.PHONY: setup demo test unit integration faults bench stack-up stack-down kafka-jars chromium clean

setup: $(VENV)/.installed $(KAFKA_LIBS)/.complete

$(VENV)/.installed: pyproject.toml
	@command -v $(PY) >/dev/null || { echo "python3 (3.11+) is required"; exit 1; }
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@

kafka-jars: $(KAFKA_LIBS)/.complete

$(KAFKA_LIBS)/.complete: stack/kafka-pom.xml
	@command -v mvn >/dev/null || { echo "Maven (mvn) is required to fetch the Kafka jars"; exit 1; }
	@command -v java >/dev/null || { echo "Java 17 is required to run the local Kafka broker"; exit 1; }
	mvn --batch-mode --quiet -f stack/kafka-pom.xml dependency:copy-dependencies \
	    -DoutputDirectory=$(CURDIR)/$(KAFKA_LIBS)
	touch $@

demo: setup
	$(BIN)/gpuledger demo

chromium:
	@command -v chromium >/dev/null || command -v chromium-browser >/dev/null || { \
	  sudo=""; [ "$$(id -u)" = 0 ] || sudo="sudo -n"; \
	  if command -v apt-get >/dev/null && { [ -z "$$sudo" ] || sudo -n true 2>/dev/null; }; then \
	    echo "installing Debian's chromium (headless statement rendering in the tests)"; \
	    $$sudo apt-get update -qq && $$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else \
	    echo "chromium is missing: install Debian's chromium package (apt-get install chromium)"; exit 1; \
	  fi; }

test: setup chromium
	$(BIN)/pytest -q -ra

unit: setup
	$(BIN)/pytest -q -ra tests/unit

integration: setup chromium
	$(BIN)/pytest -q -ra tests/integration

faults: setup
	$(BIN)/pytest -q -ra tests/faults

bench: setup
	$(BIN)/python -m gpuledger.bench

stack-up: setup
	$(BIN)/gpuledger stack up

stack-down: setup
	$(BIN)/gpuledger stack down

clean:
	-$(BIN)/gpuledger stack down
	rm -rf .gpuledger .pytest_cache
