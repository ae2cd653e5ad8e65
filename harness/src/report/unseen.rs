//! The runs of code a family does not count, measured where rig could
//! count them without attributing them (CPython's inlined pymalloc): said
//! after the runtime's own line, with the share of the family it missed.

use super::AllocTotals;
use crate::probe::window::Window;
use crate::probe::Family;

/// The counts of family `f`'s uncounted code, for the JSON.
pub(super) fn of_family(w: &Window, f: Family) -> Vec<crate::probe::attach::UnseenCount> {
    w.unseen.iter().filter(|c| c.family == f).cloned().collect()
}

/// What the window measured of family `f`'s uncounted code in `module`:
/// how often it ran (per request when `requests` is known) and, for the
/// alloc family, the share of allocations and frees the family saw
/// against `counted`. `None`: nothing was asked of that module.
pub(super) fn measured(
    w: &Window,
    f: Family,
    module: &str,
    counted: &AllocTotals,
    requests: Option<u64>,
) -> Option<String> {
    let of: Vec<_> = (w.unseen.iter())
        .filter(|c| c.family == f && c.module == module)
        .collect();
    if of.is_empty() {
        return None;
    }
    if let Some(why) = of.iter().find_map(|c| c.why_not.as_deref()) {
        return Some(format!("how often they ran is not measured: {why}"));
    }
    let amount = |n: u64| match requests {
        Some(r) if r > 0 => format!("{:.2}", n as f64 / r as f64),
        _ => n.to_string(),
    };
    let per = if requests.is_some_and(|r| r > 0) {
        " per request"
    } else {
        " in the window"
    };
    let runs: Vec<String> = (of.iter())
        .map(|c| format!("{} {}", amount(c.count.unwrap_or(0)), c.label))
        .collect();
    let probed: Vec<String> = of
        .iter()
        .map(|c| format!("{} of {}", c.sites, c.paths))
        .collect();
    let mut line = format!(
        "measured in this window (one uprobe_multi link on the branch after each \
         path's test, at {} of the paths; no sizes, no stacks): {}{per} ran there, \
         uncounted",
        probed.join(" and "),
        runs.join(" and "),
    );
    let seen = |label: &str| match (f, label) {
        (Family::Alloc, "allocations") => Some(counted.allocations),
        (Family::Alloc, "frees") => Some(counted.frees),
        _ => None,
    };
    let shares: Vec<(String, String)> = (of.iter())
        .filter_map(|c| {
            let seen = seen(&c.label)?;
            let share = 100.0 * seen as f64 / (seen + c.count?).max(1) as f64;
            Some((amount(seen), format!("{share:.0}% of the {}", c.label)))
        })
        .collect();
    if !shares.is_empty() {
        let (counts, percents): (Vec<String>, Vec<String>) = shares.into_iter().unzip();
        line.push_str(&format!(
            ", beside the {} the family counted: it saw about {}",
            counts.join(" and "),
            percents.join(" and ")
        ));
    }
    Some(line)
}
