// SPDX-License-Identifier: GPL-2.0
/* pthread mutex acquisitions per (caller, mutex), contended wait from the
 * futex syscalls made inside the lock call, and hold time from lock return
 * to unlock entry. uprobe + uretprobe on lock/trylock, uprobe on unlock; the
 * futex time comes from raw_syscalls tracepoints (cheap, not single-stepped).
 * call_ns and hold_ns include the probes' own trap cost; the harness measures
 * that cost and says so beside them. Go's locks are the slow paths of its
 * sync package (below). */
#include "common.bpf.h"
#include "locks.h"

#define NR_FUTEX 202

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct lock_key);
	__type(value, struct lock_val);
} locks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32); /* tid */
	__type(value, struct lock_pending);
} pending SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct held_key);
	__type(value, struct held_val);
} held SEC(".maps");

/* tid -> user stack of its pending lock call. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, __u64);
} pending_stack SEC(".maps");

static __always_inline struct lock_val *lock_val_of(__u64 caller, __u64 mutex, __u32 op)
{
	struct lock_key k = { .caller = caller, .mutex = mutex, .op = op, .tgid = current_tgid() };
	struct lock_val zero = {};
	return upsert(&locks, &k, &zero);
}

static __always_inline int on_entry(struct pt_regs *ctx, __u32 op, __u64 mutex)
{
	if (!is_live_target(current_tgid()))
		return 0;
	stat_add(RIG_STAT_EVENTS, 1);
	__u32 tid = current_tid();
	struct lock_pending p = {
		.caller = caller_of(ctx),
		.mutex = mutex,
		.t_entry = bpf_ktime_get_ns(),
		.op = op,
	};
	struct lock_val *v = lock_val_of(p.caller, p.mutex, op);
	if (v)
		v->calls++;
	if (bpf_map_update_elem(&pending, &tid, &p, BPF_ANY))
		stat_add(RIG_STAT_MAP_FULL, 1);
	if (rig_stacks) {
		__u32 tgid = current_tgid();
		__u64 ustack = take_ustack(tgid, PT_REGS_IP(ctx), PT_REGS_SP(ctx), PT_REGS_FP(ctx));
		stack_add(tgid, ustack, -1, STACK_LOCK, op, 0);
		if (bpf_map_update_elem(&pending_stack, &tid, &ustack, BPF_ANY))
			stat_add(RIG_STAT_MAP_FULL, 1);
	}
	return 0;
}

SEC("uprobe")
int rig_mutex_lock(struct pt_regs *ctx) { return on_entry(ctx, LOCK_OP_LOCK, PT_REGS_PARM1(ctx)); }

SEC("uprobe")
int rig_mutex_trylock(struct pt_regs *ctx)
{
	return on_entry(ctx, LOCK_OP_TRYLOCK, PT_REGS_PARM1(ctx));
}

/* The end of a pending lock call of this thread; `acquired`: it returned
 * holding the mutex. */
static __always_inline int on_return(struct pt_regs *ctx, int acquired)
{
	if (!is_live_target(current_tgid()))
		return 0;
	__u64 now = bpf_ktime_get_ns();
	__u32 tid = current_tid();
	struct lock_pending *p = bpf_map_lookup_elem(&pending, &tid);
	if (!p) {
		stat_add(RIG_STAT_UNPAIRED, 1); /* entered before attach */
		return 0;
	}
	struct lock_pending cur = *p;
	bpf_map_delete_elem(&pending, &tid);
	struct lock_val *v = lock_val_of(cur.caller, cur.mutex, cur.op);
	if (!v)
		return 0;
	v->returns++;
	v->call_ns += now - cur.t_entry;
	if (!acquired)
		return 0; /* trylock busy, or an error: not acquired */
	v->acquired++;
	v->futex_wait_ns += cur.futex_wait_ns;
	if (cur.futex_waits) {
		v->contended++;
		__u64 *ustack = bpf_map_lookup_elem(&pending_stack, &tid);
		if (ustack)
			stack_add(current_tgid(), *ustack, -1, STACK_FUTEX_WAIT, cur.op,
				  cur.futex_wait_ns);
	}
	struct held_key hk = { .mutex = cur.mutex, .tid = tid };
	struct held_val hv = { .t_acquired = now, .caller = cur.caller, .op = cur.op };
	if (bpf_map_update_elem(&held, &hk, &hv, BPF_ANY))
		stat_add(RIG_STAT_MAP_FULL, 1);
	return 0;
}

SEC("uretprobe")
int rig_mutex_lock_ret(struct pt_regs *ctx) { return on_return(ctx, PT_REGS_RC(ctx) == 0); }

