//! How much of a window the per-process uprobe families saw when
//! processes forked into the tree during it ran before their uprobes went
//! in: measured from what the kernel saw of them meanwhile (their syscalls,
//! their CPU time), said in the losses and as `uprobe_coverage`.

use serde::Serialize;

use crate::probe::{Family, Window};

/// How much of a window the per-process uprobe families (alloc, copy,
/// locks) saw, when processes forked during it ran before their uprobes
/// were in (`probe::BeforeUprobes`).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct UprobeCoverage {
    /// Processes forked into the tree during the window.
    pub processes: usize,
    /// The longest of their gaps from fork to uprobes, when known.
    pub longest_gap_ms: Option<f64>,
    /// CPU time they ran in those gaps.
    pub unseen_cpu_ms: f64,
    /// Syscalls they made in those gaps (the syscalls family sees them
    /// all), out of the tree's in the window; a process whose uprobes never
    /// went in counts whole. `None` without the syscalls family.
    pub unseen_syscalls: Option<u64>,
    pub window_syscalls: Option<u64>,
    /// 1 − unseen / window syscalls: the share of the tree's work, measured
    /// by its syscalls, that the uprobe families' counts cover. Per-request
    /// values of alloc, copy and locks are this share of the truth when a
    /// request's syscalls and its allocations come together.
    pub covered_by_syscalls: Option<f64>,
}

/// What the uprobe families missed of the processes forked during the
/// window (`UprobeCoverage`); `None` when none was, or none of those
/// families ran.
pub(super) fn uprobe_coverage(w: &Window) -> Option<UprobeCoverage> {
    use crate::probe::Joined;
    // The user family's probes on a file for every process running it
    // count a forked process from its first instruction: nothing missed.
    let user_whole = !w.user_sites.is_empty() && w.user_sites.iter().all(|s| s.everywhere);
    let uprobes = w
        .families
        .iter()
        .any(|f| f.uses_uprobes() && !(*f == Family::User && user_whole));
    let late: Vec<&crate::probe::Followed> = w
        .processes
        .iter()
        .filter(|p| w.joined_during.contains(&p.pid))
        .collect();
    if !uprobes || late.is_empty() {
        return None;
    }
    let counted = w.families.contains(&Family::Syscalls);
    let syscalls_of = |pid: u32| -> u64 {
        w.delta
            .syscalls
            .iter()
            .filter(|(k, _)| k.tgid == pid)
            .map(|(_, v)| v.count)
            .sum()
    };
    let (mut gap, mut cpu, mut unseen) = (None::<f64>, 0.0, 0u64);
    for p in &late {
        match (&p.joined, &p.error) {
            (
                Joined::Forked {
                    uprobe_gap_ms,
                    before_uprobes: Some(b),
                },
                None,
            ) => {
                if let Some(g) = uprobe_gap_ms {
                    gap = Some(gap.map_or(*g, |x| x.max(*g)));
                }
                cpu += b.cpu_ms;
                unseen += b.syscalls.unwrap_or(0);
            }
            // Its uprobes never went in: all it did is unseen.
            _ => unseen += syscalls_of(p.pid),
        }
    }
    let total: u64 = w.delta.syscalls.values().map(|v| v.count).sum();
    Some(UprobeCoverage {
        processes: late.len(),
        longest_gap_ms: gap,
        unseen_cpu_ms: cpu,
        unseen_syscalls: counted.then_some(unseen),
        window_syscalls: counted.then_some(total),
        covered_by_syscalls: (counted && total > 0)
            .then(|| 1.0 - unseen.min(total) as f64 / total as f64),
    })
}

/// The loss line of a window whose forked processes ran before their
/// uprobes: how long, how much, and the share the counts cover.
pub fn coverage_text(c: &UprobeCoverage) -> String {
    let gap = c.longest_gap_ms.map_or("an unknown time".to_string(), |g| {
        format!("up to {g:.1} ms")
    });
    let share = match (c.covered_by_syscalls, c.unseen_syscalls, c.window_syscalls) {
        (Some(s), Some(u), Some(t)) => format!(
            "; before then they made {u} of the tree's {t} syscalls in the window: alloc, copy \
             and locks cover {:.1}% of it (by syscalls)",
            100.0 * s
        ),
        _ => "; without the syscalls family how much of the window that is is not measured \
              (add syscalls to --probes)"
            .to_string(),
    };
    format!(
        "{} process(es) forked during the window ran {gap} after their fork without \
         uprobes ({:.1} ms of CPU){share}",
        c.processes, c.unseen_cpu_ms
    )
}
