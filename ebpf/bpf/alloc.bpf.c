// SPDX-License-Identifier: GPL-2.0
/* Allocator calls and bytes by (caller, entry point, size class). A uprobe
 * on each entry point counts the call; the attach cookie says which entry
 * point fired; one program per argument layout. A uretprobe on each entry
 * point (rig_alloc_ret) sees the calls return, so a call made inside
 * another allocator call is known to be inner exactly (inner_call).
 *
 * The live heap, when the loader sets rig_live_heap: the same uretprobe
 * reads the address the outermost call returned, `live` keeps it (with its
 * size and caller) until a free or realloc of that address removes it. */
#include "common.bpf.h"
#include "sizeclass.bpf.h"
#include "alloc.h"

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct alloc_key);
	__type(value, struct alloc_val);
} allocs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32); /* tid */
	__type(value, struct alloc_fwd);
} fwds SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32); /* tid */
	__type(value, struct alloc_frame);
} frames SEC(".maps");

/* Set by the loader; 0 leaves the live heap out (no map is sized, no
 * uretprobe attached, the entry programs skip it). */
const volatile __u8 rig_live_heap = 0;

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1); /* sized by the loader */
	__type(key, struct live_key);
	__type(value, struct live_val);
} live SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1); /* sized by the loader */
	__type(key, __u32); /* tid */
	__type(value, struct live_pending);
} live_pendings SEC(".maps");

/* The current window's number, written by the harness when it opens one:
 * a block made under an older number was allocated before the window. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} live_epoch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct live_counts);
} live_count SEC(".maps");

static __always_inline void live_add_count(__u32 slot, __u64 n)
{
	__u32 zero = 0;
	struct live_counts *c = bpf_map_lookup_elem(&live_count, &zero);
	if (c && slot < LIVE_COUNT_SLOTS)
		c->slot[slot] += n;
}

static __always_inline __u32 live_now(void)
{
	__u32 zero = 0;
	__u32 *e = bpf_map_lookup_elem(&live_epoch, &zero);
	return e ? *e : 0;
}

/* A free (or the old block of a realloc) of addr: no longer live. A block
 * the map does not hold, or holds from before the window, was allocated
 * before it: counted apart, never subtracted. */
static __always_inline void live_forget(__u32 tgid, __u64 addr)
{
	struct live_key k = { .addr = addr, .tgid = tgid };
	struct live_val *v = bpf_map_lookup_elem(&live, &k);
	if (!v || v->epoch != live_now())
		live_add_count(LIVE_UNMATCHED_FREES, 1);
	if (v)
		bpf_map_delete_elem(&live, &k);
}

static __always_inline int is_free_kind(__u32 kind)
{
	switch (kind) {
	case ALLOC_FREE:
	case ALLOC_CXX_DELETE:
	case ALLOC_CXX_DELETE_ARRAY:
	case ALLOC_SDALLOCX:
	case ALLOC_DALLOCX:
	case ALLOC_RUST_DEALLOC:
	case ALLOC_POOL_FREE:
		return 1;
	}
	return 0;
}

static __always_inline int is_realloc_kind(__u32 kind)
{
	return kind == ALLOC_REALLOC || kind == ALLOC_RALLOCX || kind == ALLOC_RUST_REALLOC;
}

/* At the entry of an outermost call: a free forgets its block now; an
 * allocation waits for its return (rig_alloc_ret). Every kind rig probes
 * takes the block to free or reallocate as its first argument. */
static __always_inline void live_entry(struct pt_regs *ctx, __u32 tid, __u32 tgid, __u64 bytes,
				       __u64 caller, __u32 cookie, __u64 ustack)
{
	__u32 kind = cookie & ALLOC_KIND_MASK;
	__u64 p1 = PT_REGS_PARM1(ctx);
	if (kind == ALLOC_POOL_ALLOC || kind == ALLOC_POOL_FREE)
		return;
	if (is_free_kind(kind)) {
		if (p1)
			live_forget(tgid, p1);
		return;
	}
	struct live_pending p = {
		.sp = PT_REGS_SP(ctx),
		.bytes = bytes,
		.caller = caller,
		.ustack = ustack,
		.old = is_realloc_kind(kind) ? p1 : 0,
		.out = kind == ALLOC_POSIX_MEMALIGN ? p1 : 0,
		.kind = cookie,
	};
	if (bpf_map_update_elem(&live_pendings, &tid, &p, BPF_ANY))
		stat_add(RIG_STAT_MAP_FULL, 1);
}

