#!/bin/sh
# Installs what rig needs to build and run on a fresh Debian machine (as root):
# clang + libbpf-dev + kernel UAPI headers to compile the BPF programs, and
# libc6-dbg so glibc's internal routines get their true names; nginx (not
# started) for the process-tree tests; chromium for the report.html tests;
# golang-go for `go tool pprof`; websocketd for the live suite;
# prometheus-node-exporter and nodejs for the tests of real Go and node servers;
# Rust's x86_64-unknown-linux-musl target for a static Rust fixture;
# aioquic (PyPI) as an HTTP/3 server not written here.
set -eu
need=""
command -v clang >/dev/null 2>&1 || need="$need clang"
[ -f /usr/include/bpf/bpf_helpers.h ] || need="$need libbpf-dev"
# <sys/sdt.h>: the USDT marker of the probe-cost loop (fixtures/calib/hitloop.c).
[ -f /usr/include/x86_64-linux-gnu/sys/sdt.h ] || need="$need systemtap-sdt-dev"
[ -f /usr/include/linux/bpf.h ] || need="$need linux-libc-dev"
dpkg -s libc6-dbg >/dev/null 2>&1 || need="$need libc6-dbg"
command -v gcc >/dev/null 2>&1 || need="$need gcc"
command -v g++ >/dev/null 2>&1 || need="$need g++"
# The symbolizer tests check against independent tools.
command -v gdb >/dev/null 2>&1 || need="$need gdb"
command -v objdump >/dev/null 2>&1 || need="$need binutils"
# report.html is tested in a real browser, headless.
command -v chromium >/dev/null 2>&1 || need="$need chromium"
# The pprof tests read rig's profiles with `go tool pprof`.
command -v go >/dev/null 2>&1 || [ -x /usr/lib/go/bin/go ] || need="$need golang-go"
# The static-binary tests link the calibration server with musl.
command -v musl-gcc >/dev/null 2>&1 || need="$need musl-tools"
# The MiniDebugInfo fixture compresses its symbol table with xz.
command -v xz >/dev/null 2>&1 || need="$need xz-utils"
# A trial server does its network I/O through io_uring (liburing).
[ -f /usr/include/liburing.h ] || need="$need liburing-dev"
# The process-tree tests measure Debian's nginx (master + workers).
[ -x /usr/sbin/nginx ] || need="$need nginx"
# `rig attach -- COMMAND` reads request counts from these load tools'
# output; its tests run them (redis-server, below, is the redis-benchmark target).
command -v wrk >/dev/null 2>&1 || need="$need wrk"
command -v h2load >/dev/null 2>&1 || need="$need nghttp2-client"
command -v redis-benchmark >/dev/null 2>&1 || need="$need redis-tools"
# The live suite's tests measure a WebSocket server not written here.
command -v websocketd >/dev/null 2>&1 || need="$need websocketd"
# Servers nobody here wrote, measured as Debian ships them: the Prometheus
# node exporter (Go; started by its test on a port it chose, never as a
# service) and node (nodejs).
dpkg -s prometheus-node-exporter >/dev/null 2>&1 || need="$need prometheus-node-exporter"
command -v node >/dev/null 2>&1 || need="$need nodejs"
# Managed runtimes as Debian ships them: the JVM (OpenJDK 17, whose `java`
# runs the Java fixture from its source) beside Debian's python3.11.
[ -x /usr/lib/jvm/java-17-openjdk-amd64/bin/java ] || need="$need openjdk-17-jdk-headless"
# Real servers as Debian ships them, each started by its test on a port
# it chose (never as a service: see policy-rc.d below): haproxy (two
# threads), PostgreSQL with pgbench (a backend forked per connection),
# apache2 (prefork), caddy (Go); bpftrace counts PostgreSQL's mallocs
# independently of rig.
command -v haproxy >/dev/null 2>&1 || need="$need haproxy"
[ -x /usr/lib/postgresql/15/bin/postgres ] || need="$need postgresql"
command -v apache2 >/dev/null 2>&1 || [ -x /usr/sbin/apache2 ] || need="$need apache2"
command -v caddy >/dev/null 2>&1 || need="$need caddy"
command -v bpftrace >/dev/null 2>&1 || need="$need bpftrace"
# The allocator tests: the calibration server linked against Debian's
# jemalloc, mimalloc and tcmalloc_minimal, a CPython extension (headers),
# and Debian's redis-server (jemalloc; started by the test itself on a port
# it chose, never as a service: see policy-rc.d below).
for p in libjemalloc-dev libmimalloc-dev libgoogle-perftools-dev python3-dev redis-server; do
	dpkg -s "$p" >/dev/null 2>&1 || need="$need $p"
done
if [ -n "$need" ]; then
	if [ "$(id -u)" != 0 ]; then
		echo "deps: missing:$need -- run as root, or: apt-get install -y$need" >&2
		exit 1
	fi
	echo "deps: installing$need"
	apt-get update -qq
	# Packages must not start services (nginx would take port 80, redis 6379): a
	# policy-rc.d that denies every start, unless one exists already.
	if [ ! -e /usr/sbin/policy-rc.d ]; then
		printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
		chmod +x /usr/sbin/policy-rc.d
		trap 'rm -f /usr/sbin/policy-rc.d' EXIT
	fi
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $need >/dev/null
fi
# A stack fixture is also built as Rust builds servers for Alpine-style
# images (static, musl inside): Rust's musl target, through rustup. Without
# it that fixture is not built and its test fails, saying so.
if command -v rustup >/dev/null 2>&1 &&
	! rustup target list --installed 2>/dev/null | grep -qx x86_64-unknown-linux-musl; then
	echo "deps: installing Rust's x86_64-unknown-linux-musl target"
	rustup target add x86_64-unknown-linux-musl ||
		echo "deps: could not install x86_64-unknown-linux-musl (its stack test will fail)" >&2
fi
# The HTTP/3 tests measure a QUIC server nobody here wrote: aioquic's, from
# PyPI (Debian 12 packages none; its nginx 1.22 has no http_v3 module).
if ! python3 -c 'import aioquic' >/dev/null 2>&1; then
	echo "deps: installing aioquic (PyPI)"
	python3 -m pip install -q --root-user-action=ignore 'aioquic==1.2.0' ||
		echo "deps: could not install aioquic (the HTTP/3 test against it will fail)" >&2
fi
