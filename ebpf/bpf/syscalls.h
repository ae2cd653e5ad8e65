/* Rust twin: ebpf/src/abi.rs (`SysKey`, `SysCount`; `sys_start` is kernel-only). */
#ifndef RIG_SYSCALLS_H
#define RIG_SYSCALLS_H
#include <linux/types.h>

/* x86_64 `uretprobe` syscall: issued by the kernel's uretprobe trampoline
 * inside the target, i.e. by our probes, never by the target's own code. */
#define RIG_NR_URETPROBE 335

struct sys_start {
	__u64 ts;
	__u32 nr;
	__u32 _pad;
};
_Static_assert(sizeof(struct sys_start) == 16, "sys_start ABI");

struct sys_key {
	__u32 tgid;
	__u32 nr;
};
_Static_assert(sizeof(struct sys_key) == 8, "sys_key ABI");

struct sys_count {
	__u64 count;   /* entries into the syscall */
	__u64 exits;   /* returns observed */
	__u64 ns;      /* entry-to-return time of the observed returns */
};
_Static_assert(sizeof(struct sys_count) == 24, "sys_count ABI");
#endif
