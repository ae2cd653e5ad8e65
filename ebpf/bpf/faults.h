/* Rust twin: ebpf/src/abi.rs (`FaultKey`). Value: __u64 count. */
#ifndef RIG_FAULTS_H
#define RIG_FAULTS_H
#include <linux/types.h>

enum fault_kind {
	FAULT_MINOR = 0,
	FAULT_MAJOR = 1,
};

struct fault_key {
	__u64 ip;        /* user IP of the faulting instruction, or of the
			    syscall that faulted in the kernel on a user page */
	__u32 kind;      /* enum fault_kind */
	__u32 in_kernel; /* 1: the fault was taken in kernel mode */
	__u32 tgid;
	__u32 _pad;
};
_Static_assert(sizeof(struct fault_key) == 24, "fault_key ABI");
#endif
