//! Launching a target: fresh process group, pinning, cgroup, readiness, and
//! proof of what was started.
//!
//! In: a [`TargetSpec`] and [`LaunchOptions`]. Out: a [`Launched`] target
//! whose port is proven to be held by the process rig started (a stale
//! server on the port would otherwise be measured) and whose mapped objects
//! are recorded with size, SHA-256 and build-id (what actually ran).
//! `Launched::stop` (or drop, or [`cleanup_all`] from the CLI's signal path)
//! removes every process and cgroup rig created (a leftover server would
//! hold the port and skew the next run).
//!
//! Clean-up paths:
//! - normal: `stop(grace)`: SIGTERM to the group, grace, SIGKILL, reap,
//!   cgroup emptied and removed, then a check that nothing is left;
//! - panic or early return: `Drop` does the same with a short grace;
//! - SIGINT/SIGTERM of rig: the CLI calls [`cleanup_all`], which works from
//!   a process-global registry of live targets;
//! - SIGKILL of rig cannot be caught. Targets in a cgroup are then found and
//!   removed by the next rig ([`super::cgroup::reap_stale_cgroups`], which
//!   `launch` runs first). A target without a cgroup (none writable, no
//!   budget asked) would survive; that case is written in `Launched::notes`.
//!
//! rig only ever signals the process group it created, and only while the
//! group's leader is unreaped (so the pgid cannot have been reused), plus
//! members of its own cgroups.

use std::collections::VecDeque;
use std::ffi::CString;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;
use sha2::{Digest, Sha256};

use super::cgroup::{self, Cgroup, CgroupError, CgroupHandle, Limits};
use super::maps::{MapsError, ProcMaps};
use super::port::{self, HolderCheck, PortProof};
use super::spec::{PortPassing, Ready, SpecError, TargetSpec};
use super::ProcessId;

/// How to launch (the spec says what).
#[derive(Debug, Clone, Default)]
pub struct LaunchOptions {
    /// Pin the target to these CPUs (sched_setaffinity before exec).
    pub server_cpus: Option<Vec<usize>>,
    /// Memory limit with swap 0 (cgroup).
    pub memory_limit_mib: Option<u64>,
    /// CPU quota in cores (cgroup).
    pub cpu_quota: Option<f64>,
    /// Overrides the spec's `ready_timeout_ms`.
    pub ready_timeout: Option<Duration>,
    /// Names the cgroup (`rig-<label>-<rig pid>-<n>`); the spec's name if empty.
    pub label: String,
}

#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error("not starting target {name}: rig was interrupted (SIGINT/SIGTERM)")]
    Interrupted { name: String },
    #[error("target {name}: {why}")]
    User { name: String, why: String },
    #[error(transparent)]
    Spec(#[from] SpecError),
    #[error(transparent)]
    Cgroup(#[from] CgroupError),
    #[error("cannot find a free loopback port for target {name}: {source}")]
    FreePort {
        name: String,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "--server-cpus {requested:?}: this machine's online CPUs are {online}; give CPUs from that list"
    )]
    Cpus {
        requested: Vec<usize>,
        online: String,
    },
    #[error(
        "cannot start target {name}: {program} {args:?} (cwd {cwd}): {source}; check argv[0] and cwd in {spec}"
    )]
    Spawn {
        name: String,
        program: PathBuf,
        args: Vec<String>,
        cwd: PathBuf,
        spec: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "target {name} (pid {pid}) was not ready after {waited:?} (waiting for {ready}): {}\n--- stderr tail ---\n{stderr_tail}",
        exit.as_deref().unwrap_or("still running, killed by rig")
    )]
    NotReady {
        name: String,
        pid: u32,
        waited: Duration,
        ready: String,
        /// How it exited on its own, if it did.
        exit: Option<String>,
        stderr_tail: String,
    },
    #[error(
        "port {port} is held by pid {holder_pid} ({holder_cmdline}), {}; stop that process or let rig pick the port (port = \"argv\")",
        match target_pid {
            Some(p) => format!("not by the target rig started (pid {p})"),
            None => "before rig started the target".to_string(),
        }
    )]
    PortHeldByOther {
        port: u16,
        holder_pid: u32,
        holder_cmdline: String,
        target_pid: Option<u32>,
    },
    #[error(
        "target {name} (pid {pid}) became ready but no process listens on port {port}; does its argv/env pass {{port}} to it?"
    )]
    NoListener { name: String, pid: u32, port: u16 },
    #[error(
        "target pid {pid}: asked to pin to CPUs {requested:?}, but it may run on {effective:?}"
    )]
    Affinity {
        pid: u32,
        requested: Vec<usize>,
        effective: Vec<usize>,
    },
    #[error(transparent)]
    Maps(#[from] MapsError),
    #[error("cannot hash {path} mapped by pid {pid}: {source}")]
    Hash {
        pid: u32,
        path: String,
        #[source]
        source: std::io::Error,
    },
}

