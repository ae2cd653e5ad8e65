/* Kernel side of whole user stacks (not ABI; the ABI is stack.h).
 *
 * The walk needs no frame pointers: the harness turns every executable
 * module's .eh_frame into rows (struct unwind_row) sorted by address, and
 * the walk looks up the row covering each frame's instruction to find the
 * caller's stack pointer (CFA), return address (CFA - 8) and saved rbp. The
 * design is the one parca-agent and the OpenTelemetry profiler use; the
 * tables are per module, the mapping list per address space.
 *
 * Stacks are aggregated here: a stack is stored once under a 64-bit hash of
 * its frames (`ustacks`), and every family adds its events to
 * `stack_counts` keyed by (process, event, stack), so a window's per-stack
 * counts are the exact difference of two snapshots, like every other
 * counter. */
#ifndef RIG_STACK_BPF_H
#define RIG_STACK_BPF_H

#include "common.bpf.h"
#include "stack.h"
#include "uretprobe.bpf.h"

/* Set by the loader: 0 leaves every stack out (one frame per event, as
 * before), so probe-cost can price the walk itself. */
const volatile __u8 rig_stacks = 0;
/* x86_64 THREAD_SIZE: where a task's user registers sit below the top of
 * its kernel stack. */
const volatile __u64 rig_thread_size = 16384;

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1); /* sized by the loader */
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct unwind_row);
} unwind_rows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1); /* sized by the loader */
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct unwind_bucket);
} unwind_index SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, RIG_UNWIND_MAX_PROCS);
	__type(key, __u32);
	__type(value, struct unwind_proc);
} unwind_procs SEC(".maps");

/* tgid -> slot in unwind_procs. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, RIG_MAX_TARGETS);
	__type(key, __u32);
	__type(value, __u32);
} unwind_slots SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct ustack);
} ustacks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_STACK_TRACE);
	__uint(max_entries, 16384);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, 127 * sizeof(__u64));
} kstacks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct stack_key);
	__type(value, struct stack_val);
} stack_counts SEC(".maps");

/* Stack memory is read in chunks of up to this many bytes (never past the
 * end of a page): one bpf_probe_read_user costs far more than the bytes it
 * moves (measured with perf on a 20-frame walk: copy_from_user_nofault was
 * 29% of the probed program's time when each frame read its own 8 bytes). */
#define STACK_CHUNK 2048

struct walk {
	__u64 ip;
	__u64 sp;
	__u64 bp;
	__u32 slot;
	__u32 last_map; /* mapping of the previous frame: callers are usually in
			 * the same module, so it is tried before searching */
	/* A return address equal to the uretprobe trampoline was replaced by
	 * a uretprobe (rig's own, on allocator or lock calls still running):
	 * the real one is in the thread's return instances, searched from ri
	 * outwards (uretprobe.bpf.h). */
	__u64 tramp;
	__u64 ri;
	/* buf holds user memory [buf_base, buf_base + buf_len). */
	__u64 buf_base;
	__u64 buf_len;
	/* The interrupted frame's rbp..rip, read from a signal frame's
	 * mcontext (UNWIND_CFA_SIGNAL). */
	__u64 sig[7];
	/* The interpreted frames' walk (take_iframes): the process's layout,
	 * this thread's TLS base, the thread-state scan's next state and what
	 * it found, and the next frame to read. */
	struct interp_proc interp;
	__u64 iself;
	__u64 inext;
	__u64 ithread;
	__u64 iframe;
	struct ustack st;
	__u8 buf[STACK_CHUNK];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct walk);
} walk_scratch SEC(".maps");

/* The task fields the register lookup needs (CO-RE). */
struct task_struct___stack {
	void *stack;
} __attribute__((preserve_access_index));

/* tgid -> where its interpreter keeps each thread's frames. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, RIG_MAX_TARGETS);
	__type(key, __u32);
	__type(value, struct interp_proc);
} interp_procs SEC(".maps");

/* The thread's TLS base, which its pthread_t is (x86_64, CO-RE). */
struct thread_struct___interp {
	unsigned long fsbase;
} __attribute__((preserve_access_index));
struct task_struct___interp {
	struct thread_struct___interp thread;
} __attribute__((preserve_access_index));

