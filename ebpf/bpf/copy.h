/* Rust twin: ebpf/src/abi.rs (`CopyKey`, `CopyVal`). */
#ifndef RIG_COPY_H
#define RIG_COPY_H
#include <linux/types.h>

/* The attach cookie: an index into the harness's table of probed
 * implementations (memcpy and memmove often share one). */
enum copy_bucket {
	COPY_LT_64 = 0,
	COPY_LT_1K = 1,
	COPY_LT_16K = 2,
	COPY_GE_16K = 3,
};

struct copy_key {
	__u64 caller;
	__u32 impl;   /* attach cookie */
	__u32 bucket; /* enum copy_bucket */
	__u32 tgid;
	__u32 _pad;
};
_Static_assert(sizeof(struct copy_key) == 24, "copy_key ABI");

struct copy_val {
	__u64 calls;
	__u64 bytes;
};
_Static_assert(sizeof(struct copy_val) == 16, "copy_val ABI");
#endif
