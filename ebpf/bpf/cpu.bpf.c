// SPDX-License-Identifier: GPL-2.0
/* Sampled on-CPU time: a software cpu-clock perf event on every CPU, each
 * sample of a followed process counted per process and mode, and (with
 * stacks on) per user stack plus the kernel stack when the sample
 * interrupted kernel code. Samples are statistics, not exact counts: they
 * weigh where time goes, and the harness never divides them into exact
 * per-request costs. */
#include "common.bpf.h"
#include <linux/bpf_perf_event.h>
#include "cpu.h"

/* The sampling period in ns, set by the loader (each sample stands for
 * this much CPU time). */
const volatile __u64 rig_sample_period_ns = 250000;

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 4096);
	__type(key, struct cpu_key);
	__type(value, __u64);
} cpu_samples SEC(".maps");

/* x86_64: user addresses are below the canonical hole. */
#define USER_MAX 0x00007fffffffffffull

SEC("perf_event")
int rig_cpu_sample(struct bpf_perf_event_data *ctx)
{
	__u32 tgid = current_tgid();
	if (!tgid || !is_target(tgid))
		return 0;
	stat_add(RIG_STAT_EVENTS, 1);
	__u64 ip = PT_REGS_IP(&ctx->regs);
	struct cpu_key k = { .tgid = tgid, .in_kernel = ip > USER_MAX };
	__u64 zero = 0;
	__u64 *v = upsert(&cpu_samples, &k, &zero);
	if (v)
		(*v)++;
	if (rig_stacks) {
		__u64 ustack;
		__s32 kstack = -1;
		if (!k.in_kernel) {
			ustack = take_ustack(tgid, ip, PT_REGS_SP(&ctx->regs), PT_REGS_FP(&ctx->regs));
		} else {
			ustack = take_current_ustack(tgid);
			kstack = take_kstack(ctx);
		}
		stack_add(tgid, ustack, kstack, STACK_CPU, k.in_kernel, rig_sample_period_ns);
	}
	return 0;
}
