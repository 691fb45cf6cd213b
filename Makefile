# Everything installs itself: a virtualenv with the Python deps, and the Kafka 3.9.2 jars
# from Maven Central into .cache/. Nothing needs to be installed by hand beyond
# python3 (3.11+) with its headers, a C compiler (two C modules), Java 17 and
# Maven. The tests also use Debian's chromium, promtool and amtool; `make test` installs them
# with apt-get when missing (as root, or with sudo).
# The Kubernetes tests run a real etcd and kube-apiserver, built from pinned Go modules
# (stack/etcd, stack/kubernetes; Go 1.26+) into .cache/kubernetes the first time. The FOCUS
# export is checked by the FinOps Foundation's focus-validator, installed into
# .cache/focus-validator under a Python 3.12+ (on PATH, or the newest pyenv one).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
KAFKA_LIBS := .cache/kafka-3.9.2/libs
export GPULEDGER_KAFKA_LIBS ?= $(CURDIR)/$(KAFKA_LIBS)
GO ?= $(shell command -v go || echo /usr/local/go/bin/go)
KUBE_BIN := .cache/kubernetes
export GPULEDGER_KUBE_BIN ?= $(CURDIR)/$(KUBE_BIN)
FOCUS_VENV := .cache/focus-validator
export GPULEDGER_FOCUS_VALIDATOR ?= $(CURDIR)/$(FOCUS_VENV)/bin/focus-validator
PY312 ?= $(shell for p in python3.13 python3.12 $(HOME)/.pyenv/versions/3.1[2-9]*/bin/python3; do \
          $$p -c 'import sys; assert sys.version_info >= (3, 12)' 2>/dev/null && { echo $$p; break; }; done)

.PHONY: setup demo test unit integration faults bench bench-fleet bench-hotpath bench-parse-floor bench-ledger stack-up stack-down kafka-jars kube-bins focus-validator tools test-clickhouse-server clean env

setup: $(VENV)/.installed $(KAFKA_LIBS)/.complete

$(VENV)/.installed: pyproject.toml streams/_avro_c.c streams/_avro_write.c streams/_avro_read.c streams/_avro_c.h domain/_dcgm_walk.c domain/_dcgm_samples.c domain/_dcgm_table.c domain/_dcgm_walk.h domain/_facts.c domain/_fact_id.c domain/_capacity_fact.c domain/_capacity_segment.c domain/_capacity_owner.c domain/_facts.h domain/_fields.h domain/_samples.c domain/_health.c domain/_health_bodies.c domain/_health.h
	@command -v $(PY) >/dev/null || { echo "python3 (3.11+) is required"; exit 1; }
	@printf '#include <openssl/evp.h>\n' | $${CC:-cc} -E - >/dev/null 2>&1 || { \
	  echo "OpenSSL's headers are required to build domain/_facts.c (Debian: apt-get install libssl-dev)"; exit 1; }
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

# etcd v3.7.3 (etcd, etcdctl) and Kubernetes v1.37.2 (kube-apiserver, kubectl), for the
# Kubernetes tests: built once, then reused (cold, on 2 cores: about 1.5 min for etcd and 5-13 min
# for Kubernetes, 2.5 GB of RAM, 1 GB of modules into the Go module cache and 3 GB of Go build
# cache). The versions are pinned by the go.mod/go.sum files; the mains are the projects' own.
kube-bins: $(KUBE_BIN)/etcd $(KUBE_BIN)/kube-apiserver

$(KUBE_BIN)/etcd: stack/etcd/go.mod stack/etcd/go.sum
	@[ -x "$(GO)" ] || { echo "Go 1.26+ is required to build etcd and kube-apiserver"; exit 1; }
	cd stack/etcd && $(GO) build -buildvcs=false -trimpath -ldflags "-s -w" -o $(CURDIR)/$(KUBE_BIN)/ ./cmd/etcd ./cmd/etcdctl

KUBE_VERSION = $(shell awk '$$1 == "k8s.io/kubernetes" && $$2 ~ /^v/ {print $$2; exit}' stack/kubernetes/go.mod)
KUBE_LDFLAGS = -s -w $(foreach p,k8s.io/component-base/version k8s.io/client-go/pkg/version,-X $(p).gitVersion=$(KUBE_VERSION))
$(KUBE_BIN)/kube-apiserver: stack/kubernetes/go.mod stack/kubernetes/go.sum
	@[ -x "$(GO)" ] || { echo "Go 1.26+ is required to build etcd and kube-apiserver"; exit 1; }
	cd stack/kubernetes && $(GO) build -buildvcs=false -trimpath -ldflags "$(KUBE_LDFLAGS)" \
	    -o $(CURDIR)/$(KUBE_BIN)/ ./cmd/kube-apiserver ./cmd/kubectl

focus-validator: $(FOCUS_VENV)/.installed

$(FOCUS_VENV)/.installed: stack/focus-validator.txt
	@[ -n "$(PY312)" ] || { echo "focus-validator needs Python 3.12+: put python3.12 on PATH, or PY312=/path/to/python3.12"; exit 1; }
	$(PY312) -m venv $(FOCUS_VENV)
	$(FOCUS_VENV)/bin/pip install --quiet --upgrade pip
	$(FOCUS_VENV)/bin/pip install --quiet -r stack/focus-validator.txt
	touch $@

