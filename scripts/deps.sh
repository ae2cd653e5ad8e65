#!/bin/sh
# Installs what rig needs to build and run on a fresh Debian machine (as root):
# clang + libbpf-dev + kernel UAPI headers to compile the BPF programs, and
# libc6-dbg so glibc's internal routines get their true names.
set -eu
need=""
command -v clang >/dev/null 2>&1 || need="$need clang"
[ -f /usr/include/bpf/bpf_helpers.h ] || need="$need libbpf-dev"
[ -f /usr/include/linux/bpf.h ] || need="$need linux-libc-dev"
dpkg -s libc6-dbg >/dev/null 2>&1 || need="$need libc6-dbg"
command -v gcc >/dev/null 2>&1 || need="$need gcc"
command -v g++ >/dev/null 2>&1 || need="$need g++"
# The symbolizer tests check against independent tools.
command -v gdb >/dev/null 2>&1 || need="$need gdb"
command -v objdump >/dev/null 2>&1 || need="$need binutils"
if [ -n "$need" ]; then
	if [ "$(id -u)" != 0 ]; then
		echo "deps: missing:$need -- run as root, or: apt-get install -y$need" >&2
		exit 1
	fi
	echo "deps: installing$need"
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $need >/dev/null
fi