/* The return of an allocator entry point (every one rig counts has this
 * uretprobe, but those marked ALLOC_COOKIE_NO_RETURN). The return of the
 * thread's outer call (its stack pointer is the frame's, the return address
 * popped) takes the thread out of the allocator: its frame goes, and the
 * next call is an outer one again. With the live heap, the address an
 * outermost allocating call returned is live from now. */
SEC("uretprobe")
int rig_alloc_ret(struct pt_regs *ctx)
{
	__u32 tgid = current_tgid();
	if (!is_live_target(tgid))
		return 0;
	__u32 tid = current_tid();
	struct alloc_frame *o = bpf_map_lookup_elem(&frames, &tid);
	if (o && o->sp + 8 == PT_REGS_SP(ctx))
		bpf_map_delete_elem(&frames, &tid);
	if (!rig_live_heap)
		return 0;
	struct live_pending *pp = bpf_map_lookup_elem(&live_pendings, &tid);
	if (!pp || pp->sp + 8 != PT_REGS_SP(ctx))
		return 0;
	struct live_pending p = *pp;
	bpf_map_delete_elem(&live_pendings, &tid);
	__u64 addr = PT_REGS_RC(ctx);
	if ((p.kind & ALLOC_KIND_MASK) == ALLOC_POSIX_MEMALIGN) {
		/* returns an error number; the block is written to *out */
		__u64 got = 0;
		if (addr != 0 || !p.out)
			addr = 0;
		else if (bpf_probe_read_user(&got, sizeof(got), (void *)p.out))
			stat_add(RIG_STAT_READ_FAIL, 1);
		else
			addr = got;
	}
	if (p.old && (addr || p.bytes == 0))
		/* moved, or realloc(p, 0) freed it */
		live_forget(tgid, p.old);
	if (!addr) {
		if (p.bytes)
			live_add_count(LIVE_FAILED, 1);
		return 0;
	}
	struct live_key k = { .addr = addr, .tgid = tgid };
	struct live_val v = {
		.bytes = p.bytes, .caller = p.caller, .ustack = p.ustack, .kind = p.kind,
		.epoch = live_now(),
	};
	if (bpf_map_update_elem(&live, &k, &v, BPF_ANY)) {
		stat_add(RIG_STAT_MAP_FULL, 1);
		live_add_count(LIVE_DROPPED, 1);
		live_add_count(LIVE_DROPPED_BYTES, p.bytes);
	} else {
		live_add_count(LIVE_RECORDED, 1);
	}
	return 0;
}

/* Whether this call runs inside an allocator call still in progress on this
 * thread (struct alloc_frame); if not, it becomes the thread's outermost.
 *
 * Exact, because the outer call's frame is removed by its return
 * (rig_alloc_ret): a frame in the map is a call that has not returned. A
 * call below its stack pointer runs inside it; one at the same stack
 * pointer and return address through another entry point is the outer
 * entry's tail jump (a Rust shim jumping into the allocator). A call at or
 * above the frame's slot otherwise means the frame's return was never seen
 * (an exception thrown through operator new): the frame is replaced.
 *
 * An entry without a return probe (ALLOC_COOKIE_NO_RETURN) is never made a
 * thread's outer call: nothing would end it. */
