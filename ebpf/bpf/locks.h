/* Rust twin: ebpf/src/abi.rs (`LockKey`, `LockVal`). */
#ifndef RIG_LOCKS_H
#define RIG_LOCKS_H
#include <linux/types.h>

enum lock_op {
	LOCK_OP_LOCK = 1,
	LOCK_OP_TRYLOCK = 2,
	LOCK_OP_UNLOCK = 3,
	/* Go's slow paths, each a contended acquisition (or wait) from entry
	 * to return: sync.Mutex's lockSlow, RWMutex's reader and writer
	 * semaphore waits. */
	LOCK_OP_GO_MUTEX = 4,
	LOCK_OP_GO_RLOCK = 5,
	LOCK_OP_GO_WLOCK = 6,
	/* The Go runtime's own locks (runtime.lock2), counted as pthread
	 * mutexes are. */
	LOCK_OP_GO_RUNTIME = 7,
	/* RWMutex's waits before Go 1.20, through the semaphore sync.Mutex's
	 * slow path waits on too (those are not counted again). */
	LOCK_OP_GO_RWSEMA = 8,
	/* A runtime's contended acquisition between two USDT markers, from
	 * the first to the second by thread: the JVM's monitor enters
	 * (hotspot:monitor__contended__enter to __entered). */
	LOCK_OP_JVM_MONITOR = 9,
};

struct lock_key {
	__u64 caller; /* return address of the lock/trylock/unlock call */
	__u64 mutex;  /* address of the pthread_mutex_t */
	__u32 op;     /* enum lock_op */
	__u32 tgid;
};
_Static_assert(sizeof(struct lock_key) == 24, "lock_key ABI");

struct lock_val {
	__u64 calls;        /* entries */
	__u64 acquired;     /* lock/trylock that returned 0 */
	__u64 contended;    /* acquisitions that waited in futex at least once */
	__u64 futex_wait_ns;/* time in futex syscalls inside the lock call */
	__u64 call_ns;      /* entry-to-return of the lock call (probe-inflated) */
	__u64 holds;        /* acquisitions whose unlock was seen */
	__u64 hold_ns;      /* lock return to unlock entry (probe-inflated) */
	__u64 returns;      /* uretprobe hits */
};
_Static_assert(sizeof(struct lock_val) == 64, "lock_val ABI");

/* Per-thread state of a lock call in progress. */
struct lock_pending {
	__u64 caller;
	__u64 mutex;
	__u64 t_entry;
	__u64 futex_t0;      /* nonzero while inside a futex syscall */
	__u64 futex_wait_ns;
	__u32 op;
	__u32 futex_waits;
};
_Static_assert(sizeof(struct lock_pending) == 48, "lock_pending ABI");

/* A goroutine's slow path in progress, keyed by its g (r14) in its process
 * (two processes of one Go binary can have goroutines at one address). */
struct go_lock_key {
	__u64 g;
	__u32 tgid;
	__u32 _pad;
};
_Static_assert(sizeof(struct go_lock_key) == 16, "go_lock_key ABI");

struct go_lock_pending {
	__u64 caller;
	__u64 mutex;
	__u64 t_entry;
	__u64 ustack;
	__u32 op;
	__u32 _pad;
};
_Static_assert(sizeof(struct go_lock_pending) == 40, "go_lock_pending ABI");

struct held_key {
	__u64 mutex;
	__u32 tid;
	__u32 _pad;
};
_Static_assert(sizeof(struct held_key) == 16, "held_key ABI");

struct held_val {
	__u64 t_acquired;
	__u64 caller;
	__u32 op;
	__u32 _pad;
};
_Static_assert(sizeof(struct held_val) == 24, "held_val ABI");
#endif
