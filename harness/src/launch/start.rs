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

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::cgroup::{self, Cgroup, CgroupError, Limits};
use super::child::ChildSetup;
use super::maps::MapsError;
use super::output::drain;
use super::port::{self, PortProof};
use super::spec::{PortPassing, Ready, ResolvedCommand, SpecError, TargetSpec};
use super::user::RunAs;
use super::ProcessId;

use super::facts::online_cpus;
pub use super::facts::{affinity_of, hash_file, mapped_objects, parse_cpu_list, ObjectFact};
use super::launched::become_subreaper;
pub use super::launched::Launched;
pub use super::output::{OutputTail, TAIL_BYTES};
pub use super::ready::parse_status_line;

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
    #[error("not starting target {name}: rig was interrupted (SIGINT, SIGTERM or SIGHUP)")]
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
        "target {name} (pid {pid}) {exit} after it started, and pid {holder_pid} ({holder_cmdline}), which it left running, holds the port: the target daemonized (forked into the background). rig measures the process it starts and stops it afterwards: run the server in the foreground (e.g. nginx `daemon off;`, a --foreground or --no-daemon flag)"
    )]
    Daemonized {
        name: String,
        pid: u32,
        exit: String,
        holder_pid: u32,
        holder_cmdline: String,
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

pub(super) fn describe_exit(code: Option<i32>, signal: Option<i32>) -> String {
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
        libc::SIGHUP => "SIGHUP",
        libc::SIGFPE => "SIGFPE",
        libc::SIGILL => "SIGILL",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGUSR2 => "SIGUSR2",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGSYS => "SIGSYS",
        _ => "?",
    }
}

// ---------------------------------------------------------------------------
// Registry of live targets, for clean-up from the CLI's signal path.

pub(super) struct LiveEntry {
    pub(super) key: u64,
    /// Leader pid = pgid; unreaped while registered.
    pgid: u32,
    cgroup_dirs: Vec<PathBuf>,
}

static LIVE: Mutex<Vec<LiveEntry>> = Mutex::new(Vec::new());
static NEXT_KEY: AtomicU64 = AtomicU64::new(0);