static __always_inline int on_unlock(struct pt_regs *ctx, __u64 mutex)
{
	if (!is_live_target(current_tgid()))
		return 0;
	stat_add(RIG_STAT_EVENTS, 1);
	__u64 now = bpf_ktime_get_ns();
	struct lock_val *v = lock_val_of(caller_of(ctx), mutex, LOCK_OP_UNLOCK);
	if (v)
		v->calls++;
	if (rig_stacks) {
		__u32 tgid = current_tgid();
		__u64 ustack = take_ustack(tgid, PT_REGS_IP(ctx), PT_REGS_SP(ctx), PT_REGS_FP(ctx));
		stack_add(tgid, ustack, -1, STACK_LOCK, LOCK_OP_UNLOCK, 0);
	}
	struct held_key hk = { .mutex = mutex, .tid = current_tid() };
	struct held_val *hv = bpf_map_lookup_elem(&held, &hk);
	if (!hv)
		return 0; /* acquired before attach, or by another thread */
	struct held_val h = *hv;
	bpf_map_delete_elem(&held, &hk);
	struct lock_val *lv = lock_val_of(h.caller, mutex, h.op);
	if (lv) {
		lv->holds++;
		lv->hold_ns += now - h.t_acquired;
	}
	return 0;
}

/* Go's lock slow paths, entered only when the inlined fast path found the
 * lock taken, and left holding it (or past the wait): each call is one
 * contended acquisition, its time from entry to return the wait. Entry on
 * the prologue's stack check branch (common.bpf.h), every return by a plain
 * uprobe on each of its `ret` instructions (a uretprobe crashes Go). Keyed
 * by goroutine (g in r14, Go's register ABI): a goroutine that blocks is
 * parked and may resume on another thread. The receiver (the mutex, or the
 * semaphore's address) is the first argument, in rax. The cookie is the
 * lock_op, at the entry and at each return: a return of another slow path
 * than the one pending is not its end. Before Go 1.20 RWMutex waits on the
 * semaphore function sync.Mutex's slow path waits on: a call of it inside
 * that slow path is the mutex's wait, already counted. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct go_lock_key);
	__type(value, struct go_lock_pending);
} go_pending SEC(".maps");

/* A contended acquisition whose whole call is its wait (a Go slow path, a
 * runtime's marked one) begins: counted at (caller, mutex, op), its stack
 * taken, and kept pending in `map` under `key` until its end. */
static __always_inline int begin_wait(struct pt_regs *ctx, void *map, void *key, __u64 caller,
				      __u64 mutex, __u32 op)
{
	struct go_lock_pending p = {
		.caller = caller,
		.mutex = mutex,
		.t_entry = bpf_ktime_get_ns(),
		.op = op,
	};
	struct lock_val *v = lock_val_of(p.caller, p.mutex, p.op);
	if (v)
		v->calls++;
	if (rig_stacks) {
		__u32 tgid = current_tgid();
		p.ustack = take_ustack(tgid, PT_REGS_IP(ctx), PT_REGS_SP(ctx), PT_REGS_FP(ctx));
		stack_add(tgid, p.ustack, -1, STACK_LOCK, p.op, 0);
	}
	if (bpf_map_update_elem(map, key, &p, BPF_ANY))
		stat_add(RIG_STAT_MAP_FULL, 1);
	return 0;
}

/* It has ended: one contended acquisition, its wait the time since it
 * began, at its row and its stack. */
static __always_inline void end_wait(struct go_lock_pending *cur)
{
	__u64 wait = bpf_ktime_get_ns() - cur->t_entry;
	struct lock_val *v = lock_val_of(cur->caller, cur->mutex, cur->op);
	if (v) {
		v->returns++;
		v->acquired++;
		v->contended++;
		v->futex_wait_ns += wait;
		v->call_ns += wait;
	}
	if (rig_stacks && cur->ustack)
		stack_add(current_tgid(), cur->ustack, -1, STACK_FUTEX_WAIT, cur->op, wait);
}

SEC("uprobe")
int rig_go_lock(struct pt_regs *ctx)
{
	if (!is_live_target(current_tgid()) || go_stack_grows(ctx))
		return 0;
	stat_add(RIG_STAT_EVENTS, 1);
	struct go_lock_key g = { .g = ctx->r14, .tgid = current_tgid() };
	__u32 op = (__u32)attach_cookie(ctx);
	if (op == LOCK_OP_GO_RWSEMA) {
		struct go_lock_pending *outer = bpf_map_lookup_elem(&go_pending, &g);
		if (outer && outer->op == LOCK_OP_GO_MUTEX)
			return 0;
	}
	return begin_wait(ctx, &go_pending, &g, caller_of(ctx), ctx->rax, op);
}

