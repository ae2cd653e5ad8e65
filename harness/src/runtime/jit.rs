//! Code a JIT compiler wrote into anonymous executable memory (node's V8,
//! the JVM, LuaJIT, .NET): named by the runtime's perf map where it writes
//! one; no unwind rows, so a stack that reaches it ends there, marked.

use super::{Module, ModuleKind, Runtime};
use crate::process::maps::Mapping;

/// Whether a mapping is code a JIT wrote: anonymous executable memory
/// (there is no file to read).
pub fn is_jit_code(m: &Mapping) -> bool {
    m.is_exec() && m.path.is_none()
}

pub struct Jit;

impl Runtime for Jit {
    fn name(&self) -> &'static str {
        "jit"
    }

    fn holds(&self, m: &Module<'_>) -> bool {
        m.kind == ModuleKind::Jit
    }

    /// It has no unwind tables: a stack that reaches it ends there.
    fn no_row_reason(&self) -> Option<&'static str> {
        Some("JIT code")
    }
}

/// The names a JIT runtime gives its code in `/tmp/perf-PID.map` (written
/// by `node --perf-basic-prof`, the JVM's perf-map agents, LuaJIT,
/// .NET with `DOTNET_PerfMapEnabled=1`...): one `START SIZE NAME` line per
/// function, addresses in hex (with or without `0x`).
#[derive(Debug, Default)]
pub struct PerfMap {
    /// (start, size, name), sorted by start.
    entries: Vec<(u64, u64, String)>,
}

impl PerfMap {
    pub fn parse(text: &str) -> PerfMap {
        let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok();
        let mut entries: Vec<(u64, u64, String)> = text
            .lines()
            .filter_map(|l| {
                let mut it = l.splitn(3, ' ');
                let start = hex(it.next()?)?;
                let size = hex(it.next()?)?;
                let name = it.next()?.trim();
                (size > 0 && !name.is_empty()).then(|| (start, size, name.to_string()))
            })
            .collect();
        // A later line for the same start is newer code there (a JIT that
        // reuses memory writes it again): the last one wins.
        entries.reverse();
        entries.sort_by_key(|e| e.0);
        entries.dedup_by_key(|e| e.0);
        PerfMap { entries }
    }

    /// The map of process `pid`, read in its own mount namespace (a
    /// container's /tmp) under the pid it knows itself by; `None` when it
    /// writes none.
    pub fn of_process(pid: u32) -> Option<PerfMap> {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let ns_pid = status
            .lines()
            .find_map(|l| l.strip_prefix("NSpid:"))
            .and_then(|l| l.split_whitespace().last())
            .and_then(|p| p.parse::<u32>().ok())
            .unwrap_or(pid);
        let text =
            std::fs::read_to_string(format!("/proc/{pid}/root/tmp/perf-{ns_pid}.map")).ok()?;
        Some(PerfMap::parse(&text))
    }

    /// The function holding `addr`, and `addr`'s offset in it: only inside
    /// a function's stated size, never the nearest one before.
    pub fn lookup(&self, addr: u64) -> Option<(&str, u64)> {
        let i = self.entries.partition_point(|e| e.0 <= addr);
        let (start, size, name) = self.entries.get(i.checked_sub(1)?)?;
        (addr < start + size).then(|| (name.as_str(), addr - start))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_perf_map_names_only_inside_each_functions_size_and_the_newest_wins() {
        let m = PerfMap::parse(
            "7f0000001000 20 LazyCompile:*handler /srv/app.js:3\n\
             0x7f0000002000 0x10 old\n\
             7f0000002000 8 new\n\
             garbage line\n",
        );
        assert_eq!(
            m.lookup(0x7f00_0000_1000),
            Some(("LazyCompile:*handler /srv/app.js:3", 0))
        );
        assert_eq!(
            m.lookup(0x7f00_0000_101f),
            Some(("LazyCompile:*handler /srv/app.js:3", 0x1f))
        );
        assert_eq!(m.lookup(0x7f00_0000_1020), None, "past its size");
        assert_eq!(m.lookup(0x7f00_0000_0fff), None);
        assert_eq!(m.lookup(0x7f00_0000_2004), Some(("new", 4)));
        assert_eq!(m.lookup(0x7f00_0000_2009), None, "the newest size holds");
    }
}
