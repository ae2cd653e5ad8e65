//! Instructions per request from the hardware PMU: a fixed-count window
//! counted by `perf_event_open(PERF_COUNT_HW_INSTRUCTIONS)`.
//!
//! In: a [`TargetSpec`], a request count and a warm-up count. Out: an
//! [`InstrWindow`] with backend `"perf"`: retired user-space instructions of
//! the target (every thread) per request. No per-function split: a counter
//! has no call sites (callgrind has them).
//!
//! How (the same fixed-count window as [`super::callgrind`], so connection
//! set-up, lazy binding and first touch stay outside the count): the target
//! runs natively; rig makes one keep-alive HTTP/1.1 connection, sends the
//! warm-up requests (uncounted), opens one counter per thread of the target
//! and of each process descended from it (`/proc/PID/task`), created
//! disabled with `inherit` so threads and processes started inside the
//! window are counted too, enables them while the target is
//! idle in `recv`, sends exactly N requests, disables them and stops the
//! target. The counts are read after the target has exited: the kernel adds
//! an inherited (child thread's) count to its parent counter only when that
//! thread exits. A counter the kernel multiplexed (time running < time
//! enabled) is an error, never scaled.
//!
//! A host without a PMU (most VMs) refuses the counter (ENOENT or
//! EOPNOTSUPP): that is an error saying so, never zero instructions.

use std::os::fd::{AsRawFd, OwnedFd};

use crate::host::{
    perf_event_open, PerfAttr, PERF_ATTR_DISABLED, PERF_ATTR_EXCLUDE_HV, PERF_ATTR_EXCLUDE_KERNEL,
    PERF_ATTR_INHERIT, PERF_COUNT_HW_INSTRUCTIONS, PERF_FORMAT_TOTAL_TIME_ENABLED,
    PERF_FORMAT_TOTAL_TIME_RUNNING, PERF_TYPE_HARDWARE,
};

use anyhow::Result;

/// The sentence every perf instruction report carries: an instruction count
/// says nothing about stalls, cache misses or time spent in the kernel.
pub const NOTE: &str = "perf counts retired user-space instructions (every thread of the target); \
instructions are not time: never convert instruction deltas into time";

// <linux/perf_event.h>
/// `_IO('$', 0)` and `_IO('$', 1)`.
const PERF_EVENT_IOC_ENABLE: libc::c_ulong = 0x2400;
const PERF_EVENT_IOC_DISABLE: libc::c_ulong = 0x2401;

/// Why a counter could not be opened or read.
#[derive(Debug, thiserror::Error)]
pub enum PerfError {
    #[error(
        "no hardware PMU: perf_event_open(PERF_COUNT_HW_INSTRUCTIONS) for tid {tid} failed: {source}; \
         instructions per request need the callgrind backend on this host"
    )]
    NoPmu { tid: i32, source: std::io::Error },
    #[error(
        "perf_event_open(PERF_COUNT_HW_INSTRUCTIONS) for tid {tid} refused: {source} \
         (root, or CAP_PERFMON, or /proc/sys/kernel/perf_event_paranoid <= 1)"
    )]
    Denied { tid: i32, source: std::io::Error },
    #[error("perf_event_open(PERF_COUNT_HW_INSTRUCTIONS) for tid {tid}: {source}")]
    Open { tid: i32, source: std::io::Error },
    #[error("listing the threads of pid {pid} (/proc/{pid}/task): {source}")]
    Tasks { pid: u32, source: std::io::Error },
    #[error("perf counter ioctl {what} on tid {tid}: {source}")]
    Ioctl {
        what: &'static str,
        tid: i32,
        source: std::io::Error,
    },
    #[error("reading the perf counter of tid {tid}: {source}")]
    Read { tid: i32, source: std::io::Error },
    #[error(
        "the instructions counter of tid {tid} was multiplexed (ran {running} of {enabled} ns): \
         its count would be an estimate; free the PMU (other perf users, the NMI watchdog) and retry"
    )]
    Multiplexed {
        tid: i32,
        enabled: u64,
        running: u64,
    },
}

/// One disabled, inheriting user-space instructions counter per thread of a
/// process.
pub struct Counters {
    fds: Vec<(i32, OwnedFd)>,
}

/// User-space instructions, disabled, inherited, with the times enabled
/// and running.
fn attr() -> PerfAttr {
    PerfAttr {
        kind: PERF_TYPE_HARDWARE,
        config: PERF_COUNT_HW_INSTRUCTIONS,
        read_format: PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING,
        flags: PERF_ATTR_DISABLED
            | PERF_ATTR_INHERIT
            | PERF_ATTR_EXCLUDE_KERNEL
            | PERF_ATTR_EXCLUDE_HV,
    }
}

/// Open a counter on thread `tid` (any CPU).
pub fn open_thread(tid: i32) -> Result<OwnedFd, PerfError> {
    perf_event_open(&attr(), tid).map_err(|source| match source.raw_os_error() {
        Some(libc::ENOENT) | Some(libc::EOPNOTSUPP) | Some(libc::ENODEV) => {
            PerfError::NoPmu { tid, source }
        }
        Some(libc::EACCES) | Some(libc::EPERM) => PerfError::Denied { tid, source },
        _ => PerfError::Open { tid, source },
    })
}

