/* Rust twin: ebpf/src/abi.rs (`SchedVal`). Key: __u32 tid. */
#ifndef RIG_SCHED_H
#define RIG_SCHED_H
#include <linux/types.h>

struct sched_val {
	__u64 voluntary;   /* switched out while blocking (counts as nvcsw) */
	__u64 involuntary; /* preempted or yielded while runnable (nivcsw) */
	__u64 off_cpu_ns;  /* switch-out to next switch-in */
	__u64 tgid;
};
_Static_assert(sizeof(struct sched_val) == 32, "sched_val ABI");
#endif
