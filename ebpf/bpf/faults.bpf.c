// SPDX-License-Identifier: GPL-2.0
/* Page faults by user IP. Attached to per-CPU software perf events (minor and
 * major faults, period 1, all processes) and filtered by tgid here: a perf
 * event opened on one pid sees only that one thread. */
#include "common.bpf.h"
#include <linux/bpf_perf_event.h>
#include "faults.h"

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct fault_key);
	__type(value, __u64);
} faults SEC(".maps");

/* x86_64: user addresses are below the canonical hole. */
#define USER_MAX 0x00007fffffffffffull

static __always_inline int on_fault(struct bpf_perf_event_data *ctx, __u32 kind)
{
	__u32 tgid = current_tgid();
	if (!is_target(tgid))
		return 0;
	stat_add(RIG_STAT_EVENTS, 1);
	struct fault_key k = { .kind = kind, .tgid = tgid };
	__u64 ip = PT_REGS_IP(&ctx->regs);
	if (ip <= USER_MAX) {
		k.ip = ip;
	} else {
		/* Kernel-mode fault on a user page (copy_to_user in a syscall):
		 * name it after the user instruction that entered the kernel. */
		__u64 frames[1] = {};
		k.in_kernel = 1;
		if (bpf_get_stack(ctx, frames, sizeof(frames), BPF_F_USER_STACK) < 0)
			stat_add(RIG_STAT_STACK_FAIL, 1);
		k.ip = frames[0];
	}
	__u64 zero = 0;
	__u64 *v = upsert(&faults, &k, &zero);
	if (v)
		(*v)++;
	if (rig_stacks) {
		__u64 ustack;
		if (!k.in_kernel) {
			ustack = take_ustack(tgid, PT_REGS_IP(&ctx->regs), PT_REGS_SP(&ctx->regs),
					     PT_REGS_FP(&ctx->regs));
		} else {
			ustack = take_current_ustack(tgid);
		}
		stack_add(tgid, ustack, k.in_kernel ? take_kstack(ctx) : -1, STACK_FAULT, kind, 0);
	}
	return 0;
}

SEC("perf_event")
int rig_fault_minor(struct bpf_perf_event_data *ctx) { return on_fault(ctx, FAULT_MINOR); }

SEC("perf_event")
int rig_fault_major(struct bpf_perf_event_data *ctx) { return on_fault(ctx, FAULT_MAJOR); }
