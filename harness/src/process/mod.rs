//! Processes by pid, read from /proc: identity that survives pid reuse,
//! command lines, the process tree, and memory maps.
//!
//! A leaf: every stage that names a process (launch, sample, probe,
//! symbolize) uses these, and they use nothing of rig's.

pub mod maps;
pub mod vdso;

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

/// The process a thread id belongs to (`Tgid:` of `/proc/<tid>/status`):
/// `/proc/<tid>` exists for every thread, so a thread's id reads as a
/// process unless this is asked. `Some(tid)` for a process's own id.
pub fn tgid_of(tid: u32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{tid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Tgid:"))?
        .trim()
        .parse()
        .ok()
}

/// CPU time every thread of `pid` has run, in ns (the first field of
/// `/proc/<pid>/task/*/schedstat`); 0 for a process gone.
pub fn cpu_ns(pid: u32) -> u64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    tasks
        .filter_map(Result::ok)
        // A thread may exit between the listing and the read.
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
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
/// field of `/proc/*/stat`. Not including `pid` itself, and never rig's own
/// process or anything below it: when `pid` is an ancestor of rig (the shell
/// that started it), rig's syscalls, allocations and the load it drives are
/// not the target's work, so every tree rig measures stops at rig.
pub fn descendants(pid: u32) -> Vec<u32> {
    descendants_outside(pid, &parent_table(), std::process::id())
}

/// Every `(pid, ppid)` in /proc now.
fn parent_table() -> Vec<(u32, u32)> {
    all_pids()
        .into_iter()
        .filter_map(|p| {
            let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).ok()?;
            Some((p, parse_stat_ppid(&stat)?))
        })
        .collect()
}

/// rig's own process and its descendants, when they are inside `root`'s
/// tree (`root` is rig's parent, grandparent, ...): what [`descendants`]
/// leaves out of it. Empty otherwise.
pub fn rig_within(root: u32) -> Vec<u32> {
    let me = std::process::id();
    let parents = parent_table();
    if me == root || !descendants_in(root, &parents).contains(&me) {
        return Vec::new();
    }
    let mut out = vec![me];
    out.extend(descendants_in(me, &parents));
    out
}

/// Descendants of `root` in a `(pid, ppid)` table.
pub fn descendants_in(root: u32, parents: &[(u32, u32)]) -> Vec<u32> {
    descendants_outside(root, parents, root)
}

/// Descendants of `root` in a `(pid, ppid)` table, leaving out `cut` and
/// everything below it (`cut == root` cuts nothing).
pub fn descendants_outside(root: u32, parents: &[(u32, u32)], cut: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let mut frontier = vec![root];
    while let Some(p) = frontier.pop() {
        for &(child, parent) in parents {
            if parent == p && child != root && child != cut && !out.contains(&child) {
                out.push(child);
                frontier.push(child);
            }
        }
    }
    out.sort_unstable();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tree_stops_at_the_cut_process_and_everything_below_it() {
        // 1 → 2 → {3 → 5, 4}; 4 is rig, 5's sibling 6 is under 4.
        let t = [(2, 1), (3, 2), (4, 2), (5, 3), (6, 4), (7, 6)];
        assert_eq!(descendants_outside(1, &t, 4), vec![2, 3, 5]);
        assert_eq!(descendants_outside(1, &t, 1), vec![2, 3, 4, 5, 6, 7]);
        // A tree below the cut is whole when asked from inside it.
        assert_eq!(descendants_outside(4, &t, 1), vec![6, 7]);
    }

    #[test]
    fn rig_is_never_its_own_ancestors_descendant() {
        let parent = std::os::unix::process::parent_id();
        assert!(!descendants(parent).contains(&std::process::id()));
        assert!(rig_within(parent).starts_with(&[std::process::id()]));
        assert!(rig_within(std::process::id()).is_empty());
    }
}
