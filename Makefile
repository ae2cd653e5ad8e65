# The two commands of the README: `make demo` and `make test`. Both install
# their prerequisites first (scripts/deps.sh; needs root, as rig itself does).
CARGO ?= cargo

.PHONY: deps build demo test lint
deps:
	@sh scripts/deps.sh

build: deps
	$(CARGO) build --release --workspace

# rig's main job on the bundled default target.
demo: build
	./target/release/rig demo

lint: deps
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

test: lint
	$(CARGO) test --workspace
