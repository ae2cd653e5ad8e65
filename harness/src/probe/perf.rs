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

use perf_event::events::Hardware;
use perf_event::{Builder, Counter};

use anyhow::Result;

/// The sentence every perf instruction report carries: an instruction count
/// says nothing about stalls, cache misses or time spent in the kernel.
pub const NOTE: &str = "perf counts retired user-space instructions (every thread of the target); \
instructions are not time: never convert instruction deltas into time";

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
    counters: Vec<(i32, Counter)>,
}

/// User-space instructions of thread `tid` on any CPU, disabled, inherited
/// by the threads and processes it starts, read with the times enabled and
/// running (the builder's defaults are disabled, user space only, both
/// times, FD_CLOEXEC; it passes its own, newer `perf_event_attr` size with
/// the fields past rig's zero, which older kernels accept).
fn builder(tid: i32) -> Builder<'static> {
    let mut b = Builder::new(Hardware::INSTRUCTIONS);
    b.observe_pid(tid).any_cpu().inherit(true);
    b
}

/// Open a counter on thread `tid` (any CPU).
pub fn open_thread(tid: i32) -> Result<Counter, PerfError> {
    builder(tid)
        .build()
        .map_err(|source| match source.raw_os_error() {
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
                Ok(c) => all.counters.extend(c.counters),
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
        let mut counters: Vec<(i32, Counter)> = Vec::new();
        let mut seen: Vec<i32> = Vec::new();
        loop {
            let mut new: Vec<i32> = std::fs::read_dir(&dir)
                .map_err(|source| PerfError::Tasks { pid, source })?
                .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .filter(|tid| !seen.contains(tid))
                .collect();
            if new.is_empty() {
                return Ok(Counters { counters });
            }
            new.sort_unstable();
            for tid in new {
                seen.push(tid);
                match open_thread(tid) {
                    Ok(c) => counters.push((tid, c)),
                    // The thread exited after the listing: nothing to count.
                    Err(PerfError::Open { source, .. })
                        if source.raw_os_error() == Some(libc::ESRCH) => {}
                    Err(e) => return Err(e),
                }
            }
        }
    }

    fn each(
        &mut self,
        what: &'static str,
        f: fn(&mut Counter) -> std::io::Result<()>,
    ) -> Result<(), PerfError> {
        for (tid, c) in &mut self.counters {
            f(c).map_err(|source| PerfError::Ioctl {
                what,
                tid: *tid,
                source,
            })?;
        }
        Ok(())
    }

    /// Start counting (the counters and the ones inherited by new threads).
    pub fn enable(&mut self) -> Result<(), PerfError> {
        self.each("ENABLE", Counter::enable)
    }

    /// Stop counting.
    pub fn disable(&mut self) -> Result<(), PerfError> {
        self.each("DISABLE", Counter::disable)
    }

    /// The sum over every counter. Call after the threads have exited to
    /// include the counts of threads started while counting.
    pub fn read_total(&mut self) -> Result<u64, PerfError> {
        let mut total = 0u64;
        for (tid, c) in &mut self.counters {
            let tid = *tid;
            let data = c
                .read_full()
                .map_err(|source| PerfError::Read { tid, source })?;
            let ns = |d: Option<std::time::Duration>| d.map_or(0, |d| d.as_nanos() as u64);
            let (enabled, running) = (ns(data.time_enabled()), ns(data.time_running()));
            if running < enabled {
                return Err(PerfError::Multiplexed {
                    tid,
                    enabled,
                    running,
                });
            }
            total += data.count();
        }
        Ok(total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attr_asks_for_disabled_inherited_user_space_instructions() {
        let b = builder(42);
        let a = b.attrs();
        assert_eq!(a.type_, 0, "PERF_TYPE_HARDWARE");
        assert_eq!(a.config, 1, "PERF_COUNT_HW_INSTRUCTIONS");
        assert_eq!(a.read_format, 0b11, "read_format: time enabled + running");
        assert_eq!(
            (
                a.disabled(),
                a.inherit(),
                a.exclude_kernel(),
                a.exclude_hv()
            ),
            (1, 1, 1, 1),
            "disabled, inherit, exclude_kernel, exclude_hv"
        );
        assert_eq!(a.exclude_user(), 0);
    }

    /// On this host the answer must agree with the PMU detection: a counter
    /// when there is a PMU, [`PerfError::NoPmu`] (never a count of 0) when
    /// there is none.
    #[test]
    fn opening_a_counter_agrees_with_pmu_detection() {
        let pmu = crate::host::detect_pmu();
        let me = std::process::id();
        match Counters::open(me) {
            Ok(mut c) => {
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
