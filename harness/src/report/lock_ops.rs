//! The locks family's operations by name: pthread's lock, trylock and
//! unlock, Go's slow paths and runtime locks (`lock_op`), and which stack
//! events are acquisitions and which waits.

use rig_ebpf::abi::lock_op;

/// The name of a lock operation, as the tables, stacks and pages print it.
pub fn lock_op_name(op: u32) -> &'static str {
    match op {
        lock_op::LOCK => "lock",
        lock_op::TRYLOCK => "trylock",
        lock_op::UNLOCK => "unlock",
        lock_op::GO_MUTEX => "Mutex.lockSlow",
        lock_op::GO_RLOCK => "RWMutex.RLock wait",
        lock_op::GO_WLOCK => "RWMutex.Lock wait",
        lock_op::GO_RUNTIME => "runtime.lock2",
        lock_op::GO_RWSEMA => "RWMutex wait",
        _ => "?",
    }
}

/// Whether a lock row's operation (its name) is one of Go's slow paths.
pub fn is_go_lock_op(op: &str) -> bool {
    [
        lock_op::GO_MUTEX,
        lock_op::GO_RLOCK,
        lock_op::GO_WLOCK,
        lock_op::GO_RWSEMA,
    ]
    .iter()
    .any(|&o| lock_op_name(o) == op)
}

/// The name of a contended wait's stack event of operation `op`: a pthread
/// mutex's is its futex syscalls, a Go slow path's its whole call.
pub fn lock_wait_name(op: u32) -> &'static str {
    match op {
        lock_op::GO_MUTEX | lock_op::GO_RLOCK | lock_op::GO_WLOCK | lock_op::GO_RWSEMA => {
            "contended (Go slow path)"
        }
        _ => "contended (futex wait)",
    }
}

/// Whether a locks stack event is an acquisition (or a Go slow path's
/// wait call): what a lock site's count is.
pub fn is_lock_acquisition(event: &str) -> bool {
    !["unlock", "?"].contains(&event) && !is_lock_wait(event)
}

/// Whether a locks stack event is a contended wait, whose amount is ns.
pub fn is_lock_wait(event: &str) -> bool {
    event.starts_with("contended (")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_lock_op_has_its_own_name_and_only_unlock_is_no_acquisition() {
        let ops = 1..=lock_op::GO_RWSEMA;
        let names: Vec<&str> = ops.clone().map(lock_op_name).collect();
        let mut distinct = names.clone();
        distinct.sort();
        distinct.dedup();
        assert_eq!(distinct.len(), names.len(), "{names:?}");
        assert!(!names.contains(&"?"), "{names:?}");
        for op in ops {
            let (name, wait) = (lock_op_name(op), lock_wait_name(op));
            assert_eq!(is_lock_acquisition(name), op != lock_op::UNLOCK, "{name}");
            assert!(is_lock_wait(wait) && !is_lock_acquisition(wait), "{wait}");
        }
        assert!(is_go_lock_op("Mutex.lockSlow") && !is_go_lock_op("runtime.lock2"));
    }
}
