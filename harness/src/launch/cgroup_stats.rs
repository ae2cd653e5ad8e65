//! Readings of a target's cgroup (memory, OOM, CPU throttling), for the
//! sampler while it runs and for the launcher when it stops.

use std::path::Path;

use serde::Serialize;

use super::cgroup::{CgroupHandle, CgroupVersion};

/// One reading of a target's cgroup. Fields the kernel does not offer for
/// the cgroup's version are `None`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct CgroupSnapshot {
    pub mem_current_bytes: Option<u64>,
    /// v2 memory.peak / v1 memory.max_usage_in_bytes.
    pub mem_peak_bytes: Option<u64>,
    /// None when unlimited.
    pub mem_limit_bytes: Option<u64>,
    /// v2 memory.events `oom` (times the limit could not be kept).
    pub oom_events: Option<u64>,
    /// v2 memory.events `oom_kill` / v1 memory.oom_control `oom_kill`.
    pub oom_kills: Option<u64>,
    /// v1 max(memory.failcnt, memory.memsw.failcnt) / v2 memory.events
    /// `max`: times a charge hit the limit. (On kernel 6.18 the v1 counters
    /// stayed 0 through an OOM kill; trust `oom_kills` and the peak.)
    pub limit_hits: Option<u64>,
    pub cpu_periods: Option<u64>,
    pub cpu_throttled: Option<u64>,
    pub cpu_throttled_ns: Option<u64>,
}

/// `key value` lines (memory.events, memory.oom_control, cpu.stat).
pub fn parse_kv(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

fn read_u64(p: &Path) -> Option<u64> {
    read(p).ok()?.trim().parse().ok()
}

impl CgroupSnapshot {
    pub fn read(h: &CgroupHandle) -> std::io::Result<CgroupSnapshot> {
        let mut s = CgroupSnapshot::default();
        if let Some(d) = &h.memory_dir {
            if !d.exists() {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    format!("cgroup {} is gone", d.display()),
                ));
            }
            match h.version {
                CgroupVersion::V2 => {
                    s.mem_current_bytes = read_u64(&d.join("memory.current"));
                    s.mem_peak_bytes = read_u64(&d.join("memory.peak"));
                    s.mem_limit_bytes = read_u64(&d.join("memory.max")); // "max" → None
                    if let Ok(ev) = read(d.join("memory.events")) {
                        s.oom_events = parse_kv(&ev, "oom");
                        s.oom_kills = parse_kv(&ev, "oom_kill");
                        s.limit_hits = parse_kv(&ev, "max");
                    }
                }
                CgroupVersion::V1 => {
                    s.mem_current_bytes = read_u64(&d.join("memory.usage_in_bytes"));
                    s.mem_peak_bytes = read_u64(&d.join("memory.max_usage_in_bytes"));
                    // v1 prints a huge page-aligned number for "unlimited".
                    s.mem_limit_bytes =
                        read_u64(&d.join("memory.limit_in_bytes")).filter(|&l| l < 1 << 60);
                    if let Ok(oc) = read(d.join("memory.oom_control")) {
                        s.oom_kills = parse_kv(&oc, "oom_kill");
                    }
                    // With memsw limited to the same value, the memsw
                    // counter is charged (and fails) first.
                    let hits = [&d.join("memory.failcnt"), &d.join("memory.memsw.failcnt")]
                        .into_iter()
                        .filter_map(|p| read_u64(p))
                        .max();
                    s.limit_hits = hits;
                }
            }
        }
        if let Some(d) = &h.cpu_dir {
            if let Ok(st) = read(d.join("cpu.stat")) {
                s.cpu_periods = parse_kv(&st, "nr_periods");
                s.cpu_throttled = parse_kv(&st, "nr_throttled");
                s.cpu_throttled_ns = match h.version {
                    CgroupVersion::V1 => parse_kv(&st, "throttled_time"),
                    CgroupVersion::V2 => parse_kv(&st, "throttled_usec").map(|u| u * 1000),
                };
            }
        }
        Ok(s)
    }
}

fn read(path: impl AsRef<Path>) -> std::io::Result<String> {
    std::fs::read_to_string(path)
}
