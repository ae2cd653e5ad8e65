/* Rust twin: ebpf/src/abi.rs (`UserKey`, `UserArg`, `user_arg`). */
#ifndef RIG_USER_H
#define RIG_USER_H
#include <linux/types.h>

/* The probes a user names (`--usdt`, `--func`): every place one is
 * attached is a site; the attach cookie is the site's index in the
 * harness's table of them (`ProbeSet::user_sites`). */
#define RIG_USER_SITES 4096

/* Where a USDT marker's summed argument is when it fires
 * (`struct user_arg.kind`). */
enum user_arg_kind {
	USER_ARG_NONE = 0,  /* nothing summed */
	USER_ARG_CONST = 1, /* `value` itself */
	USER_ARG_REG = 2,   /* the register at `reg_off` of pt_regs */
	USER_ARG_MEM = 3,   /* memory at that register + `value` */
	USER_ARG_IPREL = 4, /* memory at the marker's address + `value`: a
			     * global the note names `sym(%rip)` */
};

/* The site's function is timed (`--func-time`): its entry is recorded per
 * thread and its return (rig_user_ret) adds the time inside. */
#define USER_TIMED 1
/* The site's calls are also counted by the string an argument points at
 * (`--usdt PROVIDER:NAME#N[/L]`): `user_by_args` says where it is. */
#define USER_BY_STR 2

/* Bytes of a string argument kept (the rest of a longer one is cut). */
#define RIG_USER_STR 56

/* Per site, filled by the harness before the site's probe goes in. */
struct user_arg {
	__u8 kind;      /* enum user_arg_kind */
	__u8 size;      /* bytes: 1, 2, 4 or 8 */
	__u8 is_signed; /* sign-extend from `size` bytes */
	__u8 flags;     /* USER_TIMED */
	__u16 reg_off; /* offset in struct pt_regs */
	__u16 _pad1;
	__s64 value; /* the constant, or the displacement; at an interpreter's
		      * call handler (rig_user_interp), the opcodes a call
		      * starts with (bits 0-7, 8-15) */
};
_Static_assert(sizeof(struct user_arg) == 16, "user_arg ABI");

struct user_key {
	__u64 caller; /* the marker's address, or the function's return address */
	__u32 site;   /* attach cookie */
	__u32 tgid;
};
_Static_assert(sizeof(struct user_key) == 16, "user_key ABI");

/* Where a USER_BY_STR site's string is: the pointer, and its length when
 * the marker passes one (`len.kind` USER_ARG_NONE: up to its NUL). */
struct user_by_arg {
	struct user_arg ptr;
	struct user_arg len;
};
_Static_assert(sizeof(struct user_by_arg) == 32, "user_by_arg ABI");

/* A USER_BY_STR site's calls by the string (NUL-padded) and the user
 * stack that made them (a `ustacks` id; 0 without stacks), so each value
 * is named where it was made (a Java class at the Java method that makes
 * it). */
struct user_str_key {
	__u32 site;
	__u32 tgid;
	__u64 ustack;
	char str[RIG_USER_STR];
};
_Static_assert(sizeof(struct user_str_key) == 72, "user_str_key ABI");

/* Value: struct user_val { calls, sum } (the argument summed; 0 without). */
struct user_val {
	__u64 calls;
	__u64 sum;
};
_Static_assert(sizeof(struct user_val) == 16, "user_val ABI");
/* A thread inside a timed function: when its outermost call entered, and
 * how deep it has recursed (only the outermost call's time is added, so
 * recursion is counted once). */
struct user_depth_key {
	__u32 tid;
	__u32 site;
};
_Static_assert(sizeof(struct user_depth_key) == 8, "user_depth_key ABI");

struct user_depth {
	__u64 entered;
	__u32 depth;
	__u32 _pad;
};

/* A timed call in flight: its thread and its stack pointer at entry (the
 * return address's slot). Its return, where the stack pointer is one word
 * above, finds its site here: no attach cookie is needed at a return, so
 * kernels that hand uprobes none (before 5.15) pair calls the same way. */
struct user_inflight_key {
	__u32 tid;
	__u32 _pad;
	__u64 sp;
};
_Static_assert(sizeof(struct user_inflight_key) == 16, "user_inflight_key ABI");

/* Time inside a timed site's function, per process. */
struct user_time_key {
	__u32 site;
	__u32 tgid;
};
_Static_assert(sizeof(struct user_time_key) == 8, "user_time_key ABI");
#endif