/// One file mapped by the target (or its executable), for the manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ObjectFact {
    /// As printed in `/proc/<pid>/maps` (or the `/proc/<pid>/exe` link).
    pub path: String,
    pub size: u64,
    pub sha256: String,
    pub build_id: Option<String>,
    /// The file on disk was deleted or replaced after it was mapped; the
    /// hash is of what is mapped (read through `/proc/<pid>/map_files`).
    pub deleted: bool,
}

/// How a launched target ended.
#[derive(Debug, Clone, Serialize)]
pub struct ExitInfo {
    pub code: Option<i32>,
    pub signal: Option<i32>,
    /// It exited before rig asked it to.
    pub exited_on_its_own: bool,
    /// It (or its group) outlived the SIGTERM grace and got SIGKILL.
    pub killed_after_grace: bool,
    /// Processes of its group or cgroup still present after clean-up
    /// (should be empty; anything here is a bug worth reporting).
    pub leftover: Vec<u32>,
    /// The cgroup, if any, was removed.
    pub cgroup_removed: bool,
    /// Last reading of the cgroup, just before removal.
    pub cgroup: Option<super::cgroup_stats::CgroupSnapshot>,
    pub stderr_tail: String,
}

impl ExitInfo {
    pub fn describe(&self) -> String {
        describe_exit(self.code, self.signal)
    }
}

fn describe_exit(code: Option<i32>, signal: Option<i32>) -> String {
    match (code, signal) {
        (Some(c), _) => format!("exited with code {c}"),
        (None, Some(s)) => format!("killed by signal {s} ({})", signal_name(s)),
        (None, None) => "exit status unknown".into(),
    }
}

fn signal_name(s: i32) -> &'static str {
    match s {
        libc::SIGKILL => "SIGKILL",
        libc::SIGTERM => "SIGTERM",
        libc::SIGINT => "SIGINT",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGPIPE => "SIGPIPE",
        _ => "?",
    }
}

// ---------------------------------------------------------------------------
// Output capture.

/// The last `cap` bytes written to one of the target's pipes.
#[derive(Debug)]
pub struct OutputTail {
    inner: Mutex<TailState>,
    eof: Condvar,
    matched: AtomicBool,
}

#[derive(Debug, Default)]
struct TailState {
    buf: VecDeque<u8>,
    total: u64,
    eof: bool,
}

/// Bytes kept per stream: enough for a panic message with a backtrace.
pub const TAIL_BYTES: usize = 64 * 1024;

impl OutputTail {
    fn new() -> Arc<OutputTail> {
        Arc::new(OutputTail {
            inner: Mutex::new(TailState::default()),
            eof: Condvar::new(),
            matched: AtomicBool::new(false),
        })
    }

    fn push(&self, data: &[u8]) {
        let mut s = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        s.total += data.len() as u64;
        let data = &data[data.len().saturating_sub(TAIL_BYTES)..];
        let excess = (s.buf.len() + data.len()).saturating_sub(TAIL_BYTES);
        s.buf.drain(..excess);
        s.buf.extend(data);
    }

    /// The kept bytes, lossily decoded.
    pub fn text(&self) -> String {
        let s = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let (a, b) = s.buf.as_slices();
        let mut v = a.to_vec();
        v.extend_from_slice(b);
        String::from_utf8_lossy(&v).into_owned()
    }

    /// Total bytes ever written (the tail may hold fewer).
    pub fn total_bytes(&self) -> u64 {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).total
    }

    /// Wait until the pipe is closed (every writer exited), at most `t`.
    fn wait_eof(&self, t: Duration) {
        let s = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let _ = self.eof.wait_timeout_while(s, t, |s| !s.eof);
    }
}

/// Drain `r` into `tail` until EOF; flag the first line containing
/// `pattern`. A draining thread per pipe keeps the target from ever blocking
/// on a full pipe.
fn drain(mut r: impl Read + Send + 'static, tail: Arc<OutputTail>, pattern: Option<String>) {
    std::thread::spawn(move || {
        let mut buf = [0u8; 8192];
        let mut line: Vec<u8> = Vec::new();
        loop {
            match r.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    tail.push(&buf[..n]);
                    if let Some(p) = &pattern {
                        for &c in &buf[..n] {
                            if c == b'\n' {
                                if String::from_utf8_lossy(&line).contains(p.as_str()) {
                                    tail.matched.store(true, Ordering::Release);
                                }
                                line.clear();
                            } else if line.len() < TAIL_BYTES {
                                line.push(c);
                            }
                        }
                    }
                }
            }
        }
        let mut s = tail.inner.lock().unwrap_or_else(|e| e.into_inner());
        s.eof = true;
        tail.eof.notify_all();
    });
}

// ---------------------------------------------------------------------------
// Registry of live targets, for clean-up from the CLI's signal path.

struct LiveEntry {
    key: u64,
    /// Leader pid = pgid; unreaped while registered.
    pgid: u32,
    cgroup_dirs: Vec<PathBuf>,
}

