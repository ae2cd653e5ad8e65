// SPDX-License-Identifier: GPL-2.0
/* Context switches and off-CPU time per target thread, from the sched_switch
 * raw tracepoint: TP_PROTO(bool preempt, struct task_struct *prev,
 * struct task_struct *next, unsigned int prev_state). The kernel bills nvcsw
 * exactly when !preempt && prev_state != 0, so the same test here matches
 * /proc/<pid>/task/<tid>/status. Before Linux 5.18 the tracepoint has no
 * prev_state argument (three args; a program reading a fourth is refused at
 * attach): rig_sched_switch_task_state reads prev's state from the task
 * instead, as those kernels' own accounting did; the harness attaches one of
 * the two by the kernel's features (probe::kernel). */
#include "common.bpf.h"
#include "sched.h"

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32); /* tid */
	__type(value, struct sched_val);
} sched_threads SEC(".maps");

/* Where and when a target thread left the CPU (kernel-side only). */
struct switch_out {
	__u64 ts;
	__u64 ustack;
	__s32 kstack;
	__u32 voluntary;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32); /* tid */
	__type(value, struct switch_out);
} switched_out SEC(".maps");

static __always_inline struct sched_val *thread_val(__u32 tid, __u32 tgid)
{
	struct sched_val zero = { .tgid = tgid };
	return upsert(&sched_threads, &tid, &zero);
}

static __always_inline int on_switch(struct bpf_raw_tracepoint_args *ctx, __u32 prev_state)
{
	__u64 now = bpf_ktime_get_ns();
	__u64 preempt = ctx->args[0];
	struct task_struct *next = (struct task_struct *)ctx->args[2];

	/* The tracepoint runs in prev's context. */
	__u32 prev_tgid = current_tgid();
	if (is_target(prev_tgid)) {
		stat_add(RIG_STAT_EVENTS, 1);
		__u32 tid = current_tid();
		struct sched_val *v = thread_val(tid, prev_tgid);
		__u32 voluntary = !preempt && prev_state;
		if (v) {
			if (voluntary)
				v->voluntary++;
			else
				v->involuntary++;
		}
		struct switch_out so = { .ts = now, .kstack = -1, .voluntary = voluntary };
		if (rig_stacks) {
			so.ustack = take_current_ustack(prev_tgid);
			so.kstack = take_kstack(ctx);
		}
		if (bpf_map_update_elem(&switched_out, &tid, &so, BPF_ANY))
			stat_add(RIG_STAT_MAP_FULL, 1);
	}

	__u32 next_tgid = BPF_CORE_READ(next, tgid);
	if (is_target(next_tgid)) {
		__u32 tid = BPF_CORE_READ(next, pid);
		struct switch_out *so = bpf_map_lookup_elem(&switched_out, &tid);
		if (so) {
			struct switch_out out = *so;
			__u64 off = now - out.ts;
			bpf_map_delete_elem(&switched_out, &tid);
			struct sched_val *v = thread_val(tid, next_tgid);
			if (v)
				v->off_cpu_ns += off;
			stack_add(next_tgid, out.ustack, out.kstack, STACK_OFFCPU, out.voluntary, off);
		}
	}
	return 0;
}

SEC("raw_tracepoint/sched_switch")
int rig_sched_switch(struct bpf_raw_tracepoint_args *ctx)
{
	return on_switch(ctx, (__u32)ctx->args[3]);
}

/* The task's state field: `__state` since Linux 5.14, `state` before. */
struct task_struct___state {
	unsigned int __state;
} __attribute__((preserve_access_index));
struct task_struct___state_old {
	long state;
} __attribute__((preserve_access_index));

SEC("raw_tracepoint/sched_switch")
int rig_sched_switch_task_state(struct bpf_raw_tracepoint_args *ctx)
{
	void *prev = (void *)ctx->args[1];
	__u32 state;
	if (bpf_core_field_exists(struct task_struct___state, __state))
		state = BPF_CORE_READ((struct task_struct___state *)prev, __state);
	else
		state = (__u32)BPF_CORE_READ((struct task_struct___state_old *)prev, state);
	return on_switch(ctx, state);
}
