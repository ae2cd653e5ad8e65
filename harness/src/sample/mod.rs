//! /proc and cgroup sampling of one target (the process tree rooted at its
//! pid: prefork workers are part of the server), by pid (never by name: two
//! same-named processes once made a fake 34 MB "leak": a sample by name
//! summed an unrelated process into the server).
//!
//! In: a pid and optionally the target's [`CgroupHandle`]. Out: snapshots
//! ([`ProcSnapshot`], [`CgroupSnapshot`]) whose differences give per-window
//! costs (CPU ns, faults, context switches), and a [`Sampler`] time series
//! of memory and CPU with its peaks.
//!
//! What each number covers, and why it is read where it is:
//! - `cpu_ns` is the sum of `/proc/<pid>/task/*/schedstat` (ns the thread ran).
//!   `/proc/<pid>/schedstat` alone is the MAIN THREAD only (checked by
//!   `cpu_ns_sums_threads_not_just_the_main_one` below). Threads that exited
//!   are missing from the sum; `utime`/`stime` (ticks, from `/proc/<pid>/stat`)
//!   include them, at tick resolution.
//! - `minflt`/`majflt` come from `/proc/<pid>/stat`: whole process, exited
//!   threads included.
//! - voluntary/involuntary context switches are summed over live threads
//!   (`/proc/<pid>/task/*/status`); the process's own status file shows the
//!   main thread only.
//! - `pss_kib` comes from smaps_rollup (costly for big processes: it walks the
//!   page tables; fine at 50 ms).

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::launch::cgroup::CgroupHandle;
pub use crate::launch::cgroup_stats::{parse_kv, CgroupSnapshot};

/// Fields of `/proc/<pid>/stat` rig uses.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StatFields {
    pub state: char,
    pub minflt: u64,
    pub majflt: u64,
    pub utime_ticks: u64,
    pub stime_ticks: u64,
    pub threads: u64,
    pub start_ticks: u64,
}

/// Parse `/proc/<pid>/stat` (fields counted after the last ')', since comm
/// may contain spaces and parentheses).
pub fn parse_stat(text: &str) -> Option<StatFields> {
    let rest = text.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    // f[0] is field 3 (state); field N is f[N - 3].
    let n = |field: usize| -> Option<u64> { f.get(field - 3)?.parse().ok() };
    Some(StatFields {
        state: f.first()?.chars().next()?,
        minflt: n(10)?,
        majflt: n(12)?,
        utime_ticks: n(14)?,
        stime_ticks: n(15)?,
        threads: n(20)?,
        start_ticks: n(22)?,
    })
}

/// Fields of `/proc/<pid>/status` rig uses (kB values as printed).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StatusFields {
    pub vm_rss_kib: u64,
    pub vm_hwm_kib: u64,
    pub threads: u64,
    pub voluntary_ctxt: u64,
    pub nonvoluntary_ctxt: u64,
}

fn field_u64(line: &str) -> u64 {
    line.split_whitespace()
        .next()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

pub fn parse_status(text: &str) -> StatusFields {
    let mut s = StatusFields::default();
    for line in text.lines() {
        let Some((k, v)) = line.split_once(':') else {
            continue;
        };
        match k {
            "VmRSS" => s.vm_rss_kib = field_u64(v),
            "VmHWM" => s.vm_hwm_kib = field_u64(v),
            "Threads" => s.threads = field_u64(v),
            "voluntary_ctxt_switches" => s.voluntary_ctxt = field_u64(v),
            "nonvoluntary_ctxt_switches" => s.nonvoluntary_ctxt = field_u64(v),
            _ => {}
        }
    }
    s
}

/// `Pss:` of `/proc/<pid>/smaps_rollup`, in KiB.
pub fn parse_smaps_rollup_pss(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix("Pss:"))
        .map(field_u64)
}

/// First field of a schedstat file: ns spent running.
pub fn parse_schedstat(text: &str) -> Option<u64> {
    text.split_whitespace().next()?.parse().ok()
}