static LIVE: Mutex<Vec<LiveEntry>> = Mutex::new(Vec::new());
static NEXT_KEY: AtomicU64 = AtomicU64::new(0);

fn live() -> std::sync::MutexGuard<'static, Vec<LiveEntry>> {
    LIVE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Kill every target rig launched and still holds, and remove their
/// cgroups. For the CLI's SIGINT/SIGTERM path (not async-signal-safe: call
/// it from normal code after the signal flag is seen). Returns how many
/// targets it cleaned up. The `Launched` values stay valid; dropping them
/// later reaps the leaders.
pub fn cleanup_all() -> usize {
    let entries: Vec<(u32, Vec<PathBuf>)> = live()
        .iter()
        .map(|e| (e.pgid, e.cgroup_dirs.clone()))
        .collect();
    for (pgid, _) in &entries {
        // SAFETY: plain syscall on a group whose leader rig has not reaped.
        unsafe { libc::killpg(*pgid as i32, libc::SIGTERM) };
    }
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_millis(500)
        && entries.iter().any(|(g, _)| !group_members(*g).is_empty())
    {
        std::thread::sleep(Duration::from_millis(10));
    }
    for (pgid, dirs) in &entries {
        // SAFETY: as above.
        unsafe { libc::killpg(*pgid as i32, libc::SIGKILL) };
        if let Err(e) = cgroup::remove_dirs(dirs) {
            log::warn!("{e}");
        }
    }
    entries.len()
}

/// Give `dir` and everything rig rendered into it to `ids`.
fn chown_tree(dir: &std::path::Path, ids: super::user::RunAs) -> std::io::Result<()> {
    std::os::unix::fs::lchown(dir, Some(ids.uid), Some(ids.gid))?;
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        if e.file_type()?.is_dir() {
            chown_tree(&e.path(), ids)?;
        } else {
            std::os::unix::fs::lchown(e.path(), Some(ids.uid), Some(ids.gid))?;
        }
    }
    Ok(())
}

/// One line, once per rig process: a target running as root.
fn warn_root_once(name: &str) {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        eprintln!(
            "rig: warning: target {name} runs as root; give `user = \"NAME\"` in its spec or \
             --user NAME to run it unprivileged"
        );
    });
}

/// Live (non-zombie) members of process group `pgid`.
pub fn group_members(pgid: u32) -> Vec<u32> {
    port::all_pids()
        .into_iter()
        .filter(|p| {
            std::fs::read_to_string(format!("/proc/{p}/stat")).is_ok_and(|s| {
                port::parse_stat_pgrp(&s) == Some(pgid) && stat_state(&s) != Some('Z')
            })
        })
        .collect()
}

/// `rig-launch-<pid>-<n>` directories of rig processes that no longer exist
/// (a SIGKILLed rig cannot clean up after itself).
fn remove_stale_run_dirs() {
    let Ok(dir) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for e in dir.filter_map(Result::ok) {
        let name = e.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix("rig-launch-")) else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        // Only rig's own private directories: never one another user made.
        let ours = std::fs::symlink_metadata(e.path()).is_ok_and(|m| {
            use std::os::unix::fs::MetadataExt;
            // SAFETY: no preconditions.
            m.is_dir() && m.uid() == unsafe { libc::geteuid() } && m.mode() & 0o077 == 0
        });
        if ours && !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

fn stat_state(stat: &str) -> Option<char> {
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .next()?
        .chars()
        .next()
}

// ---------------------------------------------------------------------------

/// A running target rig started. Stopping (explicitly or by drop) kills its
/// process group and removes its cgroup.
pub struct Launched {
    pub name: String,
    pub pid: u32,
    /// = pid: the target leads its own process group.
    pub pgid: u32,
    pub id: ProcessId,
    pub port: u16,
    pub proof: PortProof,
    /// The executable (`/proc/<pid>/exe`) and every distinct mapped file.
    pub exe: ObjectFact,
    pub objects: Vec<ObjectFact>,
    /// CPUs the target may run on, read back from `/proc/<pid>/status`.
    pub affinity: Vec<usize>,
    /// How budgets/accounting were set up, and what is missing.
    pub notes: Vec<String>,
    pub ready_after: Duration,
    cgroup: Option<Cgroup>,
    child: Option<Child>,
    stdout: Arc<OutputTail>,
    stderr: Arc<OutputTail>,
    key: u64,
    /// The launch's `{run_dir}` (rendered config files), removed at stop.
    run_dir: PathBuf,
    /// Cleans up the cgroups and run dir if rig is SIGKILLed.
    watchdog: Option<super::watchdog::Watchdog>,
    /// The target's real uid and gid right after exec.
    pub runs_as: Option<super::user::RunAs>,
    stopped: Option<ExitInfo>,
}

impl std::fmt::Debug for Launched {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Launched")
            .field("name", &self.name)
            .field("pid", &self.pid)
            .field("port", &self.port)
            .field("cgroup", &self.cgroup_handle())
            .finish_non_exhaustive()
    }
}

