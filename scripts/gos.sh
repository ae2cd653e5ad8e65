#!/usr/bin/env bash
# The Go toolchains of the Go matrix (harness/tests/suite/go_matrix.rs):
# every Go Debian's archive carries, fetched once into target/go/<version>/
# the way scripts/kernels.sh fetches kernels: `apt-get download` through a
# private apt configuration (its own sources list and lists directory) and
# `dpkg -x`, so this machine's apt sources are never edited and nothing is
# installed. The Go toolchain is statically linked: `<dir>/usr/lib/go-1.NN/
# bin/go` runs from there with GOROOT set and GOTOOLCHAIN=local.
#
#   scripts/gos.sh [VERSION ...]      (default: every version below)
#
# Debian's own Go (golang-go, 1.19 on Debian 12) is what scripts/deps.sh
# installs; it is the matrix's 1.19 and is not fetched here. A version it
# cannot fetch is named and the script fails (exit 1): the matrix counts a
# missing Go as a failure, never a skip.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
CACHE=$ROOT/target/go

# Debian suite that carries each golang-1.NN (bookworm-backports: 1.21 to
# 1.23; trixie: 1.24; sid: 1.26 and 1.27).
declare -A SUITE=([1.21]=bookworm-backports [1.22]=bookworm-backports [1.23]=bookworm-backports
	[1.24]=trixie [1.26]=sid [1.27]=sid)
VERSIONS=${*:-1.21 1.22 1.23 1.24 1.26 1.27}

[ "$(id -u)" = 0 ] || { echo "gos: needs root (apt-get download through a private configuration)" >&2; exit 2; }

# One private apt configuration per suite, updated once per run.
declare -A APTDIR=()
apt_for() {
	local suite=$1 uri t
	if [ -z "${APTDIR[$suite]:-}" ]; then
		uri=$(sed -n 's/^URIs: //p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)
		uri=${uri:-http://deb.debian.org/debian}
		t=$(mktemp -d /tmp/rig-gos-apt.XXXXXX)
		mkdir -p "$t/lists/partial" "$t/cache/archives/partial" "$t/parts"
		echo "deb $uri $suite main" > "$t/sources.list"
		APTDIR[$suite]=$t
		apt-get "${APT[@]/@/$t}" update -qq
	fi
}
APT=(-o "Dir::Etc::SourceList=@/sources.list" -o "Dir::Etc::SourceParts=@/parts"
	-o "Dir::State::Lists=@/lists" -o "Dir::Cache=@/cache" -o "Dir::State::status=/dev/null"
	-o APT::Sandbox::User=root)

fetch_go() {
	local v=$1 suite=${SUITE[$1]:-} t dl
	[ -n "$suite" ] || { echo "gos: no Debian suite known for Go $v (known: ${!SUITE[*]})" >&2; return 1; }
	[ -x "$CACHE/$v/usr/lib/go-$v/bin/go" ] && return 0
	apt_for "$suite"
	t=${APTDIR[$suite]}
	dl=$(mktemp -d "$t/dl.XXXXXX")
	echo "gos: fetching golang-$v-go and golang-$v-src from $suite"
	(cd "$dl" && apt-get "${APT[@]/@/$t}" download -qq "golang-$v-go" "golang-$v-src") || {
		echo "gos: Go $v: apt-get download golang-$v-go golang-$v-src from $suite failed" >&2
		return 1
	}
	rm -rf "$CACHE/$v.tmp"; mkdir -p "$CACHE/$v.tmp"
	for d in "$dl"/*.deb; do dpkg -x "$d" "$CACHE/$v.tmp"; done
	"$CACHE/$v.tmp/usr/lib/go-$v/bin/go" version >/dev/null
	rm -rf "$CACHE/$v"; mv "$CACHE/$v.tmp" "$CACHE/$v"
}

rc=0
for v in $VERSIONS; do
	fetch_go "$v" || rc=1
done
for t in "${APTDIR[@]}"; do rm -rf "$t"; done
exit $rc