impl Counters {
    /// A counter on every thread of `pid` and of every process descended
    /// from it (a prefork server's workers run the requests). With
    /// `inherit`, processes and threads forked later are counted too.
    pub fn open(pid: u32) -> Result<Counters, PerfError> {
        let mut all = Counters::open_process(pid)?;
        for child in crate::process::descendants(pid) {
            match Counters::open_process(child) {
                Ok(c) => all.fds.extend(c.fds),
                // Exited since the listing: nothing to count.
                Err(PerfError::Tasks { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(all)
    }

    /// A counter on every thread of `pid` (`/proc/PID/task`). A thread
    /// started while the list is being read gets no inherited counter, so
    /// the list is read again until it has no thread without one.
    fn open_process(pid: u32) -> Result<Counters, PerfError> {
        let dir = format!("/proc/{pid}/task");
        let mut fds: Vec<(i32, OwnedFd)> = Vec::new();
        let mut seen: Vec<i32> = Vec::new();
        loop {
            let mut new: Vec<i32> = std::fs::read_dir(&dir)
                .map_err(|source| PerfError::Tasks { pid, source })?
                .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .filter(|tid| !seen.contains(tid))
                .collect();
            if new.is_empty() {
                return Ok(Counters { fds });
            }
            new.sort_unstable();
            for tid in new {
                seen.push(tid);
                match open_thread(tid) {
                    Ok(fd) => fds.push((tid, fd)),
                    // The thread exited after the listing: nothing to count.
                    Err(PerfError::Open { source, .. })
                        if source.raw_os_error() == Some(libc::ESRCH) => {}
                    Err(e) => return Err(e),
                }
            }
        }
    }

    fn ioctl(&self, req: libc::c_ulong, what: &'static str) -> Result<(), PerfError> {
        for (tid, fd) in &self.fds {
            // SAFETY: fd is an open perf event fd; ENABLE/DISABLE take no argument.
            if unsafe { libc::ioctl(fd.as_raw_fd(), req as _, 0) } != 0 {
                return Err(PerfError::Ioctl {
                    what,
                    tid: *tid,
                    source: std::io::Error::last_os_error(),
                });
            }
        }
        Ok(())
    }

    /// Start counting (the counters and the ones inherited by new threads).
    pub fn enable(&self) -> Result<(), PerfError> {
        self.ioctl(PERF_EVENT_IOC_ENABLE, "ENABLE")
    }

    /// Stop counting.
    pub fn disable(&self) -> Result<(), PerfError> {
        self.ioctl(PERF_EVENT_IOC_DISABLE, "DISABLE")
    }

    /// The sum over every counter. Call after the threads have exited to
    /// include the counts of threads started while counting.
    pub fn read_total(&self) -> Result<u64, PerfError> {
        let mut total = 0u64;
        for (tid, fd) in &self.fds {
            let mut v = [0u64; 3];
            // SAFETY: v is 24 writable bytes; the read format is value,
            // time_enabled, time_running.
            let n = unsafe { libc::read(fd.as_raw_fd(), v.as_mut_ptr().cast(), 24) };
            if n != 24 {
                return Err(PerfError::Read {
                    tid: *tid,
                    source: if n < 0 {
                        std::io::Error::last_os_error()
                    } else {
                        std::io::Error::other(format!("short read: {n} of 24 bytes"))
                    },
                });
            }
            let [value, enabled, running] = v;
            if running < enabled {
                return Err(PerfError::Multiplexed {
                    tid: *tid,
                    enabled,
                    running,
                });
            }
            total += value;
        }
        Ok(total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attr_asks_for_disabled_inherited_user_space_instructions() {
        let a = attr().bytes();
        let u64_at = |o: usize| u64::from_ne_bytes(a[o..o + 8].try_into().unwrap());
        assert_eq!(u32::from_ne_bytes(a[0..4].try_into().unwrap()), 0);
        assert_eq!(u32::from_ne_bytes(a[4..8].try_into().unwrap()), 112);
        assert_eq!(u64_at(8), PERF_COUNT_HW_INSTRUCTIONS);
        assert_eq!(u64_at(32), 0b11, "read_format: time enabled + running");
        assert_eq!(
            u64_at(40),
            0b110_0011,
            "disabled, inherit, exclude_kernel, exclude_hv"
        );
    }

    /// On this host the answer must agree with the PMU detection: a counter
    /// when there is a PMU, [`PerfError::NoPmu`] (never a count of 0) when
    /// there is none.
    #[test]
    fn opening_a_counter_agrees_with_pmu_detection() {
        let pmu = crate::host::detect_pmu();
        let me = std::process::id();
        match Counters::open(me) {
            Ok(c) => {
                assert!(
                    pmu.instructions,
                    "counter opened but detection said: {}",
                    pmu.detail
                );
                c.enable().unwrap();
                let mut x = 0u64;
                for i in 0..10_000u64 {
                    x = std::hint::black_box(x.wrapping_add(i));
                }
                c.disable().unwrap();
                assert!(c.read_total().unwrap() >= 10_000, "{x}");
            }
            Err(PerfError::NoPmu { .. }) => {
                assert!(
                    !pmu.instructions,
                    "NoPmu but detection said: {}",
                    pmu.detail
                )
            }
            Err(e @ PerfError::Denied { .. }) => crate::errln!("skipped (not allowed here): {e}"),
            Err(e) => panic!("{e}"),
        }
    }
}