/// Clock ticks per second (utime/stime unit).
pub fn clock_ticks() -> u64 {
    // SAFETY: no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as u64
    } else {
        100
    }
}

/// One reading of a process, or (`read_tree`) of a process tree summed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ProcSnapshot {
    pub pid: u32,
    /// Processes summed: 1 for `read`, the tree's size for `read_tree`.
    pub processes: u64,
    pub rss_kib: u64,
    pub pss_kib: u64,
    pub vm_hwm_kib: u64,
    pub threads: u64,
    pub fds: u64,
    /// Sum over live threads of `/proc/<pid>/task/*/schedstat`.
    pub cpu_ns: u64,
    /// Whole process, exited threads included (ticks of [`clock_ticks`]).
    pub utime_ticks: u64,
    pub stime_ticks: u64,
    pub minflt: u64,
    pub majflt: u64,
    /// Summed over live threads.
    pub voluntary_ctxt: u64,
    pub nonvoluntary_ctxt: u64,
}

fn read(path: impl AsRef<Path>) -> std::io::Result<String> {
    std::fs::read_to_string(path)
}

fn bad(pid: u32, what: &str) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        format!("pid {pid}: malformed {what}"),
    )
}

impl ProcSnapshot {
    /// Read every field for `pid`. Fails when the process is gone.
    pub fn read(pid: u32) -> std::io::Result<ProcSnapshot> {
        let stat = parse_stat(&read(format!("/proc/{pid}/stat"))?)
            .ok_or_else(|| bad(pid, "/proc/<pid>/stat"))?;
        if stat.state == 'Z' {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("pid {pid} has exited (zombie)"),
            ));
        }
        let status = parse_status(&read(format!("/proc/{pid}/status"))?);
        let pss_kib = read(format!("/proc/{pid}/smaps_rollup"))
            .ok()
            .and_then(|t| parse_smaps_rollup_pss(&t))
            .unwrap_or(0);
        let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))?.count() as u64;
        let (mut cpu_ns, mut vol, mut nonvol) = (0, 0, 0);
        for t in std::fs::read_dir(format!("/proc/{pid}/task"))?.filter_map(Result::ok) {
            // A thread may exit between listing and reading: skip it.
            if let Some(ns) = read(t.path().join("schedstat"))
                .ok()
                .and_then(|s| parse_schedstat(&s))
            {
                cpu_ns += ns;
            }
            if let Ok(s) = read(t.path().join("status")) {
                let s = parse_status(&s);
                vol += s.voluntary_ctxt;
                nonvol += s.nonvoluntary_ctxt;
            }
        }
        Ok(ProcSnapshot {
            pid,
            processes: 1,
            rss_kib: status.vm_rss_kib,
            pss_kib,
            vm_hwm_kib: status.vm_hwm_kib,
            threads: stat.threads,
            fds,
            cpu_ns,
            utime_ticks: stat.utime_ticks,
            stime_ticks: stat.stime_ticks,
            minflt: stat.minflt,
            majflt: stat.majflt,
            voluntary_ctxt: vol,
            nonvoluntary_ctxt: nonvol,
        })
    }

    /// `root` and every live descendant, summed: what a prefork server
    /// (master + workers) costs. Fails only when `root` is gone. RSS is
    /// summed too, so pages shared between processes count once per process
    /// (PSS divides them fairly); VmHWM is the sum of each process's own
    /// peak, an upper bound of the tree's (the cgroup peak is exact). CPU and
    /// faults of a process that exited between two readings leave the sum:
    /// a delta over a window in which workers were replaced undercounts.
    pub fn read_tree(root: u32) -> std::io::Result<ProcSnapshot> {
        let mut sum = ProcSnapshot::read(root)?;
        for pid in crate::process::descendants(root) {
            // A child may exit between the listing and the read: skip it.
            let Ok(p) = ProcSnapshot::read(pid) else {
                continue;
            };
            sum.processes += 1;
            sum.rss_kib += p.rss_kib;
            sum.pss_kib += p.pss_kib;
            sum.vm_hwm_kib += p.vm_hwm_kib;
            sum.threads += p.threads;
            sum.fds += p.fds;
            sum.cpu_ns += p.cpu_ns;
            sum.utime_ticks += p.utime_ticks;
            sum.stime_ticks += p.stime_ticks;
            sum.minflt += p.minflt;
            sum.majflt += p.majflt;
            sum.voluntary_ctxt += p.voluntary_ctxt;
            sum.nonvoluntary_ctxt += p.nonvoluntary_ctxt;
        }
        Ok(sum)
    }

    /// Counters accumulated from `earlier` to `self`.
    pub fn since(&self, earlier: &ProcSnapshot) -> ProcDelta {
        let ticks_ns = 1_000_000_000 / clock_ticks();
        ProcDelta {
            cpu_ns: self.cpu_ns.saturating_sub(earlier.cpu_ns),
            utime_stime_ns: (self.utime_ticks + self.stime_ticks)
                .saturating_sub(earlier.utime_ticks + earlier.stime_ticks)
                * ticks_ns,
            minflt: self.minflt.saturating_sub(earlier.minflt),
            majflt: self.majflt.saturating_sub(earlier.majflt),
            voluntary_ctxt: self.voluntary_ctxt.saturating_sub(earlier.voluntary_ctxt),
            nonvoluntary_ctxt: self
                .nonvoluntary_ctxt
                .saturating_sub(earlier.nonvoluntary_ctxt),
            rss_kib: self.rss_kib as i64 - earlier.rss_kib as i64,
            pss_kib: self.pss_kib as i64 - earlier.pss_kib as i64,
        }
    }
}

