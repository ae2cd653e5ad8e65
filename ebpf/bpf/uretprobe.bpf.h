/* The kernel's uretprobe state, read where a uretprobe has replaced a
 * return address (not ABI; CO-RE: only the fields read, relocated against
 * the running kernel's BTF).
 *
 * A uretprobe replaces the return address in its call's stack slot with its
 * trampoline (the first address of the process's uprobe area, the "xol
 * area") and keeps the real one in a return instance on the thread's list,
 * newest first, together with the address of the slot it replaced (the
 * stack pointer at the call's entry). A stack walk or a caller read that
 * meets the trampoline finds the real return address there. */
#ifndef RIG_URETPROBE_BPF_H
#define RIG_URETPROBE_BPF_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

struct xol_area___rig {
	unsigned long vaddr;
} __attribute__((preserve_access_index));
struct uprobes_state___rig {
	struct xol_area___rig *xol_area;
} __attribute__((preserve_access_index));
struct mm_struct___rig {
	struct uprobes_state___rig uprobes_state;
} __attribute__((preserve_access_index));
struct return_instance___rig {
	unsigned long stack;          /* the replaced slot (sp at the entry) */
	unsigned long orig_ret_vaddr; /* what the slot held */
	struct return_instance___rig *next;
} __attribute__((preserve_access_index));
struct uprobe_task___rig {
	struct return_instance___rig *return_instances;
} __attribute__((preserve_access_index));
struct task_struct___rig {
	struct mm_struct___rig *mm;
	struct uprobe_task___rig *utask;
} __attribute__((preserve_access_index));

/* Return instances looked at per trampoline met. The kernel nests at most
 * 64 per thread; a slot is found among the newest few, because instances
 * are consumed innermost first as a stack walk or a call chain meets them
 * (a walk starts at the newest and only moves outwards). */
#define RIG_URETPROBE_SEARCH 8

/* The trampoline's address in the current process (0: no uprobe area yet,
 * so no return address has been replaced). */
static __always_inline __u64 uretprobe_trampoline(void)
{
	struct task_struct___rig *t = (void *)bpf_get_current_task();
	return BPF_CORE_READ(t, mm, uprobes_state.xol_area, vaddr);
}

/* The current thread's newest return instance (0: none). */
static __always_inline __u64 uretprobe_newest(void)
{
	struct task_struct___rig *t = (void *)bpf_get_current_task();
	return (__u64)BPF_CORE_READ(t, utask, return_instances);
}

/* The return address the instance list starting at *ri keeps for the stack
 * slot at `slot` (0: none found). *ri moves past it and past every older
 * instance of the same slot (a tail jump between two probed entry points
 * leaves two for one slot), so the next, outer slot is searched from
 * there. Instances of slots below `slot` belong to frames already passed
 * (or to calls left without returning, which the kernel drops later) and
 * are skipped. */
static __always_inline __u64 uretprobe_orig(__u64 *ri, __u64 slot)
{
	__u64 cur = *ri, found = 0;
	for (int i = 0; i < RIG_URETPROBE_SEARCH; i++) {
		if (!cur)
			break;
		struct return_instance___rig *r = (void *)cur;
		__u64 stack = BPF_CORE_READ(r, stack);
		if (stack > slot)
			break;
		if (stack == slot && !found)
			found = BPF_CORE_READ(r, orig_ret_vaddr);
		cur = (__u64)BPF_CORE_READ(r, next);
	}
	*ri = cur;
	return found;
}

/* The return address read at an entry, through the trampoline: an entry
 * reached by a tail jump from an entry whose uretprobe already replaced the
 * return address (__rust_alloc -> __rdl_alloc -> malloc; musl's calloc ->
 * memset) reads the trampoline, and the caller is the one the kernel kept
 * for this slot. */
static __always_inline __u64 caller_through(__u64 ret, __u64 tramp, __u64 sp)
{
	if (!tramp || ret != tramp)
		return ret;
	__u64 ri = uretprobe_newest();
	return uretprobe_orig(&ri, sp);
}

#endif
