/* Whole user stacks without frame pointers: the unwind tables the harness
 * builds from each module's .eh_frame, and the per-stack counts every family
 * keeps. Rust twin: ebpf/src/abi.rs (`UnwindRow`, `UnwindMap`, `UnwindProc`,
 * `UStack`, `StackKey`, `StackVal`). Fixed-width fields only, explicit
 * padding, sizes asserted on both sides. */
#ifndef RIG_STACK_H
#define RIG_STACK_H
#include <linux/types.h>

/* Frames kept per stack. A deeper stack keeps its innermost 64 frames and is
 * marked RIG_STACK_TRUNCATED. */
#define RIG_STACK_MAX_FRAMES 64
/* Executable mappings with unwind tables, per address space (a JVM, a
 * Python with its extension modules or a server that dlopens its plugins
 * maps hundreds), searched in groups of RIG_UNWIND_GROUP: first the group,
 * by the highest address of each, then the mapping within it. */
#define RIG_UNWIND_MAX_MAPS 1024
#define RIG_UNWIND_GROUP 16
#define RIG_UNWIND_GROUPS (RIG_UNWIND_MAX_MAPS / RIG_UNWIND_GROUP)
/* Address spaces with tables (a forked child shares its parent's slot). */
#define RIG_UNWIND_MAX_PROCS 64

/* How a row computes the canonical frame address (CFA). */
enum unwind_cfa {
	UNWIND_CFA_NONE = 0, /* no rule here (gap, or a rule rig cannot follow) */
	UNWIND_CFA_RSP = 1,  /* CFA = rsp + cfa_off */
	UNWIND_CFA_RBP = 2,  /* CFA = rbp + cfa_off */
	/* A PLT stub's expression: CFA = rsp + 8, plus 8 once the stub has
	 * pushed (ip & 15 >= cfa_off). */
	UNWIND_CFA_PLT = 3,
	UNWIND_CFA_END = 4,  /* return address undefined: the outermost frame */
	/* Go's runtime.asmcgocall where the C function it called returns, on
	 * the system stack (asm_amd64.s): rsp + 48 holds the goroutine's g
	 * and rsp + 40 asmcgocall's depth below g.stack.hi (g + 8), so CFA =
	 * g.stack.hi - depth + 8, on the goroutine's stack; a g of 0 means it
	 * ran on the system stack already, and rsp + 40 holds rsp at its
	 * entry: CFA = that + 8. Plus cfa_off: 8 where asmcgocall pushed rbp
	 * before taking its entry rsp (Go 1.21's frame-pointer prologue),
	 * whose saved rbp is then at CFA + rbp_off. */
	UNWIND_CFA_GO_CGO = 5,
	/* A signal trampoline, the restorer a handler returns into (glibc's
	 * __restore_rt, Go's runtime.sigreturn__sigaction): rsp points at the
	 * ucontext the kernel saved, and the interrupted frame's rip, rsp and
	 * rbp are in its mcontext (rbp at +120, rsp at +160, rip at +168).
	 * The rip read there is the interrupted instruction itself, not a
	 * return address: the walk records rip + 1, as if it were the return
	 * address of a call ending at rip, so that the lookups and the names
	 * of later frames (made one byte back) land on that instruction. */
	UNWIND_CFA_SIGNAL = 6,
};

/* One row of a module's unwind table, valid from `pc` (a module-relative
 * virtual address) up to the next row's pc. The return address is always at
 * CFA - 8 on x86_64. */
struct unwind_row {
	__u64 pc;
	__s32 cfa_off;
	__s16 rbp_off; /* caller's rbp saved at CFA + rbp_off; 0: rbp unchanged */
	__u8 cfa;      /* enum unwind_cfa */
	/* Added to the return address read: 1 where it is the exact pc of an
	 * interrupted instruction, not the end of a call (Go's asyncPreempt,
	 * whose call a signal handler injected), so that the next frame's
	 * lookup and name, made one byte back, land on that instruction. */
	__u8 ra_adjust;
};
_Static_assert(sizeof(struct unwind_row) == 16, "unwind_row ABI");

/* Rows are also indexed by address bucket, so a lookup searches a handful
 * of rows instead of the whole module: bucket b covers module addresses
 * [pc_base + (b << RIG_UNWIND_BUCKET_SHIFT), ... + bucket size). */
#define RIG_UNWIND_BUCKET_SHIFT 8

/* The rows (relative to the module's row_first) that cover the start of a
 * bucket and the start of the next one: the row covering any address in the
 * bucket lies between them, inclusive. (8 bytes: BPF array elements are
 * 8-byte aligned, and the harness writes them through a memory mapping.) */
struct unwind_bucket {
	__u32 lo;
	__u32 hi;
};
_Static_assert(sizeof(struct unwind_bucket) == 8, "unwind_bucket ABI");

/* One executable mapping of a module whose table sits in rows
 * [row_first, row_first + row_count). A module-relative address is
 * ip - bias. Its buckets are unwind_index[index_first .. + buckets). */
struct unwind_map {
	__u64 start;
	__u64 end;
	__u64 bias;
	__u64 pc_base;
	__u32 row_first;
	__u32 row_count;
	__u32 index_first;
	__u32 buckets;
};
_Static_assert(sizeof(struct unwind_map) == 48, "unwind_map ABI");

/* One address space: its mappings sorted by start; group_end[g] is the end
 * of the last mapping of group g (maps[g * RIG_UNWIND_GROUP ..]), so the
 * first group whose end lies past an address is the one that may hold it. */