demo: setup
	$(BIN)/gpuledger demo

# Debian packages the tests run: chromium (renders a statement), promtool and amtool (check
# and unit-test the alert rules and the Alertmanager routing), openssl (the certificates of
# the broker the SASL over TLS test starts).
TOOLS := chromium:chromium promtool:prometheus amtool:prometheus-alertmanager openssl:openssl
tools:
	@missing=""; for t in $(TOOLS); do command -v $${t%%:*} >/dev/null || missing="$$missing $${t#*:}"; done; \
	[ -z "$$missing" ] || { \
	  sudo=""; [ "$$(id -u)" = 0 ] || sudo="sudo -n"; \
	  if command -v apt-get >/dev/null && { [ -z "$$sudo" ] || sudo -n true 2>/dev/null; }; then \
	    echo "installing Debian's$$missing (used by the tests)"; \
	    $$sudo apt-get update -qq && $$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	  else \
	    echo "missing Debian packages:$$missing (apt-get install$$missing)"; exit 1; \
	  fi; }

test: setup tools kube-bins focus-validator
	$(BIN)/pytest -q -ra

unit: setup tools
	$(BIN)/pytest -q -ra tests/unit

integration: setup tools kube-bins focus-validator
	$(BIN)/pytest -q -ra tests/integration

test-clickhouse-server: setup
	@[ -n "$$GPULEDGER_TEST_CLICKHOUSE_URL" ] || { echo "set GPULEDGER_TEST_CLICKHOUSE_URL=http://admin:PASSWORD@HOST:8123 (a ClickHouse server, 20.4+)"; exit 1; }
	$(BIN)/pytest -q -ra -m clickhouse_server tests/integration/test_tenant_isolation.py

faults: setup
	$(BIN)/pytest -q -ra tests/faults

bench: setup
	$(BIN)/python -m gpuledger.bench

# A generated fleet (nodes of 8 H100s, 10-s scrapes) through the raw loop, 1 and 2 workers (with the
# sink beside them, and apart: the workers to the end of the sources, then the sink alone), replay
# with 1 and 2 processes, then FLEET_LIVE_MIN minutes live for freshness (0: none);
# FLEET_GPUS=1024 FLEET_HOURS=24 is the acceptance size (2 cores: 3-9 min a worker run, ~50 min in all).
FLEET_GPUS ?= 1024
FLEET_HOURS ?= 1
FLEET_LIVE_MIN ?= 5
FLEET_MODES ?= together,apart
bench-fleet: setup
	$(BIN)/python -m gpuledger.bench.fleet --gpus $(FLEET_GPUS) --hours $(FLEET_HOURS) --cadence-s 10 --workers 1,2 \
		--modes $(FLEET_MODES) --replay 1,2 --live-minutes $(FLEET_LIVE_MIN)

# The worker's own CPU per device sample (parse, attribute, build and encode facts), in one
# process without a broker: what a change to the hot path moves.
bench-hotpath: setup
	$(BIN)/python -m gpuledger.bench.hotpath --gpus 64 --hours 1

# What a scrape costs in native code at the least (lines split, series hashed, values read and kept
# by device, each device's facts made and encoded; bench/parse_floor.c built with cc), beside the
# engine's parse of the same scrapes.
bench-parse-floor: setup
	$(BIN)/python -m gpuledger.bench.parse_floor --gpus 1024 --hours 0.25 --reps 10

# What closing a month holds: a fleet's facts generated in the engine, the period's ledger
# document built from them in a process of its own (time, peak resident size, hash).
LEDGER_GPUS ?= 1024
LEDGER_HOURS ?= 24
bench-ledger: setup
	$(BIN)/python -m gpuledger.bench.ledger_read --gpus $(LEDGER_GPUS) --hours $(LEDGER_HOURS) \
		--store .gpuledger/bench-ledger-$(LEDGER_GPUS)x$(LEDGER_HOURS)

# The secrets of the compose stack (docker-compose.yml requires every one): random values,
# written once to .env with mode 0600 and never overwritten (.gitignore keeps it out of git).
# Hex: safe unquoted in a URL (the DSNs), XML (the image writes the admin password into
# users.d) and a command line (a leading "-" would read as an option).
# To change them, remove .env and the stack's volumes, then run `make .env` again.
STACK_SECRETS := CLICKHOUSE_ADMIN_PASSWORD CLICKHOUSE_WORKER_PASSWORD CLICKHOUSE_GRAFANA_PASSWORD \
                 CLICKHOUSE_FINOPS_PASSWORD CLICKHOUSE_APPROVER_PASSWORD GRAFANA_ADMIN_PASSWORD
env: .env
.env:
	@$(PY) -c 'import os, secrets, sys; fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600); \
	  os.write(fd, "".join(f"{name}={secrets.token_hex(24)}\n" for name in sys.argv[2:]).encode()); os.close(fd)' \
	  $@ $(STACK_SECRETS)
	@echo "wrote $@ (mode 0600): random secrets for docker compose"

stack-up: setup
	$(BIN)/gpuledger stack up

stack-down: setup
	$(BIN)/gpuledger stack down

clean:
	-$(BIN)/gpuledger stack down
	rm -rf .gpuledger .pytest_cache