static __always_inline __u32 inner_call(__u32 tid, __u64 sp, __u64 ret, __u32 cookie)
{
	struct alloc_frame *o = bpf_map_lookup_elem(&frames, &tid);
	if (o) {
		if (sp < o->sp)
			return ALLOC_FLAG_INNER;
		if (sp == o->sp && ret == o->ret && (cookie & ~ALLOC_COOKIE_NO_RETURN) != o->cookie)
			return ALLOC_FLAG_INNER;
		stat_add(RIG_STAT_UNPAIRED, 1);
		bpf_map_delete_elem(&frames, &tid);
	}
	if (cookie & ALLOC_COOKIE_NO_RETURN)
		return 0;
	struct alloc_frame f = { .sp = sp, .ret = ret, .cookie = cookie };
	if (bpf_map_update_elem(&frames, &tid, &f, BPF_ANY))
		stat_add(RIG_STAT_MAP_FULL, 1);
	return 0;
}

static __always_inline int record(struct pt_regs *ctx, __u64 bytes, __u32 cls)
{
	if (!is_live_target(current_tgid()))
		return 0;
	stat_add(RIG_STAT_EVENTS, 1);
	__u64 tramp = uretprobe_trampoline();
	__u32 cookie = (__u32)attach_cookie(ctx);
	struct alloc_key k = {
		.caller = caller_through(caller_of(ctx), tramp, PT_REGS_SP(ctx)),
		.kind = cookie & ~ALLOC_COOKIE_NO_RETURN,
		.size_class = cls,
		.tgid = current_tgid(),
	};
	/* Reached by jumps from a forwarder: same stack pointer, same return
	 * address. Count it once, as the API the caller called. */
	__u32 tid = current_tid();
	struct alloc_fwd *f = bpf_map_lookup_elem(&fwds, &tid);
	if (f) {
		if (f->sp == PT_REGS_SP(ctx) && f->caller == k.caller)
			k.kind = f->kind;
		bpf_map_delete_elem(&fwds, &tid);
	}
	/* An application allocator is a layer beside the heap's: its calls
	 * are never inside or around the heap's (a pool growing by malloc is
	 * the heap's own call). */
	__u32 kind = k.kind & ALLOC_KIND_MASK;
	if (kind == ALLOC_POOL_ALLOC || kind == ALLOC_POOL_FREE)
		k.flags = 0;
	else
		k.flags = inner_call(tid, PT_REGS_SP(ctx), k.caller,
				     k.kind | (cookie & ALLOC_COOKIE_NO_RETURN));
	struct alloc_val zero = {};
	struct alloc_val *v = upsert(&allocs, &k, &zero);
	if (v) {
		v->calls++;
		v->bytes += bytes;
	}
	__u64 ustack = take_ustack(k.tgid, PT_REGS_IP(ctx), PT_REGS_SP(ctx), PT_REGS_FP(ctx));
	if (rig_live_heap && !(k.flags & ALLOC_FLAG_INNER))
		live_entry(ctx, tid, k.tgid, bytes, k.caller, k.kind, ustack);
	/* arg: inner << 31 | entry << 16 | kind << 8 | size class */
	__u32 arg = (k.flags & ALLOC_FLAG_INNER) << 31 |
		    ((k.kind >> ALLOC_ENTRY_SHIFT) & ALLOC_ENTRY_MASK) << 16 |
		    (k.kind & ALLOC_KIND_MASK) << 8 | (cls & 0xff);
	stack_add(k.tgid, ustack, -1, STACK_ALLOC, arg, bytes);
	return 0;
}

/* An entry point that only jumps on (see struct alloc_fwd). The outermost
 * forwarder of a chain names the call. */
SEC("uprobe")
int rig_alloc_fwd(struct pt_regs *ctx)
{
	if (!is_live_target(current_tgid()))
		return 0;
	__u32 tid = current_tid();
	struct alloc_fwd f = {
		.sp = PT_REGS_SP(ctx),
		.caller = caller_through(caller_of(ctx), uretprobe_trampoline(), PT_REGS_SP(ctx)),
		.kind = (__u32)attach_cookie(ctx),
	};
	struct alloc_fwd *outer = bpf_map_lookup_elem(&fwds, &tid);
	if (outer && outer->sp == f.sp && outer->caller == f.caller)
		return 0;
	if (bpf_map_update_elem(&fwds, &tid, &f, BPF_ANY))
		stat_add(RIG_STAT_MAP_FULL, 1);
	return 0;
}