/* No mapping: find_map's answer when there is none. */
#define RIG_NONE 0xffffffffu

/* The row of mapping m covering module address v: the bucket index narrows
 * the search to the rows between the ones covering v's bucket and the next
 * bucket, then a binary search finds the last row whose pc <= v. (Its
 * bounds are only map keys, never pointer offsets, so the verifier need not
 * keep them precise and merges its paths: cheap to verify inline, and
 * inline keeps a call and a lookup off every frame.) */
static __always_inline struct unwind_row *find_row(struct unwind_map *m, __u64 v)
{
	if (m->row_count == 0 || v < m->pc_base)
		return 0;
	__u64 b = (v - m->pc_base) >> RIG_UNWIND_BUCKET_SHIFT;
	__u32 lo, hi;
	if (b >= m->buckets) {
		lo = m->row_count - 1;
		hi = m->row_count;
	} else {
		__u32 i = m->index_first + (__u32)b;
		struct unwind_bucket *k = bpf_map_lookup_elem(&unwind_index, &i);
		if (!k)
			return 0;
		lo = k->lo;
		hi = k->hi + 1;
	}
	lo += m->row_first;
	hi += m->row_first;
	for (int j = 0; j < 24; j++) {
		if (lo + 1 >= hi)
			break;
		__u32 mid = lo + (hi - lo) / 2;
		struct unwind_row *r = bpf_map_lookup_elem(&unwind_rows, &mid);
		if (!r)
			return 0;
		if (r->pc <= v)
			lo = mid;
		else
			hi = mid;
	}
	struct unwind_row *r = bpf_map_lookup_elem(&unwind_rows, &lo);
	if (!r || r->pc > v)
		return 0;
	return r;
}

/* The mapping of address space `slot` containing address `look`: the
 * first of the mappings, sorted by address, that ends past it. RIG_NONE:
 * no mapping with a table contains it. Called when a frame is not in the
 * previous frame's mapping.
 *
 * A global function taking and returning scalars: the verifier checks it
 * once per program, on its own, and the caller then holds one unknown
 * index instead of every state the search ended in. Two scans, not a
 * binary search: the bounds of a binary search offset a pointer into the
 * mappings, so the verifier keeps them precise and checks every path
 * through its steps apart (about 97,000 verified instructions for seven
 * steps, in every program that takes stacks); a scan's index is a constant
 * in each step the verifier unrolls. The first scan (find_group) finds
 * the group (at most RIG_UNWIND_GROUPS compares), the second the mapping in
 * it (at most RIG_UNWIND_GROUP), and only when a frame leaves the previous
 * frame's mapping. */
__attribute__((noinline)) __u32 find_group(__u32 slot, __u64 look)
{
	struct unwind_proc *p = bpf_map_lookup_elem(&unwind_procs, &slot);
	if (!p)
		return RIG_NONE;
	__u32 ng = (p->nmaps + RIG_UNWIND_GROUP - 1) / RIG_UNWIND_GROUP;
	for (__u32 i = 0; i < RIG_UNWIND_GROUPS; i++) {
		if (i >= ng)
			break;
		if (look < p->group_end[i])
			return i;
	}
	return RIG_NONE;
}

/* (The group comes back from a global function as one unknown scalar, so
 * the scan within it is verified once, not once per group.) */
__attribute__((noinline)) __u32 find_map(__u32 slot, __u64 look)
{
	__u32 g = find_group(slot, look);
	if (g >= RIG_UNWIND_GROUPS)
		return RIG_NONE;
	struct unwind_proc *p = bpf_map_lookup_elem(&unwind_procs, &slot);
	if (!p)
		return RIG_NONE;
	__u32 nm = p->nmaps;
	for (__u32 j = 0; j < RIG_UNWIND_GROUP; j++) {
		__u32 m = g * RIG_UNWIND_GROUP + j;
		if (m >= nm)
			break;
		struct unwind_map *e = &p->maps[m & (RIG_UNWIND_MAX_MAPS - 1)];
		if (look < e->end)
			return look >= e->start ? m : RIG_NONE;
	}
	return RIG_NONE;
}