impl Launched {
    /// Paths of the target's cgroup, for sampling.
    pub fn cgroup_handle(&self) -> Option<CgroupHandle> {
        self.cgroup.as_ref().map(Cgroup::handle)
    }

    pub fn stdout_tail(&self) -> String {
        self.stdout.text()
    }

    pub fn stderr_tail(&self) -> String {
        self.stderr.text()
    }

    /// Whether the leader has exited (without reaping it: the pgid stays
    /// reserved until `stop`).
    pub fn has_exited(&self) -> bool {
        exited_nowait(self.pid)
    }

    /// Wait up to `t` for the leader to exit on its own.
    pub fn wait_exit(&self, t: Duration) -> bool {
        let t0 = Instant::now();
        while !exited_nowait(self.pid) {
            if t0.elapsed() > t {
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        true
    }

    /// SIGTERM the group, wait `grace`, SIGKILL the group, reap, remove the
    /// cgroup, verify nothing of the group or cgroup remains.
    pub fn stop(mut self, grace: Duration) -> ExitInfo {
        self.shutdown(grace)
    }

    fn shutdown(&mut self, grace: Duration) -> ExitInfo {
        if let Some(info) = &self.stopped {
            return info.clone();
        }
        let pgid = self.pgid as i32;
        let exited_on_its_own = exited_nowait(self.pid);
        // Everything that may become an orphan once the leader dies.
        let mut family: Vec<u32> = port::descendants(self.pid);
        family.extend(group_members(self.pgid));
        if let Some(cg) = &self.cgroup {
            family.extend(cg.handle().procs());
        }
        family.retain(|&p| p != self.pid);
        family.sort_unstable();
        family.dedup();
        // Who they are (pid and start time): a pid freed during the grace
        // period and reused by another process is never signalled.
        let members: Vec<ProcessId> = family
            .iter()
            .filter_map(|&p| ProcessId::of(p).ok())
            .collect();
        let still_running = |id: &ProcessId| ProcessId::of(id.pid).is_ok_and(|now| now == *id);
        // SAFETY (all killpg below): the group leader is our unreaped child,
        // so the pgid still names the group rig created.
        unsafe { libc::killpg(pgid, libc::SIGTERM) };
        let t0 = Instant::now();
        while t0.elapsed() < grace
            && !(exited_nowait(self.pid) && group_members(self.pgid).is_empty())
        {
            std::thread::sleep(Duration::from_millis(5));
        }
        let mut killed_after_grace = false;
        if !exited_nowait(self.pid) || !group_members(self.pgid).is_empty() {
            killed_after_grace = true;
            unsafe { libc::killpg(pgid, libc::SIGKILL) };
            let t1 = Instant::now();
            while t1.elapsed() < Duration::from_secs(5)
                && !(exited_nowait(self.pid) && group_members(self.pgid).is_empty())
            {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        // Tree members that left the group (setsid) die too: rig started
        // them, through the target.
        for id in members.iter().filter(|id| still_running(id)) {
            // SAFETY: plain syscall on a process of the tree rig launched
            // (same pid and start time as when the tree was listed).
            unsafe { libc::kill(id.pid as i32, libc::SIGKILL) };
        }
        let cgroup_snap = self
            .cgroup
            .as_ref()
            .and_then(|c| super::cgroup_stats::CgroupSnapshot::read(&c.handle()).ok());
        let mut leftover = Vec::new();
        let mut cgroup_removed = false;
        if let Some(cg) = &mut self.cgroup {
            leftover.extend(cg.kill_all(Duration::from_secs(2)));
            match cg.remove() {
                Ok(()) => cgroup_removed = true,
                Err(e) => log::warn!("target {}: {e}", self.name),
            }
        }
        live().retain(|e| e.key != self.key);
        let status: Option<ExitStatus> = self.child.as_mut().and_then(|c| c.wait().ok());
        self.child = None;
        reap_orphans(&family, Duration::from_millis(500));
        leftover.extend(group_members(self.pgid));
        // Members of the tree that left the group (setsid) and the cgroup.
        leftover.extend(
            members
                .iter()
                .filter(|id| still_running(id))
                .map(|id| id.pid),
        );
        leftover.sort_unstable();
        leftover.dedup();
        self.stderr.wait_eof(Duration::from_millis(200));
        if let Err(e) = std::fs::remove_dir_all(&self.run_dir) {
            if e.kind() != std::io::ErrorKind::NotFound {
                log::warn!(
                    "target {}: removing {}: {e}",
                    self.name,
                    self.run_dir.display()
                );
            }
        }
        if let Some(mut w) = self.watchdog.take() {
            w.dismiss();
        }
        let info = ExitInfo {
            code: status.and_then(|s| s.code()),
            signal: status.and_then(|s| s.signal()),
            exited_on_its_own,
            killed_after_grace,
            leftover,
            cgroup_removed,
            cgroup: cgroup_snap,
            stderr_tail: self.stderr.text(),
        };
        self.stopped = Some(info.clone());
        info
    }
}

impl Drop for Launched {
    fn drop(&mut self) {
        self.shutdown(Duration::from_millis(300));
    }
}

/// Orphaned descendants of a target (a pre-fork server's workers after the
/// master died) are reparented to rig instead of init, so `stop` can reap
/// them: some inits (containers, micro-VMs) never reap, and their zombies
/// would linger. Process-wide and idempotent.
fn become_subreaper() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: plain prctl.
        if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } != 0 {
            log::warn!(
                "cannot become a child subreaper: {}",
                std::io::Error::last_os_error()
            );
        }
    });
}