pub(super) fn live() -> std::sync::MutexGuard<'static, Vec<LiveEntry>> {
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
        crate::errln!(
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

/// Start the target described by `spec`, wait until it is ready, prove it
/// holds its port, and record what it maps.
///
/// A port rig picked (`port = "argv"` or `env`) can be taken by another
/// process between rig's probe bind and the target's own bind (two rigs,
/// or parallel tests, picking at once). The loser is never measured: the
/// launch is stopped and made again on a fresh port, up to
/// [`PORT_ATTEMPTS`] times. A fixed port is never retried: whoever holds it
/// is named.
#[allow(clippy::result_large_err)] // see mapped_objects
pub fn launch(spec: &TargetSpec, opts: &LaunchOptions) -> Result<Launched, LaunchError> {
    let mut attempt = 1;
    loop {
        match launch_once(spec, opts) {
            Err(LaunchError::PortHeldByOther {
                port,
                holder_pid,
                holder_cmdline,
                target_pid: Some(_),
            }) if !matches!(spec.port, PortPassing::Fixed(_)) && attempt < PORT_ATTEMPTS => {
                log::warn!(
                    "{}: port {port}, picked free, was taken by pid {holder_pid} ({holder_cmdline}) \
                     before the target bound it; launching again on another port",
                    spec.name
                );
                attempt += 1;
            }
            other => return other,
        }
    }
}

/// Launches of one target on picked ports before a lost port race is an
/// error (each attempt picks a fresh random port; three losses in a row
/// means something holds ports on purpose).
pub const PORT_ATTEMPTS: u32 = 3;

/// One launch on one port.
// Long by design: the order of the steps is the clean-up contract. Before
// `l` exists each failure removes what was made so far (run dir, cgroup);
// from `l` on, dropping it kills and removes everything. Split further,
// which side of that line a step is on would be hidden.
#[allow(clippy::result_large_err)] // see mapped_objects
fn launch_once(spec: &TargetSpec, opts: &LaunchOptions) -> Result<Launched, LaunchError> {
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
    let port = pick_port(spec)?;
    let key = NEXT_KEY.fetch_add(1, Ordering::Relaxed);
    remove_stale_run_dirs();
    let (run_dir, rc, run_as) = prepare_run_dir(spec, port, key)?;
    let (cg, watchdog, notes) = contain(spec, opts, &run_dir).inspect_err(|_| {
        let _ = std::fs::remove_dir_all(&run_dir);
    })?;
    let setup = ChildSetup {
        cgroup_procs: cg
            .as_ref()
            .map(|c| c.handle().procs_files())
            .unwrap_or_default(),
        cpus: opts.server_cpus.clone(),
        run_as,
    };
    let started = Instant::now();
    let mut child = super::child::spawn(&rc, &setup).map_err(|source| {
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
    finish(&mut l, spec, opts, started)?;
    Ok(l)
}

/// A target's cgroup, its watchdog, and notes on what is not contained.
type Containment = (
    Option<Cgroup>,
    Option<super::watchdog::Watchdog>,
    Vec<String>,
);

/// The target's cgroup (with its memory and CPU limits), the watchdog that
/// removes it and the run directory should rig be SIGKILLed, and notes on
/// what is not contained.
#[allow(clippy::result_large_err)] // see mapped_objects
fn contain(
    spec: &TargetSpec,
    opts: &LaunchOptions,
    run_dir: &std::path::Path,
) -> Result<Containment, LaunchError> {
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
    )?;
    let watchdog = super::watchdog::Watchdog::start(
        run_dir,
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
    Ok((cg, watchdog, notes))
}

/// After the spawn: ready, the port proven to be the target's, pinned as
/// asked, and what it maps recorded.
#[allow(clippy::result_large_err)] // see mapped_objects
fn finish(
    l: &mut Launched,
    spec: &TargetSpec,
    opts: &LaunchOptions,
    started: Instant,
) -> Result<(), LaunchError> {
    super::ready::wait_ready(l, spec, opts, started)?;
    l.ready_after = started.elapsed();
    l.proof = super::ready::prove_port(l, spec)?;
    l.affinity = affinity_of(l.pid).unwrap_or_default();
    if let Some(req) = &opts.server_cpus {
        let mut want = req.clone();
        want.sort_unstable();
        want.dedup();
        if l.affinity != want {
            return Err(LaunchError::Affinity {
                pid: l.pid,
                requested: want,
                effective: l.affinity.clone(),
            });
        }
    }
    let (exe, objects) = mapped_objects(l.pid)?;
    l.exe = exe;
    l.objects = objects;
    Ok(())
}

/// The port the target will listen on: its fixed one (refused when someone
/// already listens there: the target would lose the bind, or share it via
/// SO_REUSEPORT, and the load would reach them), else a free one.
#[allow(clippy::result_large_err)] // see mapped_objects
fn pick_port(spec: &TargetSpec) -> Result<u16, LaunchError> {
    match &spec.port {
        PortPassing::Fixed(p) => {
            if let Some(&(holder, _)) = port::port_holders(*p).first() {
                return Err(LaunchError::PortHeldByOther {
                    port: *p,
                    holder_pid: holder,
                    holder_cmdline: super::cmdline(holder),
                    target_pid: None,
                });
            }
            Ok(*p)
        }
        PortPassing::Argv | PortPassing::Env(_) => {
            port::free_port().map_err(|source| LaunchError::FreePort {
                name: spec.name.clone(),
                source,
            })
        }
    }
}

/// The launch's private run directory with the spec's files rendered into
/// it, the command line, and the account the target drops to (which then
/// owns the directory, to read its config and write a pid file there).
/// On error nothing is left behind.
#[allow(clippy::result_large_err)] // see mapped_objects
fn prepare_run_dir(
    spec: &TargetSpec,
    port: u16,
    key: u64,
) -> Result<(PathBuf, ResolvedCommand, Option<RunAs>), LaunchError> {
    // A fresh private directory (mkdtemp, 0700): a name another user can
    // predict and create first would let them plant links or edit configs.
    let prefix = format!("rig-launch-{}-{key}-", std::process::id());
    let run_dir = crate::fsutil::private_dir(&prefix).map_err(|e| SpecError::Placeholder {
        path: spec.path.clone(),
        placeholder: "run_dir".into(),
        why: format!(
            "creating {}*: {e}",
            std::env::temp_dir().join(&prefix).display()
        ),
    })?;
    let rendered = spec.render_files(port, &run_dir);
    let rc = match rendered.and_then(|()| spec.command(port, Some(&run_dir))) {
        Ok(rc) => rc,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&run_dir);
            return Err(e.into());
        }
    };
    let run_as = spec
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
        });
    match run_as {
        Ok(ids) => Ok((run_dir, rc, ids)),
        Err(why) => {
            let _ = std::fs::remove_dir_all(&run_dir);
            Err(LaunchError::User {
                name: spec.name.clone(),
                why,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_descriptions() {
        assert_eq!(describe_exit(Some(1), None), "exited with code 1");
        assert_eq!(describe_exit(None, Some(9)), "killed by signal 9 (SIGKILL)");
    }
}
