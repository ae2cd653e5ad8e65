/* Kernel-side helpers shared by every rig program (not ABI). */
#ifndef RIG_COMMON_BPF_H
#define RIG_COMMON_BPF_H

#include <linux/bpf.h>
#include <linux/ptrace.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "common.h"

char LICENSE[] SEC("license") = "GPL";

/* Processes under measurement: tgid -> RIG_TARGET_ONE (this process only)
 * or RIG_TARGET_TREE (this process and every process it forks, which
 * rig_follow_fork adds here before the child first runs). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, RIG_MAX_TARGETS);
	__type(key, __u32);
	__type(value, __u8);
} targets SEC(".maps");

/* When each process forked into a tree was forked (bpf_ktime_get_ns, the
 * clock CLOCK_MONOTONIC reads): the harness measures how long it ran before
 * its uprobes were attached from it. LRU: a server forking per connection
 * forks more than any table holds, and the oldest forks matter least. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, RIG_MAX_TARGETS);
	__type(key, __u32);
	__type(value, __u64);
} forked_at SEC(".maps");

/* Only the fields we read; CO-RE relocates them against the kernel's BTF. */
struct task_struct {
	int pid;
	int tgid;
} __attribute__((preserve_access_index));

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct rig_stats);
} stats SEC(".maps");

static __always_inline void stat_add(enum rig_stat slot, __u64 n)
{
	__u32 zero = 0;
	struct rig_stats *s = bpf_map_lookup_elem(&stats, &zero);
	if (s && slot < RIG_STAT_SLOTS)
		s->slot[slot] += n;
}

static __always_inline int is_target(__u32 tgid)
{
	return bpf_map_lookup_elem(&targets, &tgid) != 0;
}

/* A target whose per-process uprobes are all in. The uprobe families (and
 * the tracepoints that pair with their calls) count a forked process only
 * from the moment the harness makes it RIG_TARGET_TREE, after its last
 * uprobe went in: every probe starts at that one instant, so what they
 * missed of it is exactly what it did while pending, which the syscalls
 * family counts apart. */
static __always_inline int is_live_target(__u32 tgid)
{
	__u8 *mode = bpf_map_lookup_elem(&targets, &tgid);
	return mode && *mode != RIG_TARGET_PENDING;
}

static __always_inline __u32 current_tgid(void)
{
	return bpf_get_current_pid_tgid() >> 32;
}

static __always_inline __u32 current_tid(void)
{
	return (__u32)bpf_get_current_pid_tgid();
}

/* At a uprobe on a function's first instruction (or past instructions that
 * leave rsp and memory alone: harness/src/probe/placement.rs) the return
 * address is the word at the stack pointer: frame-pointer walks miss this
 * caller. */
static __always_inline __u64 caller_of(struct pt_regs *ctx)
{
	__u64 ret = 0;
	if (bpf_probe_read_user(&ret, sizeof(ret), (void *)PT_REGS_SP(ctx)))
		stat_add(RIG_STAT_READ_FAIL, 1);
	return ret;
}

#ifdef RIG_COMPAT
/* The object built for kernels before 5.17 (build.rs compiles every program
 * twice, the second time with RIG_COMPAT): a uprobe's cookie is not handed
 * to it by the kernel (bpf_get_attach_cookie is 5.15) but found by the
 * address it fired at, in a map the harness fills as it attaches. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, struct rig_cookie_key);
	__type(value, __u64);
} attach_cookies SEC(".maps");

static __always_inline __u64 attach_cookie(struct pt_regs *ctx)
{
	struct rig_cookie_key k = { .tgid = current_tgid(), .addr = PT_REGS_IP(ctx) };
	__u64 *c = bpf_map_lookup_elem(&attach_cookies, &k);
	if (!c) {
		/* x86 reports the address past the int3 on some paths. */
		k.addr -= 1;
		c = bpf_map_lookup_elem(&attach_cookies, &k);
	}
	if (!c) {
		stat_add(RIG_STAT_LOOKUP_FAIL, 1);
		return 0;
	}
	return *c;
}
#else
#define attach_cookie(ctx) bpf_get_attach_cookie(ctx)
#endif

/* Add to a per-CPU hash value, inserting a zeroed one first. Returns NULL
 * (and counts it) when the map is full. */
static __always_inline void *upsert(void *map, const void *key, const void *zero)
{
	void *v = bpf_map_lookup_elem(map, key);
	if (v)
		return v;
	/* EEXIST from a racing CPU is fine: the lookup below finds its entry. */
	bpf_map_update_elem(map, key, zero, BPF_NOEXIST);
	v = bpf_map_lookup_elem(map, key);
	if (!v)
		stat_add(RIG_STAT_MAP_FULL, 1);
	return v;
}

/* Go's probes sit on the prologue's stack check branch, `jbe` to
 * runtime.morestack (runtime/go/mod.rs): a conditional branch, which the
 * kernel emulates (about 1 µs a hit, against about 10 µs for the
 * instruction after it, which it single-steps). With CF or ZF set the branch
 * is taken: the goroutine's stack grows and the function starts again,
 * passing here once more, and that second pass is the one counted. */
static __always_inline int go_stack_grows(struct pt_regs *ctx)
{
	return (ctx->eflags & (1 << 0 | 1 << 6)) != 0; /* CF, ZF */
}

#include "stack.bpf.h"

/* sched_process_fork: TP_PROTO(struct task_struct *parent,
 * struct task_struct *child), run by the parent before the child is woken.
 * A new process (not a thread: those share the tgid) forked by a followed
 * process is followed too. Every object carries this program so each keeps
 * its own `targets` map complete. */
SEC("raw_tracepoint/sched_process_fork")
int rig_follow_fork(struct bpf_raw_tracepoint_args *ctx)
{
	__u32 parent = current_tgid();
	__u8 *mode = bpf_map_lookup_elem(&targets, &parent);
	if (!mode || (*mode != RIG_TARGET_TREE && *mode != RIG_TARGET_PENDING))
		return 0;
	struct task_struct *child = (struct task_struct *)ctx->args[1];
	__u32 pid = BPF_CORE_READ(child, pid);
	__u32 tgid = BPF_CORE_READ(child, tgid);
	if (pid != tgid)
		return 0;
	/* Pending until the harness has attached its uprobes. */
	__u8 pending = RIG_TARGET_PENDING;
	if (bpf_map_update_elem(&targets, &tgid, &pending, BPF_ANY))
		stat_add(RIG_STAT_MAP_FULL, 1);
	__u64 now = bpf_ktime_get_ns();
	bpf_map_update_elem(&forked_at, &tgid, &now, BPF_ANY);
	stack_follow_fork(parent, tgid);
	return 0;
}

/* sched_process_exec: a followed process that execs another program no
 * longer has the address space its unwind tables describe. Its stacks say
 * "process without tables" until the harness installs the new program's
 * (at the next window start) rather than being walked with the old ones. */
SEC("raw_tracepoint/sched_process_exec")
int rig_forget_exec(struct bpf_raw_tracepoint_args *ctx)
{
	__u32 tgid = current_tgid();
	if (is_target(tgid))
		bpf_map_delete_elem(&unwind_slots, &tgid);
	return 0;
}

#endif
