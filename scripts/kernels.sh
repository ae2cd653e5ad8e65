#!/usr/bin/env bash
# The kernel matrix: rig's privileged tests (a chosen subset) run inside
# Debian's own kernels booted under QEMU, with this machine's root
# filesystem shared over 9p, as aya (`cargo xtask integration-test vm`),
# libbpf (vmtest) and cilium/ebpf (vimto) test theirs.
#
#   scripts/kernels.sh [--kernels "5.10 6.1 6.12"] [--jobs N] [--smp N]
#                      [--mem SIZE] [--timeout S] [-- TEST-FILTER...]
#   scripts/kernels.sh --run KERNEL -- COMMAND...   (one command in one kernel)
#
# Without filters the subset is MATRIX_TESTS below: every family's exact
# calibration counts, the stack fixtures' whole stacks, one process tree.
# It installs what it needs (qemu-system-x86, busybox-static) and fetches
# each kernel package with `apt-get download` through a private apt
# configuration (its own sources list and lists directory), so this
# machine's apt sources are never edited and no kernel is installed on it:
# the packages are unpacked under target/kernels/. Needs root (as rig does).
#
# Facts it is built on (this machine):
# - /dev/kvm is a paravirtual nested KVM that stock kernels hang under right
#   after "Probing EDD"; TCG works (`-accel tcg,thread=single -cpu max`).
# - Multi-threaded TCG (thread=multi) is not: a guest kernel patching code
#   that its other vCPU runs (uprobes writing int3 into libc's text, static
#   keys) died with `Oops: int3` (6.12) or locked up both vCPUs (5.10, the
#   locks test). One host thread per guest runs its vCPUs interleaved.
# - Debian's initramfs has no 9p modules, so the guest boots a small one:
#   busybox-static plus virtio and 9p modules, inserted in dependency order.
# - The kernel hands unknown `name=value` boot parameters to init as
#   environment variables: that is how the guest finds its work directory.
# - TCG's TSCs look unsynchronized to the guest, which then falls back to
#   the hpet clocksource; the vDSO cannot read hpet, so every
#   clock_gettime becomes a real syscall and the syscall counts stop being
#   the host's. `tsc=reliable clocksource=tsc` keeps the vDSO working.
# - The host suite is built once (`cargo test --no-run`); the guests run
#   that test binary, never cargo.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

# Debian suite and metapackage of each kernel of the matrix: the newest
# 5.10 (Debian 11), 6.1 (Debian 12) and 6.12 (Debian 12 backports, Debian 13).
declare -A SUITE=([5.10]=bullseye [6.1]=bookworm [6.12]=bookworm-backports)
KERNELS="5.10 6.1 6.12"
# Every family's exact calibration counts (syscalls, alloc, copy, locks,
# faults, sched), on-CPU samples against the scheduler's CPU time, the
# stack fixtures' stacks (C, C++, Rust),
# one process tree (nginx, master and worker), the same kernel with
# its BTF hidden (as a kernel built without it), and the probes a user
# names (a semaphore-guarded USDT marker of Debian's python, through a BPF
# link with its cookie from 5.15 and by address before; functions, and
# their time through recursion, calls paired by thread and stack pointer).
MATRIX_TESTS=(
	attach_calib::counts_exact_allocations_per_request_at_each_call_site
	attach_calib::counts_exact_copied_bytes_at_the_real_callers_of_the_real_implementation
	attach_calib::counts_exact_mutex_operations_with_contention_attributed_to_the_locking_caller
	attach_calib::counts_exact_syscalls_and_none_of_the_probes_own
	attach_calib::counts_exact_page_faults_at_the_faulting_instruction
	attach_calib::context_switches_match_the_kernels_accounting_exactly
	attach_calib::cpu_samples_match_the_schedulers_cpu_time_and_land_in_the_spinning_function
	attach_calib::without_the_kernels_btf_counts_stay_exact_and_rig_says_what_it_gave_up
	stacks::c_stacks_without_frame_pointers_and_their_exact_counts_equal_the_truth
	stacks::cxx_stacks_through_libstdcxx_and_their_exact_counts_equal_the_truth
	stacks::rust_release_stacks_and_their_exact_counts_equal_the_truth
	tree::nginx_one_worker_costs_exactly_its_ground_truth_per_request_twice
	user_probes::a_guarded_python_marker_is_counted_per_request_with_its_argument_summed
	user_probes::named_functions_are_counted_per_request_by_caller
	user_probes::func_time_adds_the_outermost_calls_time_once_through_recursion
	user_fixture::the_fixtures_markers_and_functions_are_counted_exactly_per_site
	user_fixture::a_declared_arena_allocator_is_counted_and_sized_exactly_beside_the_heap
)
JOBS=1 SMP=2 MEM=3G TMO=2400 RUN=""
while [ $# -gt 0 ]; do
	case "$1" in
	--kernels) KERNELS=$2; shift 2 ;;
	--jobs) JOBS=$2; shift 2 ;;
	--smp) SMP=$2; shift 2 ;;
	--mem) MEM=$2; shift 2 ;;
	--timeout) TMO=$2; shift 2 ;;
	--run) RUN=$2; shift 2 ;;
	--) shift; break ;;
	*) echo "kernels: unknown argument $1 (see the top of $0)" >&2; exit 2 ;;
	esac
