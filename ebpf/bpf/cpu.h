/* Rust twin: ebpf/src/abi.rs (`CpuKey`). */
#ifndef RIG_CPU_H
#define RIG_CPU_H
#include <linux/types.h>

/* On-CPU samples per process and mode (value: u64 samples). */
struct cpu_key {
	__u32 tgid;
	__u32 in_kernel; /* 1: the sample interrupted kernel code */
};
_Static_assert(sizeof(struct cpu_key) == 8, "cpu_key ABI");
#endif