/// Reap `pids` that became rig's children by reparenting (never pids a
/// `std::process::Child` owns: those are reaped by their owner). Waits up
/// to `t` for each to exit and be reparented.
fn reap_orphans(pids: &[u32], t: Duration) {
    let t0 = Instant::now();
    for &p in pids {
        loop {
            let mut status = 0;
            // SAFETY: plain syscall.
            let r = unsafe { libc::waitpid(p as i32, &mut status, libc::WNOHANG) };
            if r == p as i32 {
                break;
            }
            let gone = !std::path::Path::new(&format!("/proc/{p}")).exists();
            if gone || t0.elapsed() > t {
                break;
            }
            // r == 0 (ours, running) or ECHILD (not yet reparented to us).
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

/// Leader exited? `WNOWAIT` leaves it a zombie, so its pid (= the pgid) is
/// not reused before rig is done signalling the group.
fn exited_nowait(pid: u32) -> bool {
    // SAFETY: zeroed siginfo_t is a valid out-parameter for waitid.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    let r = unsafe {
        libc::waitid(
            libc::P_PID,
            pid as libc::id_t,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        )
    };
    // r < 0 (ECHILD): already reaped, so certainly exited.
    r < 0 || unsafe { info.si_pid() } != 0
}

/// Parse a CPU list (`0-3,5`), as in Cpus_allowed_list or sysfs `online`.
pub fn parse_cpu_list(s: &str) -> Option<Vec<usize>> {
    let mut out = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (a.parse().ok()?, b.parse().ok()?);
                out.extend(a..=b);
            }
            None => out.push(part.parse().ok()?),
        }
    }
    Some(out)
}

/// CPUs a process may run on, from `Cpus_allowed_list` in `/proc/<pid>/status`.
pub fn affinity_of(pid: u32) -> std::io::Result<Vec<usize>> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .and_then(parse_cpu_list)
        .ok_or_else(|| std::io::Error::other("no Cpus_allowed_list"))
}

fn online_cpus() -> (String, Vec<usize>) {
    let s = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap_or_default();
    let list = parse_cpu_list(&s).unwrap_or_default();
    (s.trim().to_string(), list)
}

/// SHA-256 (hex) and size of everything read from `r`, plus the bytes when
/// `keep` (for the build-id).
pub fn hash_file(path: &std::path::Path) -> std::io::Result<(u64, String, Vec<u8>)> {
    let data = std::fs::read(path)?;
    let digest = Sha256::digest(&data);
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    Ok((data.len() as u64, hex, data))
}

/// Size, SHA-256 and build-id of every distinct file `pid` maps, read
/// through `/proc/<pid>/map_files` (what is mapped, even if the file on disk
/// was since replaced), and of its executable.
// A launch error is built once per failed launch and carries what the user
// needs to fix it; its size does not matter.
#[allow(clippy::result_large_err)]
pub fn mapped_objects(pid: u32) -> Result<(ObjectFact, Vec<ObjectFact>), LaunchError> {
    let maps = ProcMaps::read(pid)?;
    let mut objects: Vec<ObjectFact> = Vec::new();
    for m in maps.mappings.iter().filter(|m| m.is_file_backed()) {
        let path = m.path.clone().unwrap_or_default();
        if objects.iter().any(|o| o.path == path) {
            continue;
        }
        let via = PathBuf::from(format!("/proc/{pid}/map_files/{:x}-{:x}", m.start, m.end));
        let via = if via.exists() {
            via
        } else {
            maps.readable_path(&path)
        };
        let (size, sha256, data) = hash_file(&via).map_err(|source| LaunchError::Hash {
            pid,
            path: path.clone(),
            source,
        })?;
        objects.push(ObjectFact {
            deleted: m.is_deleted(),
            build_id: super::maps::build_id_of_data(&data),
            path,
            size,
            sha256,
        });
    }
    let exe_link = format!("/proc/{pid}/exe");
    let exe_path = std::fs::read_link(&exe_link)
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "?".into());
    let (size, sha256, data) =
        hash_file(std::path::Path::new(&exe_link)).map_err(|source| LaunchError::Hash {
            pid,
            path: exe_path.clone(),
            source,
        })?;
    let exe = ObjectFact {
        deleted: exe_path.ends_with(" (deleted)"),
        build_id: super::maps::build_id_of_data(&data),
        path: exe_path,
        size,
        sha256,
    };
    Ok((exe, objects))
}

