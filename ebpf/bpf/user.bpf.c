// SPDX-License-Identifier: GPL-2.0
/* Probes a user names: calls by (site, caller) and whole stack, and for a
 * USDT marker one argument summed (`--usdt PROVIDER:NAME@N`). A marker's
 * probe sits on its `nop`, which the kernel emulates; a function's on the
 * first instruction past its entry that leaves the stack pointer and
 * memory alone (harness/src/probe/placement.rs), so the return address is
 * the word at the stack pointer. In Go code the probe sits on the
 * prologue's stack check (see go_stack_grows). */
#include "common.bpf.h"
#include "user.h"

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct user_key);
	__type(value, struct user_val);
} user_calls SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, RIG_USER_SITES);
	__type(key, __u32);
	__type(value, struct user_arg);
} user_args SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, RIG_USER_SITES);
	__type(key, __u32);
	__type(value, struct user_by_arg);
} user_by_args SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct user_str_key);
	__type(value, struct user_val);
} user_by_str SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct user_depth_key);
	__type(value, struct user_depth);
} user_depths SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct user_inflight_key);
	__type(value, __u32); /* site */
} user_inflight SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct user_time_key);
	__type(value, __u64);
} user_ns SEC(".maps");

/* The argument the site's spec names, as libbpf's USDT support reads it:
 * 8 bytes from the register (or from memory at register + displacement,
 * or at a global), then cut to `size` bytes and sign-extended when
 * signed. */
static __always_inline __u64 user_arg_value(struct pt_regs *ctx, struct user_arg *a)
{
	if (!a || a->kind == USER_ARG_NONE)
		return 0;
	if (a->kind == USER_ARG_CONST)
		return (__u64)a->value;
	__u64 v = 0;
	if (a->kind == USER_ARG_IPREL) {
		/* A global: the marker's address, where the probe is, plus the
		 * distance to the global the harness worked out from the file. */
		if (bpf_probe_read_user(&v, sizeof(v), (void *)(PT_REGS_IP(ctx) + a->value))) {
			stat_add(RIG_STAT_READ_FAIL, 1);
			return 0;
		}
	} else if (a->reg_off > sizeof(struct pt_regs) - sizeof(v) ||
	    bpf_probe_read_kernel(&v, sizeof(v), (void *)ctx + a->reg_off)) {
		stat_add(RIG_STAT_READ_FAIL, 1);
		return 0;
	}
	if (a->kind == USER_ARG_MEM &&
	    bpf_probe_read_user(&v, sizeof(v), (void *)(v + a->value))) {
		stat_add(RIG_STAT_READ_FAIL, 1);
		return 0;
	}
	__u32 shift = a->size >= 8 ? 0 : 64 - 8 * (__u32)a->size;
	v <<= shift;
	if (a->is_signed)
		return (__u64)((__s64)v >> shift);
	return v >> shift;
}

/* A USER_BY_STR site's call, counted by the string its argument points
 * at and the stack that made it: `len` bytes of the string when the
 * marker passes a length (the JVM's class names are not NUL-terminated),
 * else up to its NUL; cut to RIG_USER_STR - 1 bytes. A string that cannot be read is counted under
 * the empty one, and the read failure in the stats. */
static __always_inline void count_by_str(struct pt_regs *ctx, __u32 site, __u32 tgid, __u64 arg,
					 __u64 ustack)
{
	struct user_by_arg *b = bpf_map_lookup_elem(&user_by_args, &site);
	if (!b)
		return;
	struct user_str_key k = { .site = site, .tgid = tgid, .ustack = ustack };
	__u64 ptr = user_arg_value(ctx, &b->ptr);
	long err = 0;
	if (b->len.kind != USER_ARG_NONE) {
		__u64 n = user_arg_value(ctx, &b->len);
		if (n > RIG_USER_STR - 1)
			n = RIG_USER_STR - 1;
		if (n > 0)
			err = bpf_probe_read_user(k.str, n & 63, (void *)ptr);
	} else {
		err = bpf_probe_read_user_str(k.str, sizeof(k.str), (void *)ptr) < 0;
	}
	if (err) {
		__builtin_memset(k.str, 0, sizeof(k.str));
		stat_add(RIG_STAT_READ_FAIL, 1);
	}
	struct user_val zero = {};
	struct user_val *v = upsert(&user_by_str, &k, &zero);
	if (v) {
		v->calls++;
		v->sum += arg;
	}
}

/* Any process of the target, from its fork on: a probe placed on a file
 * for every process running it counts a process the tree forks from its
 * first instruction (is_target, not is_live_target: a user probe is a
 * count of its own, not a share of the other uprobe families'). */
