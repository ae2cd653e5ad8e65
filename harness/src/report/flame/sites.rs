//! The top user sites of each family: the first frame outside allocators
//! and standard-library wrappers (`report::stacks`), with what it costs per
//! request. What `rig run` prints under its table.

use std::collections::BTreeMap;

use super::input::Recorded;
use super::{measures, row_values, Measure};
use crate::probe::Family;
use crate::stats::per_request;

/// One user site and its value of a measure.
#[derive(Clone, Debug, PartialEq)]
pub struct SiteCost {
    /// `calib_alloc_small (calib_server.c:120)`.
    pub site: String,
    /// Per request in a fixed-count window, else the window's total.
    pub value: f64,
}

/// A family's main measure and its top sites.
#[derive(Clone, Debug, PartialEq)]
pub struct FamilySites {
    pub family: Family,
    pub measure: Measure,
    pub per_request: bool,
    pub sites: Vec<SiteCost>,
}

/// `function (file:line)` of a site: call sites on one line are one.
fn site_name(s: &crate::symbolize::Site) -> String {
    match (s.naming, s.function.as_deref(), s.file_line()) {
        (crate::symbolize::Naming::Symbol, Some(f), Some(fl)) => format!("{f} ({fl})"),
        (crate::symbolize::Naming::Symbol, Some(f), None) => f.to_string(),
        _ => s.label(),
    }
}

/// The `top` user sites of every family with stacks, by its first measure
/// (allocations, bytes copied, acquisitions, ...), largest first.
pub fn top(r: &Recorded, top: usize) -> Vec<FamilySites> {
    let mut out = Vec::new();
    if !r.stacks.enabled {
        return out;
    }
    for family in r.families.iter().copied() {
        let mut by: BTreeMap<String, u64> = BTreeMap::new();
        for row in r.stacks.rows.iter().filter(|x| x.family == family) {
            let Some(v) = row_values(row).map(|v| v[0]).filter(|v| *v > 0) else {
                continue;
            };
            let site = match row.rig_probes {
                true => "[rig's probes]".to_string(),
                false => row
                    .stack
                    .as_ref()
                    .and_then(|s| r.stacks.stacks.get(s))
                    .and_then(|s| s.frames.get(s.user_site))
                    .map_or_else(|| "[no user stack]".to_string(), site_name),
            };
            let at = by.entry(site).or_default();
            // A user probe's signed argument sums modulo 2^64.
            *at = at.wrapping_add(v);
        }
        let mut sites: Vec<(String, u64)> = by.into_iter().collect();
        sites.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        let n = r.window.requests;
        out.push(FamilySites {
            family,
            measure: measures(family)[0],
            per_request: n.is_some_and(|n| n > 0),
            sites: sites
                .into_iter()
                .take(top)
                .map(|(site, v)| SiteCost {
                    site,
                    value: per_request(v, n).unwrap_or(v as f64),
                })
                .collect(),
        });
    }
    out
}

/// Lines for a terminal: `  alloc (allocations per request): 3 calib_alloc_small (calib_server.c:120), ...`.
pub fn render(all: &[FamilySites]) -> String {
    let mut out = String::new();
    for f in all.iter().filter(|f| !f.sites.is_empty()) {
        let unit = if f.per_request {
            format!("{} per request", f.measure.what)
        } else {
            format!("{} in the window", f.measure.what)
        };
        let sites: Vec<String> = f
            .sites
            .iter()
            .map(|s| format!("{} {}", number(s.value), s.site))
            .collect();
        out.push_str(&format!(
            "  {:<9} {unit}: {}\n",
            f.family.name(),
            sites.join(" · ")
        ));
    }
    out
}

/// Whole numbers as such, others with up to 3 decimals.
pub fn number(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        let s = format!("{v:.3}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}
