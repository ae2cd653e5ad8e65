#ifndef RIG_SIZECLASS_BPF_H
#define RIG_SIZECLASS_BPF_H
/* ceil(log2(n)) without a loop the verifier must unroll (libbpf-tools'
 * bits.bpf.h shape). */
static __always_inline __u32 log2_u64(__u64 v)
{
	__u32 r = 0, shift;
	shift = (v > 0xFFFFFFFFull) << 5; v >>= shift; r |= shift;
	shift = (v > 0xFFFF) << 4; v >>= shift; r |= shift;
	shift = (v > 0xFF) << 3; v >>= shift; r |= shift;
	shift = (v > 0xF) << 2; v >>= shift; r |= shift;
	shift = (v > 0x3) << 1; v >>= shift; r |= shift;
	r |= (v >> 1);
	return r;
}

static __always_inline __u32 size_class(__u64 n)
{
	if (n <= 1)
		return 0;
	return log2_u64(n - 1) + 1;
}
#endif
