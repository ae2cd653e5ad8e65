/* ABI shared by every rig BPF program and the harness.
 * Rust twin: ebpf/src/abi.rs (`Stats`). Fixed-width fields only, explicit
 * padding, sizes asserted on both sides. */
#ifndef RIG_COMMON_H
#define RIG_COMMON_H

#include <linux/types.h>

/* Slots of the per-CPU self-stats array every program keeps. Anything but
 * RIG_STAT_EVENTS, RIG_STAT_PROBE_SYSCALLS and RIG_STAT_STACK_MISSING means
 * the window lost data. */
enum rig_stat {
	RIG_STAT_EVENTS = 0,         /* events accepted for the target */
	RIG_STAT_MAP_FULL = 1,       /* an update failed: a map was full */
	RIG_STAT_LOOKUP_FAIL = 2,    /* a value that must exist was missing */
	RIG_STAT_READ_FAIL = 3,      /* bpf_probe_read_* failed */
	RIG_STAT_UNPAIRED = 4,       /* an exit/return without its entry */
	RIG_STAT_PROBE_SYSCALLS = 5, /* the probes' own syscalls, not counted */
	RIG_STAT_STACK_FAIL = 6,     /* user stack could not be read */
	/* An event counted without its whole stack (registers unreadable, the
	 * stack map full, a kernel stack id collision): its count is exact, its
	 * stack is missing, and the report says how many. */
	RIG_STAT_STACK_MISSING = 7,
	RIG_STAT_SLOTS = 8,
};

/* Values of the `targets` map. RIG_TARGET_PENDING: forked into a tree and
 * followed like RIG_TARGET_TREE, but its uprobes (attached per process, by
 * the harness) are not in yet; the harness makes it RIG_TARGET_TREE once
 * they are. */
#define RIG_TARGET_ONE 1
#define RIG_TARGET_TREE 2
#define RIG_TARGET_PENDING 3
#define RIG_MAX_TARGETS 1024

struct rig_stats {
	__u64 slot[RIG_STAT_SLOTS];
};
_Static_assert(sizeof(struct rig_stats) == 64, "rig_stats ABI");

/* Key of the `attach_cookies` map of the objects built for kernels without
 * bpf_get_attach_cookie (Linux 5.15) or bpf_loop (5.17): the cookie of the
 * uprobe at user address `addr` of process `tgid`, written by the harness
 * when it attaches there. Rust twin: `CookieKey` (ebpf/src/abi.rs). */
struct rig_cookie_key {
	__u32 tgid;
	__u32 pad;
	__u64 addr;
};
_Static_assert(sizeof(struct rig_cookie_key) == 16, "rig_cookie_key ABI");

#endif