/* The 8 bytes of user memory at addr, from the chunk when it has them, else
 * from a new chunk starting at addr (frames only move up the stack), else
 * (a chunk would cross into unmapped memory) alone. */
static __always_inline int stack_read(struct walk *w, __u64 addr, __u64 *out)
{
	__u64 off = addr - w->buf_base;
	if (addr >= w->buf_base && off + 8 <= w->buf_len) {
		off &= STACK_CHUNK - 1;
		if (off <= STACK_CHUNK - 8) {
			__builtin_memcpy(out, &w->buf[off], 8);
			return 0;
		}
	}
	/* The chunk stops at the end of addr's page: a read that runs into an
	 * unmapped page (past the top of the stack) fails only after a page
	 * fault, which costs microseconds here; a walk that did that at every
	 * frame cost 35-70 us instead of 2 (measured with `rig probe-cost`,
	 * depending on where ASLR put the stack's top). */
	__u64 len = 4096 - (addr & 4095);
	if (len > STACK_CHUNK)
		len = STACK_CHUNK;
	if (len >= 8 && bpf_probe_read_user(w->buf, len, (void *)addr) == 0) {
		w->buf_base = addr;
		w->buf_len = len;
		__builtin_memcpy(out, &w->buf[0], 8);
		return 0;
	}
	w->buf_len = 0;
	return bpf_probe_read_user(out, 8, (void *)addr);
}

/* The CFA of Go's runtime.asmcgocall where the C function it called
 * returns, rsp there being `sp` (UNWIND_CFA_GO_CGO in stack.h); 0 when the
 * slots cannot be read. A global function: inlined, its reads into the
 * BPF stack left the walk's later states unlike the other rules' and the
 * verifier walked the rest of every step again for it (5,700 verified
 * instructions per program became 27,000). */
__attribute__((noinline)) __u64 go_cgo_cfa(__u64 sp)
{
	__u64 slot[2] = {}; /* rsp + 40: depth (or entry rsp); rsp + 48: g */
	if (bpf_probe_read_user(slot, sizeof(slot), (void *)(sp + 40)))
		return 0;
	if (!slot[1])
		return slot[0] + 8;
	__u64 hi = 0; /* g.stack.hi: g is heap memory, not stack */
	if (bpf_probe_read_user(&hi, 8, (void *)(slot[1] + 8)))
		return 0;
	return hi - slot[0] + 8;
}

/* The step out of a signal trampoline (UNWIND_CFA_SIGNAL in stack.h): the
 * interrupted frame's registers from the ucontext at rsp, read into the
 * walk's own map memory. Returns 1 to stop. A global function, checked
 * once per program. */
__attribute__((noinline)) int signal_frame(void)
{
	__u32 zero = 0;
	struct walk *w = bpf_map_lookup_elem(&walk_scratch, &zero);
	if (!w)
		return 1;
	if (bpf_probe_read_user(w->sig, sizeof(w->sig), (void *)(w->sp + 120))) {
		w->st.flags |= RIG_STACK_READ_FAIL;
		return 1;
	}
	if (!w->sig[6])
		return 1;
	w->bp = w->sig[0];
	w->sp = w->sig[5];
	/* The interrupted instruction itself, where every later frame is a
	 * return address whose call is looked up (and named) one byte back:
	 * recorded one past it, so that lookup lands on it. */
	w->ip = w->sig[6] + 1;
	return 0;
}

