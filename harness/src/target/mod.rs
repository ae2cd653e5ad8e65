//! The process under test: its spec, launch, pid validation and memory map.
//!
//! In: a target spec (`spec`, TOML) or a pid. Out: a `launch::Launched`
//! target (own process group, pinned, in its own cgroup, ready, port holder
//! proven, mapped objects hashed) and `ProcMaps` (what is mapped where, with
//! build-ids), used by the probe stage to find libraries and by the
//! symbolizer to turn absolute addresses into module offsets.

pub mod cgroup;
pub mod launch;
pub mod maps;
pub mod port;
pub mod spec;
pub mod user;
pub mod watchdog;

pub use cgroup::{reap_stale_cgroups, CgroupHandle};
pub use launch::{cleanup_all, launch, ExitInfo, LaunchError, LaunchOptions, Launched};
pub use port::{descendants, port_holders};
pub use spec::{check_config, ConfigError, SpecError, TargetSpec};

use std::fmt;

/// A process identity that survives pid reuse: pid plus its start time in
/// clock ticks since boot (field 22 of /proc/<pid>/stat).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcessId {
    pub pid: u32,
    pub start_ticks: u64,
}

impl ProcessId {
    pub fn of(pid: u32) -> std::io::Result<ProcessId> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
        // comm may contain spaces and parentheses: fields follow the last ')'.
        let rest = stat
            .rsplit_once(')')
            .map(|(_, r)| r)
            .ok_or_else(|| std::io::Error::other("malformed stat"))?;
        let start_ticks = rest
            .split_whitespace()
            .nth(19)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| std::io::Error::other("malformed stat"))?;
        // A zombie has exited: its counters are final and it runs no code.
        if rest.split_whitespace().next() == Some("Z") {
            return Err(std::io::Error::other("zombie"));
        }
        Ok(ProcessId { pid, start_ticks })
    }
}

impl fmt::Display for ProcessId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.pid)
    }
}

/// The command line of a process, for reports (`?` when unreadable).
pub fn cmdline(pid: u32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            b.split(|&c| c == 0)
                .filter(|s| !s.is_empty())
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_else(|_| "?".into())
}