static __always_inline int count_user(struct pt_regs *ctx, __u64 caller)
{
	__u32 tgid = current_tgid();
	if (!is_target(tgid))
		return 0;
	stat_add(RIG_STAT_EVENTS, 1);
	struct user_key k = {
		.caller = caller,
		.site = (__u32)attach_cookie(ctx),
		.tgid = tgid,
	};
	struct user_arg *a = bpf_map_lookup_elem(&user_args, &k.site);
	__u64 arg = user_arg_value(ctx, a);
	if (a && (a->flags & USER_TIMED)) {
		struct user_inflight_key ik = { .tid = current_tid(), .sp = PT_REGS_SP(ctx) };
		if (bpf_map_update_elem(&user_inflight, &ik, &k.site, BPF_ANY))
			stat_add(RIG_STAT_MAP_FULL, 1);
		struct user_depth_key dk = { .tid = current_tid(), .site = k.site };
		struct user_depth *d = bpf_map_lookup_elem(&user_depths, &dk);
		if (d) {
			d->depth++;
		} else {
			struct user_depth first = { .entered = bpf_ktime_get_ns(), .depth = 1 };
			if (bpf_map_update_elem(&user_depths, &dk, &first, BPF_ANY))
				stat_add(RIG_STAT_MAP_FULL, 1);
		}
	}
	struct user_val zero = {};
	struct user_val *v = upsert(&user_calls, &k, &zero);
	if (v) {
		v->calls++;
		v->sum += arg;
	}
	__u64 ustack = take_ustack(tgid, PT_REGS_IP(ctx), PT_REGS_SP(ctx), PT_REGS_FP(ctx));
	stack_add(tgid, ustack, -1, STACK_USER, k.site, arg);
	if (a && (a->flags & USER_BY_STR))
		count_by_str(ctx, k.site, tgid, arg, ustack);
	return 0;
}

/* At a marker: the code that fired it is where the probe is. */
SEC("uprobe")
int rig_user_usdt(struct pt_regs *ctx) { return count_user(ctx, PT_REGS_IP(ctx)); }

/* At a function's entry: its caller. */
SEC("uprobe")
int rig_user_func(struct pt_regs *ctx)
{
	return count_user(ctx, caller_through(caller_of(ctx), uretprobe_trampoline(), PT_REGS_SP(ctx)));
}

/* At a Go function's stack check: the pass that grows the stack starts the
 * function again and is counted then. */
SEC("uprobe")
int rig_user_go(struct pt_regs *ctx)
{
	if (go_stack_grows(ctx))
		return 0;
	return count_user(ctx, caller_of(ctx));
}

/* At the handler of an interpreter's call instruction (`--interp-calls`):
 * a call of an interpreted function, counted by the code object it enters
 * (the key's caller, named at the window's end); a generator resumed
 * passes. The site's `value` holds the opcodes a call starts with. */
SEC("uprobe")
int rig_user_interp(struct pt_regs *ctx)
{
	__u32 tgid = current_tgid();
	if (!is_target(tgid))
		return 0;
	__u32 site = (__u32)attach_cookie(ctx);
	struct user_arg *a = bpf_map_lookup_elem(&user_args, &site);
	if (!a)
		return 0;
	__u64 code = interp_call_code(tgid, (__u64)a->value);
	if (!code)
		return 0;
	return count_user(ctx, code);
}

/* At a timed function's return (a uretprobe, never in Go code): the call
 * is found by its thread and stack pointer (the return popped one word
 * off the entry's), and the time since the thread's outermost call of the
 * same site entered is added when that call returns. */
SEC("uretprobe")
int rig_user_ret(struct pt_regs *ctx)
{
	__u32 tgid = current_tgid();
	if (!is_target(tgid))
		return 0;
	struct user_inflight_key ik = { .tid = current_tid(), .sp = PT_REGS_SP(ctx) - 8 };
	__u32 *site = bpf_map_lookup_elem(&user_inflight, &ik);
	if (!site) {
		/* Entered before the entry probe was in. */
		stat_add(RIG_STAT_UNPAIRED, 1);
		return 0;
	}
	struct user_depth_key dk = { .tid = ik.tid, .site = *site };
	bpf_map_delete_elem(&user_inflight, &ik);
	struct user_depth *d = bpf_map_lookup_elem(&user_depths, &dk);
	if (!d) {
		/* Entered before the entry probe was in. */
		stat_add(RIG_STAT_UNPAIRED, 1);
		return 0;
	}
	if (d->depth > 1) {
		d->depth--;
		return 0;
	}
	__u64 ns = bpf_ktime_get_ns() - d->entered;
	bpf_map_delete_elem(&user_depths, &dk);
	struct user_time_key tk = { .site = dk.site, .tgid = tgid };
	__u64 zero = 0;
	__u64 *t = upsert(&user_ns, &tk, &zero);
	if (t)
		*t += ns;
	return 0;
}