/* One frame: record w->ip, then step to the caller. Returns 1 to stop. */
static long unwind_step(__u32 i, void *ctx)
{
	/* bpf_loop's context must live on the stack; the walk state is too big
	 * for it, so each step finds it in the per-CPU scratch map. */
	__u32 zero = 0;
	struct walk *w = bpf_map_lookup_elem(&walk_scratch, &zero);
	if (!w)
		return 1;
	__u32 n = w->st.len;
	if (n >= RIG_STACK_MAX_FRAMES) {
		w->st.flags |= RIG_STACK_TRUNCATED;
		return 1;
	}
	__u64 ip = w->ip;
	w->st.ip[n & (RIG_STACK_MAX_FRAMES - 1)] = ip;
	w->st.len = n + 1;

	/* A return address may sit just past its call's function (a call to a
	 * noreturn function ends it): look up the call instruction instead. */
	__u64 look = n ? ip - 1 : ip;
	__u32 slot = w->slot;
	struct unwind_proc *p = bpf_map_lookup_elem(&unwind_procs, &slot);
	if (!p) {
		w->st.flags |= RIG_STACK_NO_PROC;
		return 1;
	}
	/* The previous frame's mapping first, here: most callers are in
	 * their callee's module, and this skips a call and a lookup. */
	__u32 map = w->last_map;
	struct unwind_map *m = &p->maps[map & (RIG_UNWIND_MAX_MAPS - 1)];
	if (map >= p->nmaps || look < m->start || look >= m->end) {
		map = find_map(slot, look);
		if (map == RIG_NONE) {
			w->st.flags |= RIG_STACK_NO_TABLE;
			return 1;
		}
		w->last_map = map;
		m = &p->maps[map & (RIG_UNWIND_MAX_MAPS - 1)];
	}
	struct unwind_row *r = find_row(m, look - m->bias);
	if (!r) {
		w->st.flags |= RIG_STACK_NO_ROW;
		return 1;
	}
	if (r->cfa == UNWIND_CFA_SIGNAL)
		return signal_frame() ? 1 : 0;
	__u64 cfa;
	switch (r->cfa) {
	case UNWIND_CFA_RSP:
		cfa = w->sp + (__s64)r->cfa_off;
		break;
	case UNWIND_CFA_RBP:
		cfa = w->bp + (__s64)r->cfa_off;
		break;
	case UNWIND_CFA_PLT:
		cfa = w->sp + 8 + ((ip & 15) >= (__u64)r->cfa_off ? 8 : 0);
		break;
	case UNWIND_CFA_GO_CGO:
		cfa = go_cgo_cfa(w->sp);
		if (!cfa) {
			w->st.flags |= RIG_STACK_READ_FAIL;
			return 1;
		}
		cfa += (__s64)r->cfa_off; /* 8 past a `push %rbp` prologue */
		break;
	case UNWIND_CFA_END:
		return 1;
	case UNWIND_CFA_NONE:
		w->st.flags |= RIG_STACK_NO_ROW;
		return 1;
	default:
		w->st.flags |= RIG_STACK_BAD_RULE;
		return 1;
	}
	__u64 ra = 0;
	__s16 rbp_off = r->rbp_off;
	if (stack_read(w, cfa - 8, &ra)) {
		w->st.flags |= RIG_STACK_READ_FAIL;
		return 1;
	}
	if (rbp_off) {
		__u64 bp = 0;
		if (stack_read(w, cfa + (__s64)rbp_off, &bp)) {
			w->st.flags |= RIG_STACK_READ_FAIL;
			return 1;
		}
		w->bp = bp;
	}
	if (ra && ra == w->tramp) {
		ra = uretprobe_orig(&w->ri, cfa - 8);
		if (!ra) {
			w->st.flags |= RIG_STACK_LOST_RETURN;
			return 1;
		}
	}
	if (ra == 0)
		return 1;
	w->sp = cfa;
	w->ip = ra + r->ra_adjust;
	return 0;
}

#ifdef RIG_COMPAT
/* Without bpf_loop (before Linux 5.17) the frames are a bounded loop the
 * verifier walks iteration by iteration; each step is a global function, so
 * it is checked once and each iteration costs the verifier a call and a
 * compare, and the walk keeps all RIG_STACK_MAX_FRAMES frames. */
__attribute__((noinline)) int unwind_step_global(__u32 i)
{
	return unwind_step(i, 0) != 0;
}
#endif

