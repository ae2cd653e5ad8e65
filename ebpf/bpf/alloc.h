/* Rust twin: ebpf/src/abi.rs (`AllocKey`, `AllocVal`, `AllocKind`). */
#ifndef RIG_ALLOC_H
#define RIG_ALLOC_H
#include <linux/types.h>

/* Which allocator entry point fired. The uprobe's attach cookie is
 * kind | entry << ALLOC_ENTRY_SHIFT: the kind (what the call does: allocate,
 * reallocate, free...) and the index of the probed entry point in the
 * harness's table (which allocator, which symbol). */
#define ALLOC_KIND_MASK 0xffu
/* Cookie bit of an entry point with no uretprobe (rig_alloc_ret): a runtime
 * where a hijacked return address breaks the program (Go moves goroutine
 * stacks). Its calls are counted, and inner when made inside an outer call,
 * but never become a thread's outer call: nothing would see them end. */
#define ALLOC_COOKIE_NO_RETURN (1u << 8)
#define ALLOC_ENTRY_SHIFT 16
#define ALLOC_ENTRY_MASK 0x7fffu
enum alloc_kind {
	ALLOC_MALLOC = 1,
	ALLOC_CALLOC = 2,
	ALLOC_REALLOC = 3,
	ALLOC_FREE = 4,
	ALLOC_POSIX_MEMALIGN = 5,
	ALLOC_MEMALIGN = 6,      /* also aligned_alloc when it is the same code */
	ALLOC_ALIGNED_ALLOC = 7,
	ALLOC_VALLOC = 8,
	ALLOC_PVALLOC = 9,
	ALLOC_CXX_NEW = 10,
	ALLOC_CXX_NEW_ARRAY = 11,
	ALLOC_CXX_DELETE = 12,
	ALLOC_CXX_DELETE_ARRAY = 13,
	/* jemalloc's non-standard API (also `je_`/`_rjem_`-prefixed) */
	ALLOC_MALLOCX = 14,  /* mallocx(size, flags) */
	ALLOC_RALLOCX = 15,  /* rallocx(ptr, size, flags) */
	ALLOC_SDALLOCX = 16, /* sdallocx(ptr, size, flags) */
	ALLOC_DALLOCX = 17,  /* dallocx(ptr, flags) */
	/* Rust's allocator shims (__rust_alloc, __rg_alloc, __rdl_alloc...) */
	ALLOC_RUST_ALLOC = 18,        /* (size, align) */
	ALLOC_RUST_ALLOC_ZEROED = 19, /* (size, align) */
	ALLOC_RUST_REALLOC = 20,      /* (ptr, old_size, align, new_size) */
	ALLOC_RUST_DEALLOC = 21,      /* (ptr, size, align) */
	/* Go: runtime.mallocgc(size, typ, needzero), the register ABI (Go 1.17
	 * on: size in RAX); and a completed garbage collection
	 * (runtime.gcMarkTermination, once per cycle), which allocates nothing. */
	ALLOC_GO_MALLOCGC = 22,
	ALLOC_GO_GC = 23,
	/* An application's own allocator (haproxy's pools, APR's, nginx's,
	 * PostgreSQL's memory contexts, glib's slices, or a function the user
	 * declares with --alloc-func / --free-func): its blocks come from
	 * memory it took from malloc or the kernel, so the live heap leaves
	 * them out. */
	ALLOC_POOL_ALLOC = 24,
	ALLOC_POOL_FREE = 25,
};

/* size_class for frees of a NULL pointer (counted apart: they free nothing). */
#define ALLOC_CLASS_NULL_FREE 0xffffffffu
/* size_class of an allocation whose size rig cannot read (an application
 * allocator with no size argument): counted, its bytes unknown. */
#define ALLOC_CLASS_UNSIZED 0xfffffffeu

/* alloc_key.flags */
#define ALLOC_FLAG_INNER 1u /* made inside another allocator call (see alloc_frame) */