/* malloc(size), valloc, pvalloc, operator new(size, ...) */
SEC("uprobe")
int rig_alloc_arg1(struct pt_regs *ctx)
{
	__u64 n = PT_REGS_PARM1(ctx);
	return record(ctx, n, size_class(n));
}

/* calloc(nmemb, size) */
SEC("uprobe")
int rig_alloc_calloc(struct pt_regs *ctx)
{
	__u64 n = PT_REGS_PARM1(ctx) * PT_REGS_PARM2(ctx);
	return record(ctx, n, size_class(n));
}

/* realloc(ptr, size), memalign(align, size), aligned_alloc(align, size),
 * rallocx(ptr, size, flags), mi_realloc_aligned(ptr, size, align) */
SEC("uprobe")
int rig_alloc_arg2(struct pt_regs *ctx)
{
	__u64 n = PT_REGS_PARM2(ctx);
	return record(ctx, n, size_class(n));
}

/* posix_memalign(&ptr, align, size) */
SEC("uprobe")
int rig_alloc_arg3(struct pt_regs *ctx)
{
	__u64 n = PT_REGS_PARM3(ctx);
	return record(ctx, n, size_class(n));
}

/* __rust_realloc(ptr, old_size, align, new_size) */
SEC("uprobe")
int rig_alloc_arg4(struct pt_regs *ctx)
{
	__u64 n = PT_REGS_PARM4(ctx);
	return record(ctx, n, size_class(n));
}

/* An application allocator's size in its fifth or sixth argument
 * (--alloc-func NAME@4, @5). */
SEC("uprobe")
int rig_alloc_arg5(struct pt_regs *ctx)
{
	__u64 n = PT_REGS_PARM5(ctx);
	return record(ctx, n, size_class(n));
}

SEC("uprobe")
int rig_alloc_arg6(struct pt_regs *ctx)
{
	/* x86-64's sixth integer argument; Debian's libbpf 1.1 has no
	 * PT_REGS_PARM6. */
	__u64 n = ctx->r9;
	return record(ctx, n, size_class(n));
}

/* An allocation whose size no argument holds (haproxy's
 * __pool_alloc(pool, flags): the pool knows it). */
SEC("uprobe")
int rig_alloc_unsized(struct pt_regs *ctx)
{
	return record(ctx, 0, ALLOC_CLASS_UNSIZED);
}

/* free(ptr), operator delete(ptr, ...), sdallocx, __rust_dealloc... */
SEC("uprobe")
int rig_alloc_free(struct pt_regs *ctx)
{
	return record(ctx, 0, PT_REGS_PARM1(ctx) ? 0 : ALLOC_CLASS_NULL_FREE);
}

/* Go's allocator, runtime.mallocgc(size, typ, needzero): Go 1.17 and later
 * pass the first integer argument in RAX on amd64 (the harness refuses older
 * versions); the stack check before the probe leaves it there. Entry only:
 * the cookie carries ALLOC_COOKIE_NO_RETURN. */
SEC("uprobe")
int rig_alloc_go(struct pt_regs *ctx)
{
	if (go_stack_grows(ctx))
		return 0;
	__u64 n = PT_REGS_RC(ctx);
	return record(ctx, n, size_class(n));
}

/* runtime.mallocgc where the binary has size-specialized allocators (Go 1.27
 * on, runtime/go/mod.rs): it hands every size from 1 to 80 bytes to one of
 * them, which is probed at its own entry and counts the call there. */
#define GO_SPECIALIZED_BELOW 81
SEC("uprobe")
int rig_alloc_go_dispatch(struct pt_regs *ctx)
{
	if (go_stack_grows(ctx))
		return 0;
	__u64 n = PT_REGS_RC(ctx);
	if (n != 0 && n < GO_SPECIALIZED_BELOW)
		return 0;
	return record(ctx, n, size_class(n));
}

/* One completed Go garbage collection (runtime.gcMarkTermination): counted
 * per call site like an allocator call, allocating nothing. */
SEC("uprobe")
int rig_alloc_go_gc(struct pt_regs *ctx)
{
	if (go_stack_grows(ctx))
		return 0;
	return record(ctx, 0, 0);
}
