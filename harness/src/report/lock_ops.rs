//! The locks family's operations by name: pthread's lock, trylock and
//! unlock, Go's slow paths and runtime locks, a JVM's contended monitor
//! enters (`lock_op`), and which stack events are acquisitions and which
//! waits.

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
        lock_op::JVM_MONITOR => "monitor enter (contended)",
        _ => "?",
    }
}

/// What the rows of an operation count beyond a mutex's lock call, for
/// the table's legend (by the operation's name, as rows hold it): Go's
/// slow paths and a JVM's contended monitor enters are each a contended
/// acquisition whose wait is the whole of it.
pub fn lock_op_legend(op: &str) -> Option<&'static str> {
    let is = |ops: &[u32]| ops.iter().any(|&o| lock_op_name(o) == op);
    if is(&[
        lock_op::GO_MUTEX,
        lock_op::GO_RLOCK,
        lock_op::GO_WLOCK,
        lock_op::GO_RWSEMA,
    ]) {
        Some(
            "Go's slow paths (Mutex.lockSlow, RWMutex.* wait): every call is contended, and \
             its wait (in the futex columns) is the call's time from entry to return",
        )
    } else if is(&[lock_op::JVM_MONITOR]) {
        Some(
            "a JVM's contended monitor enters: every one waited, from its \
             hotspot:monitor__contended__enter marker to __entered (in the futex columns)",
        )
    } else {
        None
    }
}

/// The name of a contended wait's stack event of operation `op`: a pthread
/// mutex's is its futex syscalls, a Go slow path's its whole call, a JVM
/// monitor's from one marker to the other.
pub fn lock_wait_name(op: u32) -> &'static str {
    match op {
        lock_op::GO_MUTEX | lock_op::GO_RLOCK | lock_op::GO_WLOCK | lock_op::GO_RWSEMA => {
            "contended (Go slow path)"
        }
        lock_op::JVM_MONITOR => "contended (monitor wait)",
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
        let ops = 1..=lock_op::JVM_MONITOR;
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
        assert!(lock_op_legend("Mutex.lockSlow").is_some());
        assert!(lock_op_legend("monitor enter (contended)").is_some());
        assert!(lock_op_legend("runtime.lock2").is_none() && lock_op_legend("lock").is_none());
    }
}