struct alloc_key {
	__u64 caller;     /* return address read at entry */
	__u32 kind;       /* the attach cookie: enum alloc_kind | entry << ALLOC_ENTRY_SHIFT */
	__u32 size_class; /* ceil(log2(size)); 0 for size 0 and 1 */
	__u32 tgid;       /* the process (caller is an address in its space) */
	__u32 flags;      /* ALLOC_FLAG_* */
};
_Static_assert(sizeof(struct alloc_key) == 24, "alloc_key ABI");

struct alloc_val {
	__u64 calls;
	__u64 bytes;
};
_Static_assert(sizeof(struct alloc_val) == 16, "alloc_val ABI");
/* A call entering through a forwarder (an entry point that only jumps to
 * another, e.g. libstdc++'s operator new[] -> operator new -> ..., operator
 * delete -> free): noted per thread so the probe at the end of the jump chain
 * counts the call once, under the API the caller called. */
struct alloc_fwd {
	__u64 sp;
	__u64 caller;
	__u32 kind;
	__u32 _pad;
};
_Static_assert(sizeof(struct alloc_fwd) == 24, "alloc_fwd ABI");
/* The outermost allocator call a thread is in, from its entry until its
 * return (rig_alloc_ret removes it): its stack pointer at entry (where its
 * return address sits), that return address and its entry point. A call
 * made while it is here runs inside it (pymalloc calling malloc, a Rust shim
 * calling jemalloc, operator new calling malloc): it is marked inner, so no
 * total counts one request for memory twice. A call at the same stack
 * pointer and return address through a different entry point is a tail jump
 * from the outer entry (a Rust shim jumping into mimalloc) and inner too. */
struct alloc_frame {
	__u64 sp;
	__u64 ret;
	__u32 cookie; /* the entry point (a tail jump into another one is inner too) */
	__u32 _pad;
};
_Static_assert(sizeof(struct alloc_frame) == 24, "alloc_frame ABI");
/* Live heap (only when the loader sets rig_live_heap): each allocation's
 * returned address, read at its return by a uretprobe, until it is freed.
 * Keyed by (address, process). */
struct live_key {
	__u64 addr;
	__u32 tgid;
	__u32 _pad;
};
_Static_assert(sizeof(struct live_key) == 16, "live_key ABI");

struct live_val {
	__u64 bytes;  /* as asked for (not the allocator's rounded size) */
	__u64 caller; /* return address of the outermost allocator call */
	__u64 ustack; /* its whole stack's id in `ustacks` (0: stacks off) */
	__u32 kind;   /* its attach cookie, as alloc_key.kind */
	__u32 epoch;  /* the live_epoch when it was made */
};
_Static_assert(sizeof(struct live_val) == 32, "live_val ABI");

/* An outermost allocating call between its entry and its return, per
 * thread. The uretprobe whose stack pointer is this sp + 8 (the return
 * address popped) is this call's return; an inner call's return (malloc
 * under operator new) has a lower one and is ignored. */
struct live_pending {
	__u64 sp;
	__u64 bytes;
	__u64 caller;
	__u64 ustack;
	__u64 old; /* realloc: the block it replaces (0: none) */
	__u64 out; /* posix_memalign: where the address is written */
	__u32 kind;
	__u32 _pad;
};
_Static_assert(sizeof(struct live_pending) == 56, "live_pending ABI");

/* Slots of the per-CPU live_counts array (monotonic: a window reads the
 * difference). */
enum live_count {
	LIVE_UNMATCHED_FREES = 0, /* a free of a block not allocated in this window */
	LIVE_DROPPED = 1,         /* allocations not recorded: `live` was full */
	LIVE_DROPPED_BYTES = 2,
	LIVE_FAILED = 3,          /* allocations that returned NULL (nothing live) */
	LIVE_RECORDED = 4,        /* allocations recorded (each outermost call once) */
	LIVE_COUNT_SLOTS = 5,
};

struct live_counts {
	__u64 slot[LIVE_COUNT_SLOTS];
};
_Static_assert(sizeof(struct live_counts) == 40, "live_counts ABI");
#endif
