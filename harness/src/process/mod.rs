//! Processes by pid, read from /proc: identity that survives pid reuse,
//! command lines, the process tree, and memory maps.
//!
//! A leaf: every stage that names a process (launch, sample, probe,
//! symbolize) uses these, and they use nothing of rig's.

pub mod maps;

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

/// What a process's program is: replaced by an `execve`, which keeps the
/// pid (and its start time) but gives the process a new program, a new
/// stack and a new auxiliary vector (`AT_RANDOM`, `AT_EXECFN` point into
/// the new stack), so an exec of the same file is seen too.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Image {
    /// `/proc/<pid>/exe`'s path.
    pub exe: String,
    /// Its device and inode.
    exe_id: Option<(u64, u64)>,
    auxv: Vec<u8>,
}

impl Image {
    /// The program process `pid` runs now (`None` when it is gone or
    /// unreadable).
    pub fn of(pid: u32) -> Option<Image> {
        use std::os::unix::fs::MetadataExt;
        let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok()?;
        let exe_id = std::fs::metadata(format!("/proc/{pid}/exe"))
            .ok()
            .map(|m| (m.dev(), m.ino()));
        let auxv = std::fs::read(format!("/proc/{pid}/auxv")).ok()?;
        Some(Image {
            exe: exe.display().to_string(),
            exe_id,
            auxv,
        })
    }
}

/// Process `pid` is stopped (state `T`: SIGSTOP, SIGTSTP; or `t`: held by
/// a tracer): it runs nothing until it is continued.
pub fn is_stopped(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit_once(')')
            .and_then(|(_, r)| r.split_whitespace().next())
            .is_some_and(|st| st == "T" || st == "t")
    })
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

/// All pids in /proc.
pub fn all_pids() -> Vec<u32> {
    std::fs::read_dir("/proc")
        .map(|d| {
            d.filter_map(Result::ok)
                .filter_map(|e| e.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Parent pid from the text of `/proc/<pid>/stat` (comm may hold spaces and
/// parentheses, so fields are counted after the last ')').
pub fn parse_stat_ppid(stat: &str) -> Option<u32> {
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// Every descendant of `pid` (children, grandchildren, ...), from the ppid
/// field of `/proc/*/stat`. Not including `pid` itself.
pub fn descendants(pid: u32) -> Vec<u32> {
    let parents: Vec<(u32, u32)> = all_pids()
        .into_iter()
        .filter_map(|p| {
            let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).ok()?;
            Some((p, parse_stat_ppid(&stat)?))
        })
        .collect();
    descendants_in(pid, &parents)
}

/// Descendants of `root` in a `(pid, ppid)` table.
pub fn descendants_in(root: u32, parents: &[(u32, u32)]) -> Vec<u32> {
    let mut out = Vec::new();
    let mut frontier = vec![root];
    while let Some(p) = frontier.pop() {
        for &(child, parent) in parents {
            if parent == p && child != root && !out.contains(&child) {
                out.push(child);
                frontier.push(child);
            }
        }
    }
    out.sort_unstable();
    out
}