struct unwind_proc {
	__u32 nmaps;
	__u32 _pad;
	__u64 group_end[RIG_UNWIND_GROUPS];
	struct unwind_map maps[RIG_UNWIND_MAX_MAPS];
};
_Static_assert(sizeof(struct unwind_proc) == 8 + 8 * RIG_UNWIND_GROUPS + 48 * RIG_UNWIND_MAX_MAPS,
	       "unwind_proc ABI");

/* Why a stack ends where it ends (bits of ustack.flags). None set: the walk
 * reached the outermost frame. */
#define RIG_STACK_TRUNCATED (1u << 0) /* deeper than RIG_STACK_MAX_FRAMES */
#define RIG_STACK_NO_TABLE (1u << 1)  /* an address in no mapping with a table */
#define RIG_STACK_NO_ROW (1u << 2)    /* inside a module, but no row covers it */
#define RIG_STACK_BAD_RULE (1u << 3)  /* a CFA rule rig does not follow */
#define RIG_STACK_READ_FAIL (1u << 4) /* the stack memory could not be read */
#define RIG_STACK_NO_PROC (1u << 5)   /* the process has no tables at all */
#define RIG_STACK_NO_REGS (1u << 6)   /* the user registers were unreadable */
/* a return address a uretprobe replaced, with no return instance for its slot */
#define RIG_STACK_LOST_RETURN (1u << 7)

/* more interpreted frames than RIG_STACK_MAX_IFRAMES */
#define RIG_STACK_INTERP_TRUNCATED (1u << 8)
/* the interpreter's thread state or a frame could not be read */
#define RIG_STACK_INTERP_READ_FAIL (1u << 9)
/* the process runs an interpreter, but no thread state is this thread's */
#define RIG_STACK_INTERP_NO_THREAD (1u << 10)

/* Interpreted frames kept per stack (innermost first). */
#define RIG_STACK_MAX_IFRAMES 32

/* A user stack, innermost frame first. ip[0] is the exact instruction;
 * ip[1..] are return addresses. iframe[] are the interpreter's own frames
 * of the same thread at the same instant (struct interp_proc), innermost
 * first: each is the frame's code object address (below 2^48), with bit 0
 * set on a frame the interpreter entered from C (the outermost frame one
 * native call of its evaluation function runs) and the index of the
 * instruction it runs in bits 48-63: the harness splices them in where
 * those native calls are. */
struct ustack {
	__u32 len;
	__u32 flags;
	__u64 ip[RIG_STACK_MAX_FRAMES];
	__u32 ilen;
	__u32 _pad;
	__u64 iframe[RIG_STACK_MAX_IFRAMES];
};
_Static_assert(sizeof(struct ustack) == 16 + 8 * RIG_STACK_MAX_FRAMES + 8 * RIG_STACK_MAX_IFRAMES,
	       "ustack ABI");

/* Where an interpreter keeps each thread's frames, for one process (key:
 * tgid), found by the harness in the interpreter's own symbols and layout
 * (runtime/cpython.rs). Offsets are bytes from the structure named. The
 * walk: the thread state at `current` (the one holding the interpreter's
 * lock), else the interpreter at `interp_head` and its list of thread
 * states (`threads_head`, each `ts_next`); the thread's own is the one whose
 * `ts_thread` (its pthread_t) is the thread's TLS base (fsbase: the same
 * in every PID namespace). Its frame chain: `ts_cframe`, then
 * `cframe_frame`, then each frame's `frame_code`, `frame_entry` (a byte)
 * and `frame_previous`, read together (`frame_span`). */
struct interp_proc {
	__u64 runtime; /* the interpreter's global state (_PyRuntime) */
	__u16 current;
	__u16 interp_head;
	__u16 threads_head;
	__u16 ts_next;
	__u16 ts_thread;
	__u16 ts_cframe;
	__u16 cframe_frame;
	__u16 frame_code;
	__u16 frame_previous;
	__u16 frame_entry;
	/* The frame's last instruction run (a pointer into its code object's
	 * instructions, which start at `code_instr`): the instruction index
	 * goes into bits 48-63 of the frame's word (0xffff: none). */
	__u16 frame_instr;
	__u16 code_instr;
	/* Bytes of a frame read at once (up to 128), covering the fields
	 * above: one read per frame, not one per field. */
	__u16 frame_span;
	__u16 _pad[3];
};
_Static_assert(sizeof(struct interp_proc) == 40, "interp_proc ABI");

/* What a per-stack count is of: the family's event and its qualifier. */
enum stack_what {
	STACK_ALLOC = 1,      /* arg: alloc_kind << 8 | size class (0xff: NULL free) */
	STACK_COPY = 2,       /* arg: copy implementation index */
	STACK_LOCK = 3,       /* arg: lock_op; amount: 0 */
	STACK_FUTEX_WAIT = 4, /* a lock's futex wait; amount: ns */
	STACK_SYSCALL = 5,    /* arg: syscall nr */
	STACK_FAULT = 6,      /* arg: fault kind */
	STACK_OFFCPU = 7,     /* arg: 1 voluntary, 0 involuntary; amount: ns */
	STACK_CPU = 8,        /* sampled on-CPU; amount: sample period ns */
	STACK_USER = 9,       /* a probe a user named; arg: its site; amount: the argument summed */
};

/* Key of the per-stack counts: one row per (process, event, user stack,
 * kernel stack). ustack is the id (hash) of a `ustacks` entry, 0 when none
 * was taken; kstack is a stack-trace map id, -1 when none. */
struct stack_key {
	__u64 ustack;
	__u32 tgid;
	__s32 kstack;
	__u32 what;
	__u32 arg;
};
_Static_assert(sizeof(struct stack_key) == 24, "stack_key ABI");

struct stack_val {
	__u64 count;
	__u64 amount; /* bytes or ns, by `what` */
};
_Static_assert(sizeof(struct stack_val) == 16, "stack_val ABI");

#endif