static __always_inline __u64 stack_hash(struct ustack *st)
{
	__u64 h = 0xcbf29ce484222325ull ^ ((__u64)st->flags << 32) ^ st->len;
	for (int i = 0; i < RIG_STACK_MAX_FRAMES; i++) {
		if (i >= st->len)
			break;
		h ^= st->ip[i];
		h *= 0x100000001b3ull;
		h ^= h >> 29;
	}
	h ^= (__u64)st->ilen << 48;
	for (int i = 0; i < RIG_STACK_MAX_IFRAMES; i++) {
		if (i >= st->ilen)
			break;
		h ^= st->iframe[i];
		h *= 0x100000001b3ull;
		h ^= h >> 29;
	}
	return h ? h : 1;
}

/* A read of the interpreter's memory failed. */
#define INTERP_FAIL (~0ull)

/* One step of the scan of the interpreter's thread states for this
 * thread's (a bpf_loop callback, as unwind_step): 1 stops, with
 * `ithread` the state found, or INTERP_FAIL. Threads of the main
 * interpreter only (a subinterpreter's are not walked). */
static long interp_thread_step(__u32 i, void *ctx)
{
	__u32 zero = 0;
	struct walk *w = bpf_map_lookup_elem(&walk_scratch, &zero);
	if (!w)
		return 1;
	__u64 ts = w->inext, tid = 0;
	if (!ts)
		return 1;
	if (bpf_probe_read_user(&tid, 8, (void *)(ts + w->interp.ts_thread))) {
		w->ithread = INTERP_FAIL;
		return 1;
	}
	if (tid == w->iself) {
		w->ithread = ts;
		return 1;
	}
	if (bpf_probe_read_user(&w->inext, 8, (void *)(ts + w->interp.ts_next))) {
		w->ithread = INTERP_FAIL;
		return 1;
	}
	return 0;
}

/* One interpreted frame into the walk's stack (a bpf_loop callback): 1
 * stops. Frames are read in chunks into the walk's buffer (the native walk
 * is done with it): a thread's frames sit one after another in its frame
 * stack, each caller below its callee, so one read ending at a frame
 * usually holds its callers too. A chunk reaches down at most to the start
 * of the frame's page, never into memory that may not be mapped. Measured
 * with `rig probe-cost` (20 Python frames): 3.6 us per event with three
 * reads per frame, 2.2 with one. */
static long iframe_step(__u32 i, void *ctx)
{
	__u32 zero = 0;
	struct walk *w = bpf_map_lookup_elem(&walk_scratch, &zero);
	if (!w)
		return 1;
	__u64 f = w->iframe;
	if (!f)
		return 1;
	__u32 n = w->st.ilen;
	if (n >= RIG_STACK_MAX_IFRAMES) {
		w->st.flags |= RIG_STACK_INTERP_TRUNCATED;
		return 1;
	}
	__u64 span = w->interp.frame_span;
	if (f < w->buf_base || f + span > w->buf_base + w->buf_len) {
		__u64 end = f + span, floor = f & ~4095ull;
		__u64 start = end - floor > STACK_CHUNK ? end - STACK_CHUNK : floor;
		__u64 l = end - start;
		if (l > STACK_CHUNK)
			l = STACK_CHUNK;
		if (bpf_probe_read_user(w->buf, l, (void *)start)) {
			w->st.flags |= RIG_STACK_INTERP_READ_FAIL;
			return 1;
		}
		w->buf_base = start;
		w->buf_len = l;
	}
	__u64 off = f - w->buf_base;
	__u64 c = (off + w->interp.frame_code) & (STACK_CHUNK - 1);
	__u64 p = (off + w->interp.frame_previous) & (STACK_CHUNK - 1);
	__u64 e = (off + w->interp.frame_entry) & (STACK_CHUNK - 1);
	__u64 x = (off + w->interp.frame_instr) & (STACK_CHUNK - 1);
	if (c > STACK_CHUNK - 8 || p > STACK_CHUNK - 8 || x > STACK_CHUNK - 8) {
		w->st.flags |= RIG_STACK_INTERP_READ_FAIL;
		return 1;
	}
	__u64 code = 0, instr = 0;
	__builtin_memcpy(&code, &w->buf[c], 8);
	__builtin_memcpy(&w->iframe, &w->buf[p], 8);
	__builtin_memcpy(&instr, &w->buf[x], 8);
	__u8 entry = w->buf[e];
	/* Instructions are 2-byte code units; before the first one ran, the
	 * pointer is one unit before them: no index. */
	__u64 first = code + w->interp.code_instr, index = 0xffff;
	if (instr >= first && (instr - first) / 2 < 0xffff)
		index = (instr - first) / 2;
	if (code >> 48)
		index = 0xffff;
	w->st.iframe[n & (RIG_STACK_MAX_IFRAMES - 1)] =
		(code & 0xffffffffffffull) | (index << 48) | (entry ? 1 : 0);
	w->st.ilen = n + 1;
	return 0;
}