/// What happened between two snapshots.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ProcDelta {
    /// From schedstat: exact ns, live threads only (a thread that exited
    /// inside the window loses its share; compare with `utime_stime_ns`).
    pub cpu_ns: u64,
    /// From utime+stime: whole process, tick resolution.
    pub utime_stime_ns: u64,
    pub minflt: u64,
    pub majflt: u64,
    pub voluntary_ctxt: u64,
    pub nonvoluntary_ctxt: u64,
    pub rss_kib: i64,
    pub pss_kib: i64,
}

/// CPU ns used by rig itself (the load generator), all threads including
/// exited ones (getrusage, µs resolution). Generator CPU is recorded next
/// to the server's: a load generator that saturates its own cores caps the
/// throughput, and that must be visible rather than billed to the server.
pub fn self_cpu_ns() -> u64 {
    // SAFETY: zeroed rusage is a valid out-parameter.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return 0;
    }
    let us = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    (us(ru.ru_utime) + us(ru.ru_stime)) * 1000
}

// ---------------------------------------------------------------------------
// Sampler

/// One sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Point {
    /// Since `Sampler::start`.
    pub t_ms: u64,
    /// Processes in the target's tree (1 for a single process).
    pub processes: u64,
    pub rss_kib: u64,
    pub pss_kib: u64,
    pub hwm_kib: u64,
    pub threads: u64,
    pub fds: u64,
    pub cpu_ns: u64,
    pub minflt: u64,
    pub majflt: u64,
    pub cg_mem_bytes: Option<u64>,
    pub cg_peak_bytes: Option<u64>,
    pub cg_oom_kills: Option<u64>,
    pub cg_throttled: Option<u64>,
}

/// A sampled series and its extremes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Samples {
    pub pid: u32,
    pub interval_ms: u64,
    pub points: Vec<Point>,
    pub max_rss_kib: u64,
    pub max_pss_kib: u64,
    pub max_hwm_kib: u64,
    pub max_threads: u64,
    pub max_fds: u64,
    pub max_processes: u64,
    pub max_cg_mem_bytes: Option<u64>,
    /// The cgroup's own peak (catches spikes between samples).
    pub cg_peak_bytes: Option<u64>,
    pub cg_oom_kills: Option<u64>,
    /// Why sampling ended before `stop` (the process exited), if it did.
    pub ended: Option<String>,
}

