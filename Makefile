# The two commands of the README: `make demo` and `make test`. Both install
# their prerequisites first (scripts/deps.sh; needs root, as rig itself does).
CARGO ?= cargo

.PHONY: deps build demo test lint
deps:
	@sh scripts/deps.sh

build: deps
	$(CARGO) build --release --workspace

# rig's main job on the bundled default target: a short scenario matrix
# against rig-peer (h1, h2c, h2 over TLS), clean and counted passes, into a
# new directory under target/rig-demo/; it ends with the path of the run's
# report.html (open it in a browser).
demo: build
	@out=target/rig-demo/$$(date +%Y%m%d-%H%M%S); \
	./target/release/rig run --target config/targets/peer.toml --matrix config/demo.toml \
		--out $$out; rc=$$?; \
	echo "report.html: $$(pwd)/$$out/report.html"; exit $$rc

lint: deps
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

test: lint
	$(CARGO) test --workspace
