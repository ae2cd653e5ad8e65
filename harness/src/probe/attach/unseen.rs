//! How often the code a family does not count ran (CPython's inlined
//! pymalloc): one uprobe_multi link per process on the sites its runtime
//! names (`runtime::unseen_sites`), counted without stacks or sizes, so the
//! report gives the share of the family it missed instead of only naming
//! the code. Where the kernel has no such links (before 6.6), the report
//! says the share is not measured, and why.

use serde::Serialize;

use super::Family;
use crate::probe::multi::MultiCounts;
use crate::process::maps::ProcMaps;

/// How many (module, kind) counters one probe set keeps.
const COUNTERS: u32 = 16;

/// The runs of one kind of uncounted code in one module, in a window.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct UnseenCount {
    pub family: Family,
    /// The module as in maps.
    pub module: String,
    /// What one run is (`allocations`, `frees`).
    pub label: String,
    /// Paths probed, of `paths` found (a path with no place to probe is
    /// not counted: the count is a floor).
    pub sites: usize,
    pub paths: usize,
    /// Runs in the window, summed over the processes; `None` when not
    /// measured (`why_not`).
    pub count: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why_not: Option<String>,
}

/// The counters, the links and what each counter is (its index is the
/// link's cookie).
#[derive(Default)]
pub(super) struct UnseenState {
    counts: Option<Result<MultiCounts, String>>,
    pub(super) counters: Vec<UnseenCount>,
}

impl UnseenState {
    /// Count, in process `pid` (map `maps`), the runs of the code that
    /// `families` do not count, where its runtime says where.
    pub(super) fn join(&mut self, families: &[Family], pid: u32, maps: &ProcMaps) {
        for &family in families {
            crate::runtime::each_module(maps, |m, at| {
                let sets = crate::runtime::unseen_sites(m, at, family.name());
                let mut sites: Vec<(u64, u32)> = Vec::new();
                for set in sets {
                    let index = self.counter(family, at.path, set.label, &set);
                    if let Some(i) = index {
                        sites.extend(set.file_offsets.iter().map(|&o| (o, i)));
                    }
                }
                if sites.is_empty() {
                    return;
                }
                let counts = self
                    .counts
                    .get_or_insert_with(|| MultiCounts::new(COUNTERS));
                let attached = match counts {
                    Ok(c) => c.attach(at.open, &sites, pid),
                    Err(e) => Err(e.clone()),
                };
                if let Err(why) = attached {
                    for c in self.counters.iter_mut() {
                        if c.module == at.path && c.why_not.is_none() {
                            c.why_not = Some(why.clone());
                        }
                    }
                }
            });
        }
    }

    /// The counter of `label` runs in `module` (made on first sight), or
    /// `None` when it is not measured.
    fn counter(
        &mut self,
        family: Family,
        module: &str,
        label: &str,
        set: &crate::runtime::UnseenSites,
    ) -> Option<u32> {
        let same = |c: &UnseenCount| c.family == family && c.module == module && c.label == label;
        let i = match self.counters.iter().position(same) {
            Some(i) => i,
            None => {
                let full = self.counters.len() as u32 >= COUNTERS;
                let why_not = if set.file_offsets.is_empty() {
                    Some("no path has a place to probe".to_string())
                } else {
                    full.then(|| format!("more than {COUNTERS} kinds of such code"))
                };
                self.counters.push(UnseenCount {
                    family,
                    module: module.to_string(),
                    label: label.to_string(),
                    sites: set.file_offsets.len(),
                    paths: set.paths,
                    count: None,
                    why_not,
                });
                self.counters.len() - 1
            }
        };
        self.counters[i].why_not.is_none().then_some(i as u32)
    }

    /// Every counter now (empty when none was made).
    pub(super) fn read(&self) -> Result<Vec<u64>, String> {
        match &self.counts {
            Some(Ok(c)) => c.read(),
            _ => Ok(Vec::new()),
        }
    }

    /// Its program's run time and runs so far (nothing when none runs).
    pub(super) fn runtime(&self) -> (std::time::Duration, u64) {
        match &self.counts {
            Some(Ok(c)) => c.runtime().unwrap_or_default(),
            _ => Default::default(),
        }
    }

    /// The counters with their runs between two reads (`delta`).
    pub(super) fn counted(&self, delta: &[u64]) -> Vec<UnseenCount> {
        self.counters
            .iter()
            .enumerate()
            .map(|(i, c)| UnseenCount {
                count: c
                    .why_not
                    .is_none()
                    .then(|| delta.get(i).copied().unwrap_or(0)),
                ..c.clone()
            })
            .collect()
    }
}