#ifdef RIG_COMPAT
/* Without bpf_loop, each step a global function (see unwind_step_global).
 * Each reads its argument: clang otherwise leaves it unset at the call,
 * and the verifier refuses a call whose argument is no scalar. */
__attribute__((noinline)) int interp_thread_step_global(__u32 i)
{
	return i >= 256 || interp_thread_step(i, 0) != 0;
}

__attribute__((noinline)) int iframe_step_global(__u32 i)
{
	return i > RIG_STACK_MAX_IFRAMES || iframe_step(i, 0) != 0;
}
#endif

/* This thread's thread state in the interpreter `ip` describes, with the
 * walk's `interp` set to it: the one holding the interpreter's lock when it
 * is this thread's (most events come from it), else found in the
 * interpreter's list of them (up to 256); 0 when none is this thread's,
 * INTERP_FAIL when a read failed. */
static __always_inline __u64 find_ithread(struct walk *w, struct interp_proc *ip)
{
	w->interp = *ip;
	struct task_struct___interp *t = (void *)bpf_get_current_task();
	w->iself = BPF_CORE_READ(t, thread.fsbase);
	__u64 ts = 0, tid = 0, interp = 0;
	w->ithread = 0;
	if (bpf_probe_read_user(&ts, 8, (void *)(ip->runtime + ip->current))) {
		w->ithread = INTERP_FAIL;
	} else if (ts && !bpf_probe_read_user(&tid, 8, (void *)(ts + ip->ts_thread)) &&
		   tid == w->iself) {
		w->ithread = ts;
	} else if (bpf_probe_read_user(&interp, 8, (void *)(ip->runtime + ip->interp_head)) ||
		   !interp ||
		   bpf_probe_read_user(&w->inext, 8, (void *)(interp + ip->threads_head))) {
		w->ithread = INTERP_FAIL;
	} else {
#ifdef RIG_COMPAT
		for (__u32 i = 0; i < 256; i++)
			if (interp_thread_step_global(i))
				break;
#else
		bpf_loop(256, interp_thread_step, 0, 0);
#endif
	}
	return w->ithread;
}

/* The interpreted frames of this thread into the walk's stack (see struct
 * ustack). A global function: verified once per program; its loops are
 * bpf_loop callbacks, each verified once. The thread state holding the
 * interpreter's lock is tried first (most events come from it), then the
 * interpreter's list of them (up to 256). */
