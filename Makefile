# Logbook — build, test, demo and benchmarks. Every target installs what a bare machine lacks first.
SHELL := /bin/bash
SWIFT ?= swift
DEMO_STORE ?= ./demo/store
EVCTL_DEBUG := .build/debug/evctl

.PHONY: deps deps-core build test check generate demo hub-demo hub-load bench bench-cli bench-ui fixtures fuzz fuzz-build clean

# System libraries and tools from Debian (scripts/deps.sh says which, and installs them as root):
# everything `make test`, the demo and the benchmarks use, or only what `make check` needs.
deps:
	@bash scripts/deps.sh all

deps-core:
	@bash scripts/deps.sh core

build: deps
	$(SWIFT) build --build-tests

# Everything, as CI runs it: PostgreSQL clusters, Chromium, a tmpfs mounted for the full-disk drill (root).
test: build
	$(SWIFT) test

# The fast lane: no root, no servers, no browser. Skips the suites that start PostgreSQL (HubTests,
# the hub nodes of ServeCLITests), drive Chromium (BrowserTests) or mount a filesystem (DiskFullTests).
CHECK_SKIP := --skip HubTests --skip BrowserTests --skip DiskFullTests --skip twoHubNodesOnPostgreSQLAndOneKilled
check: deps-core
	$(SWIFT) build --build-tests
	$(SWIFT) test --skip-build $(CHECK_SKIP)

demo: deps
	$(SWIFT) build --product evctl
	@rm -rf $(DEMO_STORE) && mkdir -p $$(dirname $(DEMO_STORE))
	@echo "== evctl init"
	@$(EVCTL_DEBUG) init --store $(DEMO_STORE)
	@echo "== evctl sample --count 2000 | evctl append"
	@$(EVCTL_DEBUG) sample --count 2000 --seed 42 > $$(dirname $(DEMO_STORE))/sample.ndjson
	@$(EVCTL_DEBUG) append --store $(DEMO_STORE) $$(dirname $(DEMO_STORE))/sample.ndjson
	@echo "== evctl log --limit 5"
	@$(EVCTL_DEBUG) log --store $(DEMO_STORE) --limit 5
	@echo "== evctl log --entity tag --limit 3 --json"
	@$(EVCTL_DEBUG) log --store $(DEMO_STORE) --entity tag --limit 3 --json
	@echo "== evctl items --limit 5"
	@$(EVCTL_DEBUG) items --store $(DEMO_STORE) --limit 5
	@echo "== evctl items --search 'milk bud' --limit 3"
	@$(EVCTL_DEBUG) items --store $(DEMO_STORE) --search "milk bud" --limit 3
	@echo "== evctl history item <the first item>"
	@$(EVCTL_DEBUG) history --store $(DEMO_STORE) item $$($(EVCTL_DEBUG) items --store $(DEMO_STORE) --limit 1 --json | sed -E 's/^\{"id":"([^"]+)".*/\1/')
	@echo "== evctl status"
	@$(EVCTL_DEBUG) status --store $(DEMO_STORE)
	@echo "== evctl verify --deep"
	@$(EVCTL_DEBUG) verify --deep --store $(DEMO_STORE)
	@echo "== a second replica: init, its own edits, then evctl sync with the first (by path)"
	@rm -rf $(DEMO_STORE)-2
	@$(EVCTL_DEBUG) init --store $(DEMO_STORE)-2
	@$(EVCTL_DEBUG) sample --count 300 --seed 7 | $(EVCTL_DEBUG) append --store $(DEMO_STORE)-2
	@$(EVCTL_DEBUG) sync --store $(DEMO_STORE)-2 $(DEMO_STORE)
	@echo "== both replicas: same cursor, same projection"
	@$(EVCTL_DEBUG) cursor --store $(DEMO_STORE); $(EVCTL_DEBUG) cursor --store $(DEMO_STORE)-2
	@a=$$($(EVCTL_DEBUG) items --store $(DEMO_STORE) --json --include-deleted --limit 1000000 | md5sum | cut -c1-16); \
	 b=$$($(EVCTL_DEBUG) items --store $(DEMO_STORE)-2 --json --include-deleted --limit 1000000 | md5sum | cut -c1-16); \
	 echo "items digest: $$a / $$b"; [ "$$a" = "$$b" ] && echo "projections agree"
	@bash scripts/demo-http.sh $(EVCTL_DEBUG) $(DEMO_STORE)
	@echo "== evctl inspect: the audit pages (open the URL it prints in a browser; here curl reads two)"
	@$(EVCTL_DEBUG) inspect --store $(DEMO_STORE) --port-file $$(dirname $(DEMO_STORE))/inspect.port > /dev/null & pid=$$!; \
	 for _ in $$(seq 1 100); do [ -s $$(dirname $(DEMO_STORE))/inspect.port ] && break; sleep 0.05; done; \
	 url=http://127.0.0.1:$$(cat $$(dirname $(DEMO_STORE))/inspect.port)/ui; echo "$$url/"; \
	 curl -s "$$url/" | grep -o '<a class="origin"[^>]*><code>[^<]*</code>' | sed -E 's/.*<code>(.*)<\/code>/  origin \1/'; \
	 curl -s "$$url/log?entity=tag" | grep -c '<tr id="e-' | sed 's/^/  tag events on the first page of \/ui\/log?entity=tag: /'; \
	 kill $$pid; rm -f $$(dirname $(DEMO_STORE))/inspect.port