SEC("uprobe")
int rig_go_lock_ret(struct pt_regs *ctx)
{
	if (!is_live_target(current_tgid()))
		return 0;
	struct go_lock_key g = { .g = ctx->r14, .tgid = current_tgid() };
	struct go_lock_pending *p = bpf_map_lookup_elem(&go_pending, &g);
	if (!p) {
		stat_add(RIG_STAT_UNPAIRED, 1); /* entered before attach */
		return 0;
	}
	if (p->op != (__u32)attach_cookie(ctx))
		return 0; /* a nested call's return: not this slow path's */
	struct go_lock_pending cur = *p;
	bpf_map_delete_elem(&go_pending, &g);
	end_wait(&cur);
	return 0;
}

SEC("uprobe")
int rig_mutex_unlock(struct pt_regs *ctx) { return on_unlock(ctx, PT_REGS_PARM1(ctx)); }

/* A runtime's contended acquisitions marked by two USDT markers (the
 * JVM's monitor__contended__enter and __entered; the cookie is the
 * lock_op): each is a contended acquisition, its wait from the first
 * marker to the second, by thread. The site is the first marker's
 * instruction (a marker sits inside its function: no return address at
 * the stack pointer), the mutex unknown (0); the stack says who
 * acquired. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct go_lock_key); /* g: the thread */
	__type(value, struct go_lock_pending);
} marker_pending SEC(".maps");

SEC("uprobe")
int rig_marker_lock(struct pt_regs *ctx)
{
	if (!is_live_target(current_tgid()))
		return 0;
	stat_add(RIG_STAT_EVENTS, 1);
	struct go_lock_key t = { .g = current_tid(), .tgid = current_tgid() };
	return begin_wait(ctx, &marker_pending, &t, PT_REGS_IP(ctx), 0,
			  (__u32)attach_cookie(ctx));
}

SEC("uprobe")
int rig_marker_lock_ret(struct pt_regs *ctx)
{
	if (!is_live_target(current_tgid()))
		return 0;
	struct go_lock_key t = { .g = current_tid(), .tgid = current_tgid() };
	struct go_lock_pending *p = bpf_map_lookup_elem(&marker_pending, &t);
	if (!p) {
		stat_add(RIG_STAT_UNPAIRED, 1); /* began waiting before attach */
		return 0;
	}
	struct go_lock_pending cur = *p;
	bpf_map_delete_elem(&marker_pending, &t);
	end_wait(&cur);
	return 0;
}

/* The Go runtime's own locks, runtime.lock2(l) and runtime.unlock2(l) (l in
 * rax): held by a thread (the runtime forbids preemption while one is held),
 * so counted as pthread mutexes are, by thread: every acquisition, contended
 * when lock2 waited in futex, the hold from lock2's return to unlock2.
 * lock2's entry and unlock2's are on their stack check branches (a pass
 * that grows the stack is skipped), its return is a uprobe on each `ret`. */
SEC("uprobe")
int rig_go_runtime_lock(struct pt_regs *ctx)
{
	if (go_stack_grows(ctx))
		return 0;
	return on_entry(ctx, LOCK_OP_GO_RUNTIME, ctx->rax);
}

SEC("uprobe")
int rig_go_runtime_lock_ret(struct pt_regs *ctx) { return on_return(ctx, 1); }

SEC("uprobe")
int rig_go_runtime_unlock(struct pt_regs *ctx)
{
	if (go_stack_grows(ctx))
		return 0;
	return on_unlock(ctx, ctx->rax);
}

/* Futex waits inside a pending lock call are that call's contended wait. */
SEC("raw_tracepoint/sys_enter")
int rig_lock_sys_enter(struct bpf_raw_tracepoint_args *ctx)
{
	if (ctx->args[1] != NR_FUTEX || !is_live_target(current_tgid()))
		return 0;
	__u32 tid = current_tid();
	struct lock_pending *p = bpf_map_lookup_elem(&pending, &tid);
	if (p) {
		p->futex_t0 = bpf_ktime_get_ns();
		p->futex_waits++;
	}
	return 0;
}

SEC("raw_tracepoint/sys_exit")
int rig_lock_sys_exit(struct bpf_raw_tracepoint_args *ctx)
{
	if (!is_live_target(current_tgid()))
		return 0;
	__u32 tid = current_tid();
	struct lock_pending *p = bpf_map_lookup_elem(&pending, &tid);
	if (p && p->futex_t0) {
		p->futex_wait_ns += bpf_ktime_get_ns() - p->futex_t0;
		p->futex_t0 = 0;
	}
	return 0;
}