__attribute__((noinline)) int take_iframes(__u32 tgid)
{
	__u32 zero = 0;
	struct walk *w = bpf_map_lookup_elem(&walk_scratch, &zero);
	if (!w)
		return 0;
	w->st.ilen = 0;
	struct interp_proc *ip = bpf_map_lookup_elem(&interp_procs, &tgid);
	if (!ip)
		return 0;
	__u64 ts = find_ithread(w, ip);
	if (ts == INTERP_FAIL) {
		w->st.flags |= RIG_STACK_INTERP_READ_FAIL;
		return 0;
	}
	if (!ts) {
		w->st.flags |= RIG_STACK_INTERP_NO_THREAD;
		return 0;
	}
	__u64 cf = 0;
	if (bpf_probe_read_user(&cf, 8, (void *)(ts + ip->ts_cframe)) || !cf ||
	    bpf_probe_read_user(&w->iframe, 8, (void *)(cf + ip->cframe_frame))) {
		w->st.flags |= RIG_STACK_INTERP_READ_FAIL;
		return 0;
	}
	/* Every field a frame step reads lies in the bytes it reads. */
	__u32 span = ip->frame_span;
	if (span > 128 || ip->frame_code + 8 > span || ip->frame_previous + 8 > span ||
	    ip->frame_entry + 1 > span || ip->frame_instr + 8 > span) {
		w->st.flags |= RIG_STACK_INTERP_READ_FAIL;
		return 0;
	}
	w->buf_base = 0;
	w->buf_len = 0;
#ifdef RIG_COMPAT
	for (__u32 i = 0; i < RIG_STACK_MAX_IFRAMES + 1; i++)
		if (iframe_step_global(i))
			break;
#else
	bpf_loop(RIG_STACK_MAX_IFRAMES + 1, iframe_step, 0, 0);
#endif
	w->buf_len = 0;
	return 0;
}

/* At the handler of an interpreter's call instruction (`--interp-calls`,
 * rig_user_interp): the code object of the frame this thread enters, as a
 * frame word with no instruction (named like a stack's), when it enters
 * it by a call: the instruction it runs (2-byte code units: opcode,
 * argument) is one of the two opcodes in `check` (bits 0-7, 8-15) with
 * argument 0. That instruction is the one after the frame's last one run
 * (`frame_instr`), or, while a trace or profile function is set (CPython
 * 3.11's tracing dispatch records the instruction before running it),
 * that one itself. 0 for a generator resumed (argument 1 to 3), or when
 * the frame cannot be read (counted in the stats: never a silent zero). */
__attribute__((noinline)) __u64 interp_call_code(__u32 tgid, __u64 check)
{
	__u32 zero = 0;
	struct walk *w = bpf_map_lookup_elem(&walk_scratch, &zero);
	if (!w)
		return 0;
	struct interp_proc *ip = bpf_map_lookup_elem(&interp_procs, &tgid);
	if (!ip) {
		stat_add(RIG_STAT_LOOKUP_FAIL, 1);
		return 0;
	}
	__u64 ts = find_ithread(w, ip);
	__u64 cf = 0, f = 0, code = 0, prev = 0;
	__u16 units[2] = {};
	if (ts == INTERP_FAIL || !ts ||
	    bpf_probe_read_user(&cf, 8, (void *)(ts + w->interp.ts_cframe)) || !cf ||
	    bpf_probe_read_user(&f, 8, (void *)(cf + w->interp.cframe_frame)) || !f ||
	    bpf_probe_read_user(&code, 8, (void *)(f + w->interp.frame_code)) ||
	    bpf_probe_read_user(&prev, 8, (void *)(f + w->interp.frame_instr)) ||
	    bpf_probe_read_user(units, 4, (void *)prev)) {
		stat_add(RIG_STAT_READ_FAIL, 1);
		return 0;
	}
	__u8 a = check & 0xff, b = (check >> 8) & 0xff;
	__u16 unit = units[1];
	if ((unit & 0xff) != a && (unit & 0xff) != b)
		unit = units[0];
	if (((unit & 0xff) != a && (unit & 0xff) != b) || (unit >> 8) != 0)
		return 0;
	return (code & 0xfffffffffffeull) | (0xffffull << 48);
}

/* Walk the user stack from (ip, sp, bp) and store it; returns its id, or 0
 * when stacks are off or it could not be stored.
 *
 * A global function, not inlined: the verifier checks a global function
 * once per program, on its own, where an inlined walk is checked again at
 * every call site (about 121,000 verified instructions each; a program
 * with six call sites took over 700,000 and seconds of verifier CPU). */
