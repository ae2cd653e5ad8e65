//! The fork-exec of a target. Everything the child does between fork and
//! exec is prepared before the fork: only async-signal-safe calls run there.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use super::spec::ResolvedCommand;
use super::user::RunAs;

/// What the child sets up for itself before exec, in this order: the death
/// signal, its cgroup, its CPUs, then the drop to `run_as`.
pub(super) struct ChildSetup {
    /// `cgroup.procs` files to write "0" to (the child's own pid).
    pub cgroup_procs: Vec<PathBuf>,
    /// CPUs to pin to (validated against the online list by the caller).
    pub cpus: Option<Vec<usize>>,
    pub run_as: Option<RunAs>,
}

/// Make the child `cmd` spawns die with this rig: the kernel SIGKILLs it
/// when rig's launching thread ends, a SIGKILL of rig included. For
/// children rig starts outside a launch (`rig demo`'s server).
pub fn die_with_rig(cmd: &mut Command) {
    // SAFETY: getpid has no preconditions.
    let rig_pid = unsafe { libc::getpid() };
    // SAFETY: the closure only calls prctl and getppid (async-signal-safe).
    unsafe {
        cmd.pre_exec(move || death_signal(rig_pid));
    }
}

/// In the child, between fork and exec: SIGKILL when the parent dies, and
/// give up with ESRCH if rig died before the prctl (the child was already
/// reparented and would run unowned). Async-signal-safe.
fn death_signal(rig_pid: libc::pid_t) -> std::io::Result<()> {
    // SAFETY: prctl and getppid have no memory preconditions.
    unsafe {
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        if libc::getppid() != rig_pid {
            return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
        }
    }
    Ok(())
}

/// Spawn `rc` as the leader of a new process group with piped stdout and
/// stderr and a null stdin.
// Long by design: the pre-exec closure is one unit that may only make
// async-signal-safe calls on data prepared before the fork; its steps are
// ordered (death signal, cgroup, CPUs, then the drop of privileges, then the
// death signal again) and read best in one place.
pub(super) fn spawn(rc: &ResolvedCommand, setup: &ChildSetup) -> std::io::Result<Child> {
    let run_as = setup.run_as;
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
    let procs_files: Vec<CString> = setup
        .cgroup_procs
        .iter()
        .map(|p| CString::new(p.as_os_str().as_bytes()).expect("no NUL in cgroup path"))
        .collect();
    let cpuset: Option<libc::cpu_set_t> = setup.cpus.as_ref().map(|cpus| {
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
            // from the thread that also stops the target.)
            death_signal(rig_pid)?;
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
                death_signal(rig_pid)?;
            }
            Ok(())
        });
    }
    cmd.spawn()
}