impl Samples {
    fn add(&mut self, p: Point) {
        self.max_rss_kib = self.max_rss_kib.max(p.rss_kib);
        self.max_pss_kib = self.max_pss_kib.max(p.pss_kib);
        self.max_hwm_kib = self.max_hwm_kib.max(p.hwm_kib);
        self.max_threads = self.max_threads.max(p.threads);
        self.max_fds = self.max_fds.max(p.fds);
        self.max_processes = self.max_processes.max(p.processes);
        let max = |a: Option<u64>, b: Option<u64>| match (a, b) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        self.max_cg_mem_bytes = max(self.max_cg_mem_bytes, p.cg_mem_bytes);
        self.cg_peak_bytes = max(self.cg_peak_bytes, p.cg_peak_bytes);
        self.cg_oom_kills = max(self.cg_oom_kills, p.cg_oom_kills);
        self.points.push(p);
    }
}

/// Background sampling of one pid (and its cgroup).
pub struct Sampler {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Samples>>,
}

impl Sampler {
    /// Sample `pid` every `interval` (50 ms is the usual) until `stop`. The
    /// first point is taken before this returns.
    pub fn start(pid: u32, cgroup: Option<CgroupHandle>, interval: Duration) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            let t0 = Instant::now();
            let mut out = Samples {
                pid,
                interval_ms: interval.as_millis() as u64,
                ..Samples::default()
            };
            let mut next = t0;
            let mut first = true;
            loop {
                match sample_once(pid, cgroup.as_ref(), t0) {
                    Ok(p) => out.add(p),
                    Err(e) => {
                        out.ended = Some(format!("pid {pid}: {e}"));
                        if first {
                            let _ = tx.send(());
                        }
                        break;
                    }
                }
                if first {
                    let _ = tx.send(());
                    first = false;
                }
                if flag.load(Ordering::Acquire) {
                    break;
                }
                // Fixed schedule, so a slow read does not stretch the series.
                next += interval;
                let now = Instant::now();
                if next > now {
                    park_until(&flag, next);
                } else {
                    next = now;
                }
                if flag.load(Ordering::Acquire) {
                    // One last point at stop time.
                    if let Ok(p) = sample_once(pid, cgroup.as_ref(), t0) {
                        out.add(p);
                    }
                    break;
                }
            }
            out
        });
        let _ = rx.recv();
        Sampler {
            stop,
            thread: Some(thread),
        }
    }

    /// Stop and return the series.
    pub fn stop(mut self) -> Samples {
        self.finish()
    }

    fn finish(&mut self) -> Samples {
        self.stop.store(true, Ordering::Release);
        match self.thread.take() {
            Some(t) => {
                t.thread().unpark();
                t.join().unwrap_or_default()
            }
            None => Samples::default(),
        }
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.finish();
    }
}

fn park_until(flag: &AtomicBool, deadline: Instant) {
    while !flag.load(Ordering::Acquire) {
        let now = Instant::now();
        if now >= deadline {
            return;
        }
        std::thread::park_timeout(deadline - now);
    }
}

fn sample_once(pid: u32, cg: Option<&CgroupHandle>, t0: Instant) -> std::io::Result<Point> {
    let s = ProcSnapshot::read_tree(pid)?;
    let c = cg.and_then(|h| CgroupSnapshot::read(h).ok());
    Ok(Point {
        t_ms: t0.elapsed().as_millis() as u64,
        processes: s.processes,
        rss_kib: s.rss_kib,
        pss_kib: s.pss_kib,
        hwm_kib: s.vm_hwm_kib,
        threads: s.threads,
        fds: s.fds,
        cpu_ns: s.cpu_ns,
        minflt: s.minflt,
        majflt: s.majflt,
        cg_mem_bytes: c.and_then(|c| c.mem_current_bytes),
        cg_peak_bytes: c.and_then(|c| c.mem_peak_bytes),
        cg_oom_kills: c.and_then(|c| c.oom_kills),
        cg_throttled: c.and_then(|c| c.cpu_throttled),
    })
}

#[cfg(test)]
mod tests;