__attribute__((noinline)) __u64 take_ustack(__u32 tgid, __u64 ip, __u64 sp, __u64 bp)
{
	if (!rig_stacks)
		return 0;
	__u32 zero = 0;
	struct walk *w = bpf_map_lookup_elem(&walk_scratch, &zero);
	if (!w)
		return 0;
	w->ip = ip;
	w->sp = sp;
	w->bp = bp;
	w->st.len = 0;
	w->st.flags = 0;
	w->st.ilen = 0;
	w->buf_len = 0;
	w->buf_base = 0;
	w->last_map = 0;
	w->tramp = uretprobe_trampoline();
	w->ri = w->tramp ? uretprobe_newest() : 0;
	__u32 *slot = bpf_map_lookup_elem(&unwind_slots, &tgid);
	if (slot) {
		w->slot = *slot;
#ifdef RIG_COMPAT
		for (__u32 i = 0; i < RIG_STACK_MAX_FRAMES + 1; i++)
			if (unwind_step_global(i))
				break;
#else
		bpf_loop(RIG_STACK_MAX_FRAMES + 1, unwind_step, 0, 0);
#endif
	} else {
		w->st.ip[0] = ip;
		w->st.len = 1;
		w->st.flags = RIG_STACK_NO_PROC;
	}
	take_iframes(tgid);
	__u64 id = stack_hash(&w->st);
	if (!bpf_map_lookup_elem(&ustacks, &id)) {
		long err = bpf_map_update_elem(&ustacks, &id, &w->st, BPF_NOEXIST);
		if (err && err != -17 /* EEXIST: another CPU stored it */) {
			stat_add(RIG_STAT_STACK_MISSING, 1);
			return 0;
		}
	}
	return id;
}

/* The user registers of the current task, saved at its entry into the
 * kernel (for tracepoints and perf events that fire in kernel mode). */
static __always_inline int current_user_regs(struct pt_regs *out)
{
	struct task_struct___stack *t = (void *)bpf_get_current_task();
	void *stack = BPF_CORE_READ(t, stack);
	if (!stack)
		return -1;
	void *regs = stack + rig_thread_size - sizeof(struct pt_regs);
	return bpf_probe_read_kernel(out, sizeof(*out), regs);
}

static __always_inline __u64 take_ustack_regs(__u32 tgid, struct pt_regs *regs)
{
	return take_ustack(tgid, PT_REGS_IP(regs), PT_REGS_SP(regs), PT_REGS_FP(regs));
}

/* The stack of the current task's user code (from its saved registers). */
static __always_inline __u64 take_current_ustack(__u32 tgid)
{
	if (!rig_stacks)
		return 0;
	struct pt_regs regs = {};
	if (current_user_regs(&regs)) {
		stat_add(RIG_STAT_STACK_MISSING, 1);
		return 0;
	}
	return take_ustack_regs(tgid, &regs);
}

static __always_inline __s32 take_kstack(void *ctx)
{
	if (!rig_stacks)
		return -1;
	long id = bpf_get_stackid(ctx, &kstacks, 0);
	if (id < 0) {
		stat_add(RIG_STAT_STACK_MISSING, 1);
		return -1;
	}
	return (__s32)id;
}

static __always_inline void stack_add(__u32 tgid, __u64 ustack, __s32 kstack, __u32 what,
				      __u32 arg, __u64 amount)
{
	if (!rig_stacks)
		return;
	struct stack_key k = {
		.ustack = ustack, .tgid = tgid, .kstack = kstack, .what = what, .arg = arg,
	};
	struct stack_val zero = {};
	struct stack_val *v = upsert(&stack_counts, &k, &zero);
	if (v) {
		v->count++;
		v->amount += amount;
	}
}

/* A forked child shares its parent's address space layout: give it the
 * parent's tables (called from rig_follow_fork). */
static __always_inline void stack_follow_fork(__u32 parent, __u32 child)
{
	__u32 *slot = bpf_map_lookup_elem(&unwind_slots, &parent);
	if (slot) {
		__u32 s = *slot;
		bpf_map_update_elem(&unwind_slots, &child, &s, BPF_ANY);
	}
	struct interp_proc *ip = bpf_map_lookup_elem(&interp_procs, &parent);
	if (ip) {
		struct interp_proc copy = *ip;
		bpf_map_update_elem(&interp_procs, &child, &copy, BPF_ANY);
	}
}

#endif
