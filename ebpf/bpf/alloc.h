/* Rust twin: ebpf/src/abi.rs (`AllocKey`, `AllocVal`, `AllocKind`). */
#ifndef RIG_ALLOC_H
#define RIG_ALLOC_H
#include <linux/types.h>

/* Which allocator entry point fired; passed as the uprobe's attach cookie. */
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
};

/* size_class for frees of a NULL pointer (counted apart: they free nothing). */
#define ALLOC_CLASS_NULL_FREE 0xffffffffu

struct alloc_key {
	__u64 caller;     /* return address read at entry */
	__u32 kind;       /* enum alloc_kind */
	__u32 size_class; /* ceil(log2(size)); 0 for size 0 and 1 */
	__u32 tgid;       /* the process (caller is an address in its space) */
	__u32 _pad;
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
#endif