# Benchmarks: package-benchmark suites (release build) and the end-to-end CLI comparison.
# A hub on PostgreSQL: a local cluster in demo/hub/pg, two serve nodes, three users' replicas.
hub-demo: deps
	$(SWIFT) build --product evctl
	bash scripts/hub-demo.sh $(EVCTL_DEBUG) ./demo/hub

# Many simulated replicas against two hub nodes on PostgreSQL, then a store's hub (docs/SCALING.md);
# the last line is the store's events/s as a ratio to PostgreSQL's in the same run (`make bench`
# runs it with 1,000 replicas).
HUB_LOAD_REPLICAS ?= 10000
HUB_LOAD_SECONDS ?= 60
# `--watch`: every replica also holds a watch stream open (docs/SCALING.md, "Live followers").
HUB_LOAD_FLAGS ?=
hub-load: deps
	$(SWIFT) build -c release --product hub-load
	.build/release/hub-load --replicas $(HUB_LOAD_REPLICAS) --seconds $(HUB_LOAD_SECONDS) $(HUB_LOAD_FLAGS)

bench: deps
	cd Benchmarks && $(SWIFT) package --allow-writing-to-package-directory benchmark --target LogBenchmarks --target ProjectionBenchmarks --target ShippingBenchmarks --no-progress
	$(MAKE) bench-cli
	$(MAKE) bench-ui
	$(MAKE) hub-load HUB_LOAD_REPLICAS=1000 HUB_LOAD_SECONDS=60
	$(MAKE) hub-load HUB_LOAD_REPLICAS=1000 HUB_LOAD_SECONDS=60 HUB_LOAD_FLAGS=--watch

bench-cli: deps
	$(SWIFT) build -c release --product evctl
	bash scripts/bench-cli.sh

# The inspector's pages on a 1M-event store with thousands of conflicts (docs/INSPECT.md).
bench-ui: deps
	$(SWIFT) build -c release --product evctl
	bash scripts/bench-ui.sh

# Fuzzing: every decoder of outside bytes under libFuzzer (Fuzz/, its own package), FUZZ_SECONDS
# per target (CI: 30), corpora seeded from fixtures/; a crash fails the run and leaves its input in
# .build-fuzz/artifacts/ (keep it in fixtures/fuzz/<target>/: FuzzFixtureTests replays it).
FUZZ_SECONDS ?= 60
fuzz-build: deps
	cd Fuzz && $(SWIFT) build -c debug -Xswiftc -sanitize=fuzzer -Xswiftc -parse-as-library --scratch-path ../.build-fuzz

fuzz: build fuzz-build
	FUZZ_SECONDS=$(FUZZ_SECONDS) EVCTL=$(EVCTL_DEBUG) bash scripts/fuzz.sh

# Rewrites fixtures/ after a deliberate format change (then review the diff and docs/FORMAT.md).
fixtures: build
	LOGBOOK_WRITE_FIXTURES=1 $(SWIFT) test --filter FixtureTests

# Rewrites Sources/Logbook/Entities.swift from DomainSchema after a change to the domain (a field is
# one FieldSpec line there); EntitySourceTests fails until this has been run.
generate: deps-core
	$(SWIFT) run entity-source Sources/Logbook/Entities.swift

clean:
	rm -rf .build .build-fuzz demo