done
[ "$(id -u)" = 0 ] || { echo "kernels: needs root (to boot guests that load BPF)" >&2; exit 2; }

CACHE=$ROOT/target/kernels
# Directories the guests bind back over their own /tmp (see boot).
KEEP=("$ROOT")
mkdir -p "$CACHE"
# This invocation's guests: each boot() writes its qemu's pid here, and a
# kill of this script (SIGINT, SIGTERM, the CI's timeout) kills them, and
# only them, instead of leaving qemu running.
SESSION=$(mktemp -d "$CACHE/session.XXXXXX")
stop_guests() {
	local f
	for f in "$SESSION"/*.pid; do
		[ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null || true
	done
}
trap 'stop_guests; rm -rf "$SESSION"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

need_tools() {
	local need=""
	command -v qemu-system-x86_64 >/dev/null 2>&1 || need="$need qemu-system-x86"
	[ -x /bin/busybox ] && /bin/busybox --list 2>/dev/null | grep -qx switch_root || need="$need busybox-static"
	command -v cpio >/dev/null 2>&1 || need="$need cpio"
	command -v zstd >/dev/null 2>&1 || need="$need zstd"
	if [ -n "$need" ]; then
		echo "kernels: installing$need"
		apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $need >/dev/null
	fi
}

# Unpack the newest kernel of $1 (e.g. 6.1) under $CACHE/$1 unless there.
fetch_kernel() {
	local v=$1 suite=${SUITE[$1]:-}
	[ -n "$suite" ] || { echo "kernels: no Debian suite known for $v (known: ${!SUITE[*]})" >&2; return 2; }
	[ -f "$CACHE/$v/vmlinuz" ] && return 0
	local uri apt t pkg
	uri=$(sed -n 's/^URIs: //p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)
	uri=${uri:-http://deb.debian.org/debian}
	t=$(mktemp -d /tmp/rig-kernels-apt.XXXXXX)
	mkdir -p "$t/lists/partial" "$t/cache/archives/partial" "$t/parts"
	echo "deb $uri $suite main" > "$t/sources.list"
	apt=(-o "Dir::Etc::SourceList=$t/sources.list" -o "Dir::Etc::SourceParts=$t/parts"
		-o "Dir::State::Lists=$t/lists" -o "Dir::Cache=$t/cache" -o "Dir::State::status=/dev/null" -o APT::Sandbox::User=root)
	apt-get "${apt[@]}" update -qq
	# The metapackage names the current ABI's image: linux-image-6.1.0-N-amd64.
	pkg=$(apt-cache "${apt[@]}" depends linux-image-amd64 | sed -n 's/.*Depends: \(linux-image-[0-9].*-amd64\)$/\1/p' | head -1)
	[ -n "$pkg" ] || { echo "kernels: no linux-image-amd64 in $suite" >&2; rm -rf "$t"; return 1; }
	# The -unsigned package carries the same kernel without the signed-image
	# indirection (5.10's signed one is a separate source package).
	if apt-cache "${apt[@]}" show "$pkg-unsigned" >/dev/null 2>&1; then pkg=$pkg-unsigned; fi
	echo "kernels: fetching $pkg from $suite"
	(cd "$t" && apt-get "${apt[@]}" download -qq "$pkg")
	rm -rf "$CACHE/$v.tmp"; mkdir -p "$CACHE/$v.tmp"
	dpkg -x "$t"/*.deb "$CACHE/$v.tmp"
	cp "$CACHE/$v.tmp"/boot/vmlinuz-* "$CACHE/$v.tmp/vmlinuz"
	basename "$CACHE/$v.tmp"/lib/modules/* > "$CACHE/$v.tmp/release"
	rm -rf "$t" "$CACHE/$v"; mv "$CACHE/$v.tmp" "$CACHE/$v"
}

# initramfs of kernel $1: busybox and the modules to mount a 9p root.
make_initrd() {
	local v=$1 out=$CACHE/$1/initrd.gz
	[ -f "$out" ] && return 0
	local mods i f m
	mods=$CACHE/$v/lib/modules/$(cat "$CACHE/$v/release")
	i=$(mktemp -d /tmp/rig-kernels-initrd.XXXXXX)
	mkdir -p "$i"/bin "$i"/mods "$i"/proc "$i"/sys "$i"/dev "$i"/new
	cp /bin/busybox "$i/bin/busybox"
	for m in virtio_ring virtio virtio_pci_legacy_dev virtio_pci_modern_dev virtio_pci \
		netfs fscache 9pnet 9pnet_virtio 9p; do
		f=$(find "$mods" -name "$m.ko*" | head -1)
		[ -n "$f" ] || continue # built in, or not split out in this version
		case "$f" in
		*.xz) xz -dc "$f" > "$i/mods/$m.ko" ;;
		*.zst) zstd -dqc "$f" > "$i/mods/$m.ko" ;;
		*) cp "$f" "$i/mods/$m.ko" ;;
		esac
		echo "$m" >> "$i/mods/order"
	done
	cat > "$i/init" <<'INIT'
#!/bin/busybox sh
B=/bin/busybox
$B mount -t proc proc /proc; $B mount -t sysfs sys /sys; $B mount -t devtmpfs dev /dev
for m in $($B cat /mods/order); do $B insmod /mods/$m.ko || echo "kernels: insmod $m failed"; done
$B mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144,cache=loose host /new \
	|| { echo "kernels: 9p mount failed"; $B dmesg | $B tail -15; $B poweroff -f; }
$B mount --move /dev /new/dev; $B umount /proc /sys
exec $B switch_root /new /bin/bash "$rigvm/guest"
INIT
	chmod +x "$i/init"
	(cd "$i" && find . | cpio -o -H newc 2>/dev/null | gzip -1) > "$out.tmp"
	mv "$out.tmp" "$out"; rm -rf "$i"
}

# Boot kernel $1, run the command in file $2/cmd in the current directory;
# the guest's output goes to $2/out, its exit code to $2/rc.
boot() {
	local v=$1 w=$2
	pwd > "$w/cwd"
	# What the guest must still reach once its own /tmp hides the host's:
	# the checkout (its work directory is under it) and the test binary's
	# target directory, either of which may live under /tmp.
	printf '%s\n' "${KEEP[@]}" > "$w/keep"
	cat > "$w/guest" <<'GUEST'
W=$rigvm
CWD=$(cat $W/cwd); KEEP=$(cat $W/keep)
mount -t proc proc /proc; mount -t sysfs sys /sys
mount -t tmpfs tmpfs /run; mount -t tmpfs tmpfs /dev/shm 2>/dev/null; mkdir -p /dev/pts; mount -t devpts devpts /dev/pts
mount -t tracefs tracefs /sys/kernel/tracing 2>/dev/null; mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null
mount -t bpf bpf /sys/fs/bpf 2>/dev/null; mount -t cgroup2 cgroup2 /sys/fs/cgroup 2>/dev/null
# /tmp of its own: the host's (over 9p) would mix guests' and the host's
# files. A checkout under the host's /tmp (a clone in /tmp/...) is bound
# back at its own path, from the host's /tmp kept at /run/host-tmp.
mkdir -p /run/host-tmp; mount --bind /tmp /run/host-tmp
mount -t tmpfs tmpfs /tmp
printf '%s\n' "$KEEP" | while IFS= read -r d; do
	case "$d" in /tmp/?*) mkdir -p "$d"; mount --bind "/run/host-tmp/${d#/tmp/}" "$d" ;; esac
done
ip link set lo up 2>/dev/null || ifconfig lo up
hostname "rig-$(uname -r | cut -d- -f1)"; cd "$CWD"
export HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/root/.cargo/bin
[ -f $W/env ] && . $W/env
echo "=== guest kernel $(uname -r)"
bash $W/cmd </dev/null; echo $? > $W/rc
sync; echo o > /proc/sysrq-trigger; poweroff -f
GUEST
	# The serial console goes to a file, so that $! is timeout's pid, and
	# timeout passes a SIGTERM on to qemu.
	timeout "$TMO" qemu-system-x86_64 -accel tcg,thread=single -cpu max -m "$MEM" -smp "$SMP" \
		-display none -serial "file:$w/console.raw" -monitor none -no-reboot \
		-kernel "$CACHE/$v/vmlinuz" -initrd "$CACHE/$v/initrd.gz" \
		-append "console=ttyS0 panic=-1 quiet tsc=reliable clocksource=tsc rigvm=$w" \
		-fsdev local,id=r,path=/,security_model=none,multidevs=remap \
		-device virtio-9p-pci,fsdev=r,mount_tag=host -nic none </dev/null > "$w/qemu.log" 2>&1 &
	local qemu=$! pidf
	pidf="$SESSION/$(basename "$w").pid"
	echo "$qemu" > "$pidf"
	wait "$qemu" || true
	rm -f "$pidf"
	tr -d '\r' < "$w/console.raw" > "$w/console" 2>/dev/null || true
	cat "$w/qemu.log" >> "$w/console"
	# The guest's own output: from its first line on (the firmware's and
	# kernel's messages before it stay in the console log). The line may
	# start after the firmware's terminal escapes.
	sed -n '/=== guest kernel/,$p' "$w/console" | sed 's/^.*=== guest kernel/=== guest kernel/' |
		grep -v -E '^\[ *[0-9]+\.[0-9]+\]' > "$w/out" || true
}

need_tools
for v in $KERNELS; do fetch_kernel "$v"; make_initrd "$v"; done
[ -z "$RUN" ] || for v in $RUN; do fetch_kernel "$v"; make_initrd "$v"; done

if [ -n "$RUN" ]; then
	w=$(mktemp -d "$SESSION/run.XXXXXX")
	printf '%q ' "$@" > "$w/cmd"
	boot "$RUN" "$w"; cat "$w/out"
	[ -f "$w/rc" ] || { echo "kernels: no exit code from $RUN (guest died or timed out; console: $w/console)" >&2; exit 125; }
	exit "$(cat "$w/rc")"
fi

[ $# -gt 0 ] && FILTERS=("$@") || FILTERS=("${MATRIX_TESTS[@]}")
echo "kernels: building the test binary (cargo test --no-run)"
BIN=$(cargo test -p rig --test integration --no-run --message-format=json |
	sed -n 's/.*"executable":"\([^"]*integration[^"]*\)".*/\1/p' | tail -1) || true
[ -x "$BIN" ] || { echo "kernels: could not build the integration test binary" >&2; exit 1; }
KEEP+=("$(cd "$(dirname "$BIN")/../.." && pwd)")
cargo build -q -p rig

RESULTS=$CACHE/results
mkdir -p "$RESULTS"
run_kernel() {
	local v=$1 w start
	# Under target/, not /tmp: each guest has a /tmp of its own.
	w=$(mktemp -d "$SESSION/run.XXXXXX")
	[ -z "${CI:-}" ] || echo "export CI=$CI" > "$w/env"
	[ -z "${RUST_BACKTRACE:-}" ] || echo "export RUST_BACKTRACE=$RUST_BACKTRACE" >> "$w/env"
	{
		printf '%q --test-threads=1 --color=never ' "$BIN"
		printf '%q ' "${FILTERS[@]}"
		echo
	} > "$w/cmd"
	start=$(date +%s)
	boot "$v" "$w"
	# A guest kernel that dies (no exit code: an Oops under emulation, as
	# 6.12 once did patching a static key while the other vCPU ran the
	# site) is booted once more, and the first console is kept beside
	# the second run's; a second death fails the kernel.
	if [ ! -f "$w/rc" ] && grep -q -a 'Kernel panic\|Oops' "$w/console"; then
		cp "$w/console" "$RESULTS/$v.died.console"
		echo "kernels: the $v guest died ($(grep -a -m1 -o 'Oops.*\|Kernel panic.*' "$w/console")); booting it once more (console: $RESULTS/$v.died.console)"
		rm -f "$w/out" "$w/console" "$w/console.raw"
		boot "$v" "$w"
	fi
	cp "$w/out" "$RESULTS/$v.log"; cp "$w/console" "$RESULTS/$v.console"
	local rc=125
	[ -f "$w/rc" ] && rc=$(cat "$w/rc")
	echo "$rc $(($(date +%s) - start))" > "$RESULTS/$v.rc"
	rm -rf "$w"
}

echo "kernels: ${KERNELS// /, }: ${#FILTERS[@]} filters, $JOBS at a time; logs in $RESULTS/"
pids=()
for v in $KERNELS; do
	rm -f "$RESULTS/$v.rc" "$RESULTS/$v.died.console"
	run_kernel "$v" &
	pids+=($!)
	while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n || true; done
done
wait

fail=0
printf '%-6s %-8s %8s  %s\n' kernel result seconds tests
for v in $KERNELS; do
	read -r rc secs < "$RESULTS/$v.rc" || { rc=125 secs=0; }
	summary=$(grep -E '^test result:' "$RESULTS/$v.log" | tail -1 | sed 's/^test result: //')
	[ -n "$summary" ] || summary="no test summary (see $RESULTS/$v.console)"
	if [ "$rc" = 0 ]; then res=pass; else res="FAIL($rc)"; fail=1; fi
	printf '%-6s %-8s %8s  %s\n' "$v" "$res" "$secs" "$summary"
	grep -E '^test .* FAILED$|^rig: kernel' "$RESULTS/$v.log" | sed 's/^/         /' || true
	[ ! -f "$RESULTS/$v.died.console" ] || echo "         its first boot died: $RESULTS/$v.died.console"
done
exit $fail
