//! Detaching a probe set in the background while the report is made.

use std::sync::Mutex;
use std::thread::JoinHandle;
use std::time::Duration;

use super::ProbeSet;

/// Detaching costs the kernel about 0.1 s per uprobe on Linux 6.18: each
/// uprobe perf event's release waits for RCU grace periods, one release at
/// a time under one kernel mutex (a PostgreSQL tree's 344 uprobes took
/// 36.6 s, the calibration server's 23 took 2.1 s, timed around the drop
/// of their `ProbeSet`; closing them from 32 threads at once took as
/// long). A session's report needs no probes once the window's counters
/// are read, so it hands them to a thread that detaches them meanwhile,
/// and rig waits for that before it exits ([`wait_detached`]).
static DETACHING: Mutex<Vec<JoinHandle<()>>> = Mutex::new(Vec::new());

/// Detach `probes` on a thread of their own (see [`DETACHING`]).
pub fn detach_in_background(probes: ProbeSet) {
    let h = std::thread::spawn(move || drop(probes));
    DETACHING.lock().unwrap_or_else(|e| e.into_inner()).push(h);
}

/// Wait until every probe set handed to [`detach_in_background`] is
/// detached, saying so when that takes a while.
pub fn wait_detached() {
    let pending: Vec<JoinHandle<()>> =
        std::mem::take(&mut *DETACHING.lock().unwrap_or_else(|e| e.into_inner()));
    let t0 = std::time::Instant::now();
    let mut said = false;
    for h in pending {
        while !h.is_finished() {
            if !said && t0.elapsed() > Duration::from_millis(300) {
                crate::errln!(
                    "rig: detaching the probes (the kernel takes about 0.1 s per uprobe; a \
                     second Ctrl-C cannot make that faster)"
                );
                said = true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = h.join();
    }
}
