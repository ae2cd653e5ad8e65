// SPDX-License-Identifier: GPL-2.0
/* Per-syscall count and time of the target's threads, from raw_syscalls
 * tracepoints (no kprobes needed). A syscall is counted at entry so calls
 * that never return (exit_group) count too; time is added at return. */
#include "common.bpf.h"
#include "syscalls.h"

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32); /* tid */
	__type(value, struct sys_start);
} sys_starts SEC(".maps");

/* (process, syscall nr) -> count and time. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct sys_key);
	__type(value, struct sys_count);
} sys_counts SEC(".maps");

/* Syscalls of each process forked into a tree made before its uprobes
 * were attached (its `targets` value still RIG_TARGET_PENDING): what the
 * alloc, copy and locks probes did not see of it, counted where nothing
 * is missed. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, RIG_MAX_TARGETS);
	__type(key, __u32);
	__type(value, __u64);
} pending_syscalls SEC(".maps");

SEC("raw_tracepoint/sys_enter")
int rig_sys_enter(struct bpf_raw_tracepoint_args *ctx)
{
	__u32 tgid = current_tgid();
	__u8 *mode = bpf_map_lookup_elem(&targets, &tgid);
	if (!mode)
		return 0;
	__u32 nr = (__u32)ctx->args[1];
	if (nr == RIG_NR_URETPROBE) {
		stat_add(RIG_STAT_PROBE_SYSCALLS, 1);
		return 0;
	}
	stat_add(RIG_STAT_EVENTS, 1);
	if (*mode == RIG_TARGET_PENDING) {
		__u64 zero = 0;
		__u64 *n = upsert(&pending_syscalls, &tgid, &zero);
		if (n)
			(*n)++;
	}
	__u32 tid = current_tid();
	struct sys_start st = { .ts = bpf_ktime_get_ns(), .nr = nr };
	if (bpf_map_update_elem(&sys_starts, &tid, &st, BPF_ANY))
		stat_add(RIG_STAT_MAP_FULL, 1);
	struct sys_key k = { .tgid = tgid, .nr = nr };
	struct sys_count zero = {};
	struct sys_count *c = upsert(&sys_counts, &k, &zero);
	if (c)
		c->count++;
	if (rig_stacks) {
		/* args[0]: the user registers saved at syscall entry. */
		struct pt_regs regs = {};
		__u64 ustack = 0;
		if (bpf_probe_read_kernel(&regs, sizeof(regs), (void *)ctx->args[0]))
			stat_add(RIG_STAT_STACK_MISSING, 1);
		else
			ustack = take_ustack_regs(tgid, &regs);
		/* No kernel stack: at sys_enter it is always the same entry
		 * path; the user stack and the syscall nr say what was called. */
		stack_add(tgid, ustack, -1, STACK_SYSCALL, nr, 0);
	}
	return 0;
}

SEC("raw_tracepoint/sys_exit")
int rig_sys_exit(struct bpf_raw_tracepoint_args *ctx)
{
	__u32 tgid = current_tgid();
	if (!is_target(tgid))
		return 0;
	__u32 tid = current_tid();
	struct sys_start *st = bpf_map_lookup_elem(&sys_starts, &tid);
	if (!st)
		return 0; /* entered before we attached, or the trampoline's own */
	__u64 ns = bpf_ktime_get_ns() - st->ts;
	struct sys_key k = { .tgid = tgid, .nr = st->nr };
	bpf_map_delete_elem(&sys_starts, &tid);
	struct sys_count *c = bpf_map_lookup_elem(&sys_counts, &k);
	if (c) {
		c->exits++;
		c->ns += ns;
	}
	return 0;
}
