// SPDX-License-Identifier: GPL-2.0
/* memcpy / memmove / memset bytes and calls by (caller, implementation, size
 * bucket). The harness attaches this at the IFUNC implementation the target
 * really runs (read from its resolved GOT), never at the `memcpy` symbol. All
 * three take the length in the third argument. Go's runtime copies and
 * clears with its own routines, which take their arguments in Go's register
 * ABI (Go 1.17 on): runtime.memmove(to, from, n) has n in rcx,
 * runtime.memclrNoHeapPointers(ptr, n) in rbx. */
#include "common.bpf.h"
#include "copy.h"

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct copy_key);
	__type(value, struct copy_val);
} copies SEC(".maps");

static __always_inline int count_copy(struct pt_regs *ctx, __u64 n)
{
	if (!is_live_target(current_tgid()))
		return 0;
	stat_add(RIG_STAT_EVENTS, 1);
	__u32 bucket = n < 64 ? COPY_LT_64 : n < 1024 ? COPY_LT_1K : n < 16384 ? COPY_LT_16K : COPY_GE_16K;
	struct copy_key k = {
		.caller = caller_through(caller_of(ctx), uretprobe_trampoline(), PT_REGS_SP(ctx)),
		.impl = (__u32)attach_cookie(ctx),
		.bucket = bucket,
		.tgid = current_tgid(),
	};
	struct copy_val zero = {};
	struct copy_val *v = upsert(&copies, &k, &zero);
	if (v) {
		v->calls++;
		v->bytes += n;
	}
	__u64 ustack = take_ustack(k.tgid, PT_REGS_IP(ctx), PT_REGS_SP(ctx), PT_REGS_FP(ctx));
	stack_add(k.tgid, ustack, -1, STACK_COPY, k.impl, n);
	return 0;
}

SEC("uprobe")
int rig_copy(struct pt_regs *ctx) { return count_copy(ctx, PT_REGS_PARM3(ctx)); }

SEC("uprobe")
int rig_copy_go_memmove(struct pt_regs *ctx) { return count_copy(ctx, ctx->rcx); }

SEC("uprobe")
int rig_copy_go_memclr(struct pt_regs *ctx) { return count_copy(ctx, ctx->rbx); }
