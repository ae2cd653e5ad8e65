//! A target rig started, while it runs, and how it is stopped: SIGTERM to
//! its group, grace, SIGKILL, reap, cgroup emptied and removed, then a
//! check that nothing is left.

use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{Child, ExitStatus};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::cgroup::{Cgroup, CgroupHandle};
use super::port::{self, PortProof};
use super::start::*;
use super::ProcessId;

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
    pub(super) cgroup: Option<Cgroup>,
    pub(super) child: Option<Child>,
    pub(super) stdout: Arc<OutputTail>,
    pub(super) stderr: Arc<OutputTail>,
    pub(super) key: u64,
    /// The launch's `{run_dir}` (rendered config files), removed at stop.
    pub(super) run_dir: PathBuf,
    /// Cleans up the cgroups and run dir if rig is SIGKILLed.
    pub(super) watchdog: Option<super::watchdog::Watchdog>,
    /// The target's real uid and gid right after exec.
    pub runs_as: Option<super::user::RunAs>,
    pub(super) stopped: Option<ExitInfo>,
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

    /// The launch's `{run_dir}`: files here go when the target stops.
    pub fn run_dir(&self) -> &std::path::Path {
        &self.run_dir
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

    /// How the leader exited, if it has (without reaping it): "exited
    /// with code 3", "killed by signal 6 (SIGABRT), core dumped".
    pub fn exit_status(&self) -> Option<String> {
        // SAFETY: zeroed siginfo_t is a valid out-parameter for waitid.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: a valid out-pointer; WNOWAIT leaves the child unreaped.
        let r = unsafe {
            libc::waitid(
                libc::P_PID,
                self.pid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
            )
        };
        // SAFETY: waitid filled `info` (si_pid 0: it has not exited).
        if r < 0 || unsafe { info.si_pid() } == 0 {
            return None;
        }
        // SAFETY: as above; si_status is valid for the CLD_* codes.
        let status = unsafe { info.si_status() };
        Some(match info.si_code {
            libc::CLD_EXITED => describe_exit(Some(status), None),
            libc::CLD_DUMPED => format!("{}, core dumped", describe_exit(None, Some(status))),
            _ => describe_exit(None, Some(status)),
        })
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

    /// Everything that may become an orphan once the leader dies (its
    /// descendants, its group, its cgroup), and who they are (pid and start
    /// time): a pid freed during the grace period and reused by another
    /// process is never signalled.
    fn tree(&self) -> (Vec<u32>, Vec<ProcessId>) {
        let mut family: Vec<u32> = port::descendants(self.pid);
        family.extend(group_members(self.pgid));
        if let Some(cg) = &self.cgroup {
            family.extend(cg.handle().procs());
        }
        family.retain(|&p| p != self.pid);
        family.sort_unstable();
        family.dedup();
        let members = family
            .iter()
            .filter_map(|&p| ProcessId::of(p).ok())
            .collect();
        (family, members)
    }

    /// SIGTERM to the group, `grace` to exit, then SIGKILL (and up to 5 s
    /// for it to take). True when SIGKILL was needed.
    fn terminate_group(&self, grace: Duration) -> bool {
        let pgid = self.pgid as i32;
        let gone = || exited_nowait(self.pid) && group_members(self.pgid).is_empty();
        // SAFETY (both killpg): the group leader is our unreaped child, so
        // the pgid still names the group rig created.
        unsafe { libc::killpg(pgid, libc::SIGTERM) };
        let t0 = Instant::now();
        while t0.elapsed() < grace && !gone() {
            std::thread::sleep(Duration::from_millis(5));
        }
        if gone() {
            return false;
        }
        unsafe { libc::killpg(pgid, libc::SIGKILL) };
        let t1 = Instant::now();
        while t1.elapsed() < Duration::from_secs(5) && !gone() {
            std::thread::sleep(Duration::from_millis(5));
        }
        true
    }

    pub(super) fn shutdown(&mut self, grace: Duration) -> ExitInfo {
        if let Some(info) = &self.stopped {
            return info.clone();
        }
        let exited_on_its_own = exited_nowait(self.pid);
        let (family, members) = self.tree();
        let still_running = |id: &ProcessId| ProcessId::of(id.pid).is_ok_and(|now| now == *id);
        let killed_after_grace = self.terminate_group(grace);
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
pub(super) fn become_subreaper() {
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
pub(super) fn exited_nowait(pid: u32) -> bool {
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
