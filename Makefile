# The two commands of the README: `make demo` and `make test`. Both install
# their prerequisites first (scripts/deps.sh; needs root, as rig itself does).
CARGO ?= cargo

.PHONY: deps build demo test lint kernels gos
deps:
	@sh scripts/deps.sh

build: deps
	$(CARGO) build --release --workspace

# rig's main job on the bundled default target: a short scenario matrix
# against rig-peer (h1, h2c, h2 over TLS), clean and counted passes, into a
# new directory under target/rig-demo/; it ends with the path of the run's
# report.html (open it in a browser) when rig wrote one, and, when chromium
# is installed, a screenshot of it in target/rig-demo/report.png. The exit
# code is rig's.
demo: build
	@out=target/rig-demo/$$(date +%Y%m%d-%H%M%S); \
	./target/release/rig run --target config/targets/peer.toml --matrix config/demo.toml \
		--out $$out; rc=$$?; \
	page=$$(pwd)/$$out/report.html; \
	if [ -f "$$page" ]; then \
		if command -v chromium >/dev/null 2>&1; then \
			shot=$$(pwd)/target/rig-demo/report.png; prof=$$(mktemp -d); rm -f "$$shot"; \
			chromium --headless --no-sandbox --disable-gpu --disable-background-networking \
				--disable-component-update --disable-sync --no-first-run \
				--user-data-dir="$$prof" --window-size=1200,1600 --screenshot="$$shot" \
				"file://$$page" >/dev/null 2>&1; \
			rm -rf "$$prof"; \
			if [ -f "$$shot" ]; then echo "screenshot: $$shot"; \
			else echo "screenshot: chromium wrote none"; fi; \
		fi; \
		echo "report.html: $$page"; \
	fi; \
	exit $$rc

lint: deps
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

# The Go matrix (harness/tests/suite/go_matrix.rs: goserver built by every
# Go the machine can get, four ways each, and measured) runs alone first: its
# builds take both cores for minutes, and the suite's timing-watching tests
# (CPU samples against the scheduler's time, latency under a stall) must not
# run beside them. Then the suite without it, then the kernel matrix.
test: lint gos
	$(CARGO) test -p rig --test integration -- suite::go_matrix --test-threads 1
	$(CARGO) test --workspace -- --skip suite::go_matrix
	$(MAKE) kernels

# The Go matrix's toolchains (harness/tests/suite/go_matrix.rs): every Go
# Debian's archive carries beyond its own 1.19 (bookworm-backports' 1.21 to
# 1.23, trixie's 1.24, sid's 1.26 and 1.27), unpacked once under
# target/go/ through a private apt configuration (scripts/gos.sh), as the
# kernel matrix fetches its kernels. A Go it cannot fetch fails here.
gos: deps
	bash scripts/gos.sh

# The kernel matrix: a subset of the privileged tests (every family's exact
# calibration counts, the stack fixtures, one process tree) inside Debian's
# 5.10, 6.1 and 6.12 kernels under QEMU (scripts/kernels.sh; KERNELS="6.1"
# picks, TESTS="filter ..." overrides the subset). `make test` runs it after
# the host suite, not beside it: the guests are emulated (TCG) on the same
# cores. The guests run one at a time (KERNEL_JOBS): three side by side on
# 2 cores took ~570 s each and failed a test in the 6.1 guest that passes
# there alone (343 s); one at a time costs ~450 s more in all.
KERNELS ?= 5.10 6.1 6.12
KERNEL_JOBS ?= 1
kernels: deps
	sh -c 'exec bash scripts/kernels.sh --kernels "$(KERNELS)" --jobs $(KERNEL_JOBS) $${TESTS:+-- $$TESTS}'