fn connect_any(port: u16, t: Duration) -> Option<TcpStream> {
    let addrs: [SocketAddr; 2] = [
        ([127, 0, 0, 1], port).into(),
        (std::net::Ipv6Addr::LOCALHOST, port).into(),
    ];
    addrs
        .iter()
        .find_map(|a| TcpStream::connect_timeout(a, t).ok())
}

/// `GET path` answers with a status below 500.
fn http_ready(port: u16, path: &str) -> bool {
    let Some(mut s) = connect_any(port, Duration::from_millis(200)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
    let req = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n");
    if s.write_all(req.as_bytes()).is_err() {
        return false;
    }
    let mut buf = [0u8; 64];
    let mut got = 0;
    while got < 12 {
        match s.read(&mut buf[got..]) {
            Ok(0) | Err(_) => break,
            Ok(n) => got += n,
        }
    }
    parse_status_line(&buf[..got]).is_some_and(|c| c < 500)
}

/// Status code of an HTTP/1.x status line.
pub fn parse_status_line(b: &[u8]) -> Option<u16> {
    let s = std::str::from_utf8(b.get(..12)?).ok()?;
    if !s.starts_with("HTTP/1.") {
        return None;
    }
    s[9..12].parse().ok()
}

/// Start the target described by `spec`, wait until it is ready, prove it
/// holds its port, and record what it maps.
#[allow(clippy::result_large_err)] // see mapped_objects
pub fn launch(spec: &TargetSpec, opts: &LaunchOptions) -> Result<Launched, LaunchError> {
    let interrupted = || LaunchError::Interrupted {
        name: spec.name.clone(),
    };
    if crate::interrupt::requested() {
        return Err(interrupted());
    }
    become_subreaper();
    for p in cgroup::reap_stale_cgroups() {
        log::warn!("removed stale cgroup {} (its rig was killed)", p.display());
    }
    let (online_text, online) = online_cpus();
    if let Some(cpus) = &opts.server_cpus {
        if cpus.is_empty() || cpus.iter().any(|c| !online.contains(c)) {
            return Err(LaunchError::Cpus {
                requested: cpus.clone(),
                online: online_text,
            });
        }
    }

    let port = match &spec.port {
        PortPassing::Fixed(p) => {
            // Someone already listening: the target would lose the bind (or
            // share it via SO_REUSEPORT) and the load would reach them.
            if let Some(&(holder, _)) = port::port_holders(*p).first() {
                return Err(LaunchError::PortHeldByOther {
                    port: *p,
                    holder_pid: holder,
                    holder_cmdline: super::cmdline(holder),
                    target_pid: None,
                });
            }
            *p
        }
        PortPassing::Argv | PortPassing::Env(_) => {
            port::free_port().map_err(|source| LaunchError::FreePort {
                name: spec.name.clone(),
                source,
            })?
        }
    };
    let key = NEXT_KEY.fetch_add(1, Ordering::Relaxed);
    remove_stale_run_dirs();
    // A fresh private directory (mkdtemp, 0700): a name another user can
    // predict and create first would let them plant links or edit configs.
    let prefix = format!("rig-launch-{}-{key}-", std::process::id());
    let run_dir = match crate::fsutil::private_dir(&prefix) {
        Ok(d) => d,
        Err(e) => {
            return Err(SpecError::Placeholder {
                path: spec.path.clone(),
                placeholder: "run_dir".into(),
                why: format!(
                    "creating {}*: {e}",
                    std::env::temp_dir().join(&prefix).display()
                ),
            }
            .into())
        }
    };
    let rendered = spec.render_files(port, &run_dir);
    let rc = rendered.and_then(|()| spec.command(port, Some(&run_dir)));
    let rc = match rc {
        Ok(rc) => rc,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&run_dir);
            return Err(e.into());
        }
    };
    // The account the target drops to; its run dir becomes its own so it
    // can read its config (and write a pid file) there.
    let run_as = match spec
        .user
        .as_deref()
        .map(|u| super::user::resolve(u, spec.group.as_deref()))
        .transpose()
        .and_then(|ids| {
            if let Some(ids) = ids {
                chown_tree(&run_dir, ids)
                    .map_err(|e| format!("giving {} to it: {e}", run_dir.display()))?;
            }
            Ok(ids)
        }) {
        Ok(ids) => ids,
        Err(why) => {
            let _ = std::fs::remove_dir_all(&run_dir);
            return Err(LaunchError::User {
                name: spec.name.clone(),
                why,
            });
        }
    };

    let label = if opts.label.is_empty() {
        spec.name.as_str()
    } else {
        opts.label.as_str()
    };
    let cg = Cgroup::create(
        label,
        Limits {
            memory_mib: opts.memory_limit_mib,
            cpu_quota: opts.cpu_quota,
        },
    )
    .inspect_err(|_| {
        let _ = std::fs::remove_dir_all(&run_dir);
    })?;
    let watchdog = super::watchdog::Watchdog::start(
        &run_dir,
        &cg.as_ref().map(|c| c.handle().dirs).unwrap_or_default(),
    );
    let mut notes = Vec::new();
    match &cg {
        Some(c) => notes.extend(c.notes.iter().cloned()),
        None => notes.push(
            "no writable cgroup: memory peak and OOM kills are not accounted, and a SIGKILLed rig \
             would leave this target running"
                .into(),
        ),
    }

    let mut cmd = Command::new(&rc.program);
    cmd.args(&rc.args)
        .envs(&rc.env)
        .current_dir(&rc.cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    // Everything the child does between fork and exec is prepared here: only
    // async-signal-safe calls are allowed there.
    let procs_files: Vec<CString> = cg
        .as_ref()
        .map(|c| c.handle().procs_files())
        .unwrap_or_default()
        .iter()
        .map(|p| CString::new(p.as_os_str().as_bytes()).expect("no NUL in cgroup path"))
        .collect();
    let cpuset: Option<libc::cpu_set_t> = opts.server_cpus.as_ref().map(|cpus| {
        // SAFETY: cpu_set_t is plain data; CPU_SET stays within it for
        // cpus validated against the online list above.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            for &c in cpus {
                libc::CPU_SET(c, &mut set);
            }
            set
        }
    });
    // SAFETY: getpid has no preconditions.
    let rig_pid = unsafe { libc::getpid() };
    // SAFETY: the closure only calls prctl/getppid/open/write/close/
    // sched_setaffinity, all async-signal-safe, on data prepared before fork.
    unsafe {
        cmd.pre_exec(move || {
            // A SIGKILLed rig cannot stop its target: the kernel does it.
            // (The death signal follows the forking thread; rig launches
            // from the thread that also stops the target.) If rig died
            // between fork and prctl the child was already reparented:
            // give up rather than run unowned.
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::getppid() != rig_pid {
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
            }
            // In the cgroup before exec: the target's first allocation is
            // already accounted and limited.
            for f in &procs_files {
                let fd = libc::open(f.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                if fd < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                let ok = libc::write(fd, b"0".as_ptr().cast(), 1) == 1;
                let err = std::io::Error::last_os_error();
                libc::close(fd);
                if !ok {
                    return Err(err);
                }
            }
            if let Some(set) = &cpuset {
                if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), set) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            // Cgroup and pinning are set (they need root): now drop.
            if let Some(ids) = run_as {
                let gid = ids.gid as libc::gid_t;
                if libc::setgroups(1, &gid) != 0
                    || libc::setgid(gid) != 0
                    || libc::setuid(ids.uid as libc::uid_t) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                // A credential change clears the death signal: set it again.
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if libc::getppid() != rig_pid {
                    return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
                }
            }
            Ok(())
        });
    }
    let started = Instant::now();
    let mut child = cmd.spawn().map_err(|source| {
        // Nothing runs: leave nothing behind (the cgroup goes with `cg`).
        let _ = std::fs::remove_dir_all(&run_dir);
        LaunchError::Spawn {
            name: spec.name.clone(),
            program: rc.program.clone(),
            args: rc.args.clone(),
            cwd: rc.cwd.clone(),
            spec: spec.path.clone(),
            source,
        }
    })?;
    let pid = child.id();
    let runs_as = super::user::ids_of(pid);
    if runs_as.is_some_and(|r| r.uid == 0) {
        warn_root_once(&spec.name);
    }
    live().push(LiveEntry {
        key,
        pgid: pid,
        cgroup_dirs: cg.as_ref().map(|c| c.handle().dirs).unwrap_or_default(),
    });
    let stdout = OutputTail::new();
    let stderr = OutputTail::new();
    let pattern = match &spec.ready {
        Ready::Stdout(p) => Some(p.clone()),
        _ => None,
    };
    drain(child.stdout.take().expect("piped"), stdout.clone(), pattern);
    drain(child.stderr.take().expect("piped"), stderr.clone(), None);
    // A signal between the check above and the registration: the signal
    // path's clean-up may have missed this target; stop it here.
    let late_signal = crate::interrupt::requested();

    // From here on an early return drops `l`, which kills and cleans up.
    let mut l = Launched {
        name: spec.name.clone(),
        pid,
        pgid: pid,
        id: ProcessId {
            pid,
            start_ticks: 0,
        },
        port,
        proof: PortProof {
            port,
            inodes: vec![],
            holders: vec![],
            via_descendant: false,
        },
        exe: ObjectFact {
            path: String::new(),
            size: 0,
            sha256: String::new(),
            build_id: None,
            deleted: false,
        },
        objects: Vec::new(),
        affinity: Vec::new(),
        notes,
        ready_after: Duration::ZERO,
        cgroup: cg,
        child: Some(child),
        stdout,
        stderr,
        key,
        run_dir,
        watchdog,
        runs_as,
        stopped: None,
    };
    if let Ok(id) = ProcessId::of(pid) {
        l.id = id;
    }
    if late_signal {
        l.shutdown(Duration::from_millis(200));
        return Err(interrupted());
    }

    let timeout = opts.ready_timeout.unwrap_or(spec.ready_timeout);
    let ready_desc = match &spec.ready {
        Ready::Tcp => format!("a TCP connect to port {port}"),
        Ready::Stdout(p) => format!("a stdout line containing {p:?}"),
        Ready::Http(p) => format!("GET {p} on port {port} to answer < 500"),
    };
    loop {
        let ready = match &spec.ready {
            Ready::Tcp => connect_any(port, Duration::from_millis(100)).is_some(),
            Ready::Stdout(_) => l.stdout.matched.load(Ordering::Acquire),
            Ready::Http(p) => http_ready(port, p),
        };
        if ready {
            break;
        }
        let exited = exited_nowait(pid);
        if exited || started.elapsed() >= timeout {
            let waited = started.elapsed();
            // A target that lost its bind to someone else: name the holder.
            let other = port::port_holders(port)
                .into_iter()
                .find(|(p, _)| *p != pid && !port::descendants(pid).contains(p));
            let info = l.shutdown(Duration::from_millis(200));
            if let Some((holder, _)) = other {
                return Err(LaunchError::PortHeldByOther {
                    port,
                    holder_pid: holder,
                    holder_cmdline: super::cmdline(holder),
                    target_pid: Some(pid),
                });
            }
            return Err(LaunchError::NotReady {
                name: spec.name.clone(),
                pid,
                waited,
                ready: ready_desc,
                exit: exited.then(|| {
                    let oom = info.cgroup.and_then(|c| c.oom_kills).unwrap_or(0);
                    if oom > 0 {
                        format!(
                            "{}; its cgroup recorded {oom} OOM kill(s): the memory limit ({} MiB) is below what it needs to start",
                            info.describe(),
                            opts.memory_limit_mib.unwrap_or(0)
                        )
                    } else {
                        info.describe()
                    }
                }),
                stderr_tail: info.stderr_tail,
            });
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    l.ready_after = started.elapsed();

    // Lesson 1: the listener must be ours, whatever answered the readiness
    // check. Give a stdout-ready target a moment to reach listen().
    let t0 = Instant::now();
    l.proof = loop {
        match port::check_holder(port, pid) {
            HolderCheck::Proven(p) => break p,
            HolderCheck::Other {
                pid: holder,
                cmdline,
            } => {
                return Err(LaunchError::PortHeldByOther {
                    port,
                    holder_pid: holder,
                    holder_cmdline: cmdline,
                    target_pid: Some(pid),
                })
            }
            HolderCheck::NoListener if t0.elapsed() < Duration::from_secs(1) => {
                std::thread::sleep(Duration::from_millis(10))
            }
            HolderCheck::NoListener => {
                return Err(LaunchError::NoListener {
                    name: spec.name.clone(),
                    pid,
                    port,
                })
            }
        }
    };

    l.affinity = affinity_of(pid).unwrap_or_default();
    if let Some(req) = &opts.server_cpus {
        let mut want = req.clone();
        want.sort_unstable();
        want.dedup();
        if l.affinity != want {
            return Err(LaunchError::Affinity {
                pid,
                requested: want,
                effective: l.affinity.clone(),
            });
        }
    }

    let (exe, objects) = mapped_objects(pid)?;
    l.exe = exe;
    l.objects = objects;
    Ok(l)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0-1\n"), Some(vec![0, 1]));
        assert_eq!(parse_cpu_list("0,2-4,7"), Some(vec![0, 2, 3, 4, 7]));
        assert_eq!(parse_cpu_list(""), Some(vec![]));
        assert_eq!(parse_cpu_list("x"), None);
    }

    #[test]
    fn status_lines() {
        assert_eq!(parse_status_line(b"HTTP/1.1 200 OK\r\n"), Some(200));
        assert_eq!(parse_status_line(b"HTTP/1.0 503 x"), Some(503));
        assert_eq!(parse_status_line(b"SSH-2.0-OpenSSH"), None);
        assert_eq!(parse_status_line(b"HTTP/1.1"), None);
    }

    #[test]
    fn tail_keeps_the_last_bytes() {
        let t = OutputTail::new();
        t.push(&vec![b'a'; TAIL_BYTES]);
        t.push(b"end");
        let s = t.text();
        assert_eq!(s.len(), TAIL_BYTES);
        assert!(s.ends_with("aend"));
        assert_eq!(t.total_bytes(), TAIL_BYTES as u64 + 3);
        t.push(&vec![b'b'; TAIL_BYTES + 10]);
        assert_eq!(t.text(), "b".repeat(TAIL_BYTES));
    }

    #[test]
    fn exit_descriptions() {
        assert_eq!(describe_exit(Some(1), None), "exited with code 1");
        assert_eq!(describe_exit(None, Some(9)), "killed by signal 9 (SIGKILL)");
    }
}
