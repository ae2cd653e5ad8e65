//! `rig compare DIR...`: result directories over builds, side by side.
//!
//! In: result directories of `rig run` (also `rig ab` and `rig gate`: one
//! reading per target of each), in the order given: the series. Out: per
//! case key, every metric's series with its noise band and its steps, each
//! step with its interval (the builds and commits between the readings)
//! and the functions that changed there (and, of its commits, which
//! touched a per-site step's function: `touched`); a terminal table, JSON
//! and a page (`html::compare_page`).
//!
//! The band comes from the data: readings of identical builds (the same
//! executable SHA-256, and the same shared objects of the target's own
//! build), in two directories or two rounds of one, give each
//! timing metric's spread; exact counters have a band of 0. Per-site
//! counters are keyed by function and follow a function renamed without
//! other change (same hash under a new name, `funchash`), so a rename is no
//! step.

pub mod read;
mod render;
pub mod series;
pub mod touched;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use serde::Serialize;

use crate::funchash::{split_key, FunctionDiff, FunctionHash, FunctionState};
use crate::gitfacts::GitFacts;
pub use read::{read_dir, Reading};
use series::{Kind, Step};
use touched::{Commit, Touched};

pub struct CompareSettings {
    pub dirs: Vec<PathBuf>,
    pub json: Option<PathBuf>,
    pub html: Option<PathBuf>,
}

/// Everything `rig compare` prints, as data (its `--json`).
#[derive(Debug, Serialize)]
pub struct Comparison {
    pub readings: Vec<ReadingInfo>,
    /// Case keys not aligned, with the reason.
    pub refused: Vec<Refused>,
    /// Each consecutive pair of readings whose executables differ.
    pub functions: Vec<Functions>,
    pub cases: Vec<CaseSeries>,
}

#[derive(Debug, Serialize)]
pub struct ReadingInfo {
    /// `R1`, `R2`…: the column the reading is in.
    pub label: String,
    pub dir: PathBuf,
    pub target: String,
    pub build: String,
    pub exe: Option<PathBuf>,
    /// The shared objects of the target's own build whose functions are
    /// hashed with the executable's (`module!function` in `functions`).
    pub modules: Vec<PathBuf>,
    pub git: Option<GitFacts>,
}

#[derive(Debug, Serialize)]
pub struct Refused {
    pub case: String,
    pub reason: String,
}

#[derive(Debug, Serialize)]
pub struct Functions {
    pub from: usize,
    pub to: usize,
    #[serde(flatten)]
    pub diff: Option<FunctionDiff>,
    /// Why there is no diff (an executable gone or rebuilt since).
    pub unavailable: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct CaseSeries {
    pub case: String,
    pub series: Vec<MetricSeries>,
}

#[derive(Debug, Serialize)]
pub struct MetricSeries {
    pub metric: String,
    pub kind: Kind,
    /// One per reading; `null` where it was not measured.
    pub values: Vec<Option<f64>>,
    /// For timing metrics, how far two readings may differ, relative to
    /// their level (0.05: 5%), from the builds measured more than once
    /// (`series::band`); 0 for exact counters; `null` when no build was
    /// measured twice.
    pub band: Option<f64>,
    pub steps: Vec<StepReport>,
    /// Exact counters that moved between readings of one build.
    pub unstable: Vec<(usize, usize)>,
}

#[derive(Debug, Serialize)]
pub struct StepReport {
    #[serde(flatten)]
    pub step: Step,
    /// The commits after the last reading before the step up to the first
    /// after it (`git log from..to`, oldest first), when both readings
    /// name a commit of one repository.
    pub commits: Vec<String>,
    /// A per-site counter's function in the reading after the step:
    /// `changed`, `added`, `identical` (the change is in its callers or callees) or
    /// `unknown` (no function hashes).
    pub function: Option<String>,
    /// For a per-site counter whose interval has commits: which of them
    /// changed a line of its function (`touched`).
    pub touched: Option<Touched>,
}

/// Read, align and analyse `dirs`.
pub fn compare(dirs: &[PathBuf]) -> Result<Comparison> {
    let mut readings = Vec::new();
    for d in dirs {
        readings.extend(read_dir(d)?);
    }
    if readings.len() < 2 {
        bail!("one reading only: give at least two result directories (or one with two targets) to compare");
    }
    let hashes: Vec<Result<Vec<FunctionHash>, String>> = readings
        .iter()
        .map(|r| match &r.exe {
            Some(_) if !r.modules_gone.is_empty() => Err(format!(
                "{} ({}): {} no longer what ran (rebuilt or deleted since)",
                r.dir.display(),
                r.target,
                r.modules_gone
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
            Some(p) => crate::funchash::hash_build(p, &r.modules).map_err(|e| e.to_string()),
            None => Err(format!(
                "{} ({}): the manifest names no executable that still hashes to build {}",
                r.dir.display(),
                r.target,
                short(&r.build)
            )),
        })
        .collect();
    let mut functions = Vec::new();
    let mut diffs: BTreeMap<usize, FunctionDiff> = BTreeMap::new();
    for i in 1..readings.len() {
        if readings[i].build == readings[i - 1].build {
            continue;
        }
        let f = match (&hashes[i - 1], &hashes[i]) {
            (Ok(a), Ok(b)) => {
                let d = crate::funchash::diff(a, b);
                diffs.insert(i, d.clone());
                Functions {
                    from: i - 1,
                    to: i,
                    diff: Some(d),
                    unavailable: None,
                }
            }
            (Err(e), _) | (_, Err(e)) => Functions {
                from: i - 1,
                to: i,
                diff: None,
                unavailable: Some(e.clone()),
            },
        };
        functions.push(f);
    }
    rename_sites(&mut readings, &diffs);
    let (cases, refused) = align(&readings);
    if cases.is_empty() {
        bail!(
            "no case could be aligned across the readings: {}",
            refused
                .iter()
                .map(|r| format!("{}: {}", r.case, r.reason))
                .collect::<Vec<_>>()
                .join("; ")
        );
    }
    let builds: Vec<String> = readings.iter().map(|r| r.build.clone()).collect();
    let seen = touched::Seen::default();
    let cases = cases
        .into_iter()
        .map(|key| CaseSeries {
            series: series_of(&readings, &key, &builds, &diffs, &seen),
            case: key,
        })
        .collect();
    Ok(Comparison {
        readings: readings
            .iter()
            .enumerate()
            .map(|(i, r)| ReadingInfo {
                label: format!("R{}", i + 1),
                dir: r.dir.clone(),
                target: r.target.clone(),
                build: r.build.clone(),
                exe: r.exe.clone(),
                modules: r.modules.clone(),
                git: r.git.clone(),
            })
            .collect(),
        refused,
        functions,
        cases,
    })
}

/// The command: compare, print the table, write `--json` and `--html`.
pub fn command(s: &CompareSettings) -> Result<i32> {
    let c = compare(&s.dirs)?;
    crate::outln!("{}", render::table(&c));
    if let Some(p) = &s.json {
        let mut text = serde_json::to_string_pretty(&c)?;
        text.push('\n');
        crate::fsutil::write_new(p, text.as_bytes())
            .with_context(|| format!("writing {}", p.display()))?;
    }
    if let Some(p) = &s.html {
        let page = crate::html::compare_page(&serde_json::to_value(&c)?)?;
        crate::fsutil::write_new(p, page.as_bytes())
            .with_context(|| format!("writing {}", p.display()))?;
        crate::outln!("report: {}", p.display());
    }
    Ok(crate::exit::OK)
}

pub(crate) fn short(s: &str) -> &str {
    &s[..s.len().min(12)]
}

/// Per-site counter names of each reading rewritten to the name the
/// function had in the first reading it appears in, following renames.
fn rename_sites(readings: &mut [Reading], diffs: &BTreeMap<usize, FunctionDiff>) {
    let mut canon: BTreeMap<String, String> = BTreeMap::new();
    for (i, r) in readings.iter_mut().enumerate() {
        if let Some(d) = diffs.get(&i) {
            // A site names its function without its module.
            for (old, new) in &d.renamed {
                let (old, new) = (split_key(old).1, split_key(new).1);
                let first = canon.get(old).cloned().unwrap_or_else(|| old.to_string());
                canon.insert(new.to_string(), first);
            }
        }
        if canon.is_empty() {
            continue;
        }
        for case in r.cases.values_mut() {
            for round in &mut case.rounds {
                let values = std::mem::take(&mut round.values);
                round.values = values
                    .into_iter()
                    .map(|(name, m)| match name.split_once(" @ ") {
                        Some((kind, f)) if canon.contains_key(f) => {
                            (format!("{kind} @ {}", canon[f]), m)
                        }
                        _ => (name, m),
                    })
                    .collect();
            }
        }
    }
}

/// Case keys measured in at least one reading whose settings agree in
/// every reading that has them; the others refused with the difference.
fn align(readings: &[Reading]) -> (Vec<String>, Vec<Refused>) {
    let keys: BTreeSet<&String> = readings.iter().flat_map(|r| r.cases.keys()).collect();
    let (mut ok, mut refused) = (Vec::new(), Vec::new());
    for key in keys {
        let with: Vec<(usize, &read::CaseReading)> = readings
            .iter()
            .enumerate()
            .filter_map(|(i, r)| r.cases.get(key).map(|c| (i, c)))
            .collect();
        let (i0, first) = with[0];
        let differ = with.iter().find_map(|(i, c)| {
            let fields: BTreeSet<&String> =
                first.settings.keys().chain(c.settings.keys()).collect();
            fields.into_iter().find_map(|f| {
                let (a, b) = (first.settings.get(f), c.settings.get(f));
                (a != b).then(|| {
                    let show = |v: Option<&serde_json::Value>| {
                        v.map_or("absent".to_string(), |v| v.to_string())
                    };
                    format!(
                        "matrix setting `{f}` is {} in R{} ({}) but {} in R{} ({}): the same key \
                         measured differently is no series; rerun with the same matrix",
                        show(a),
                        i0 + 1,
                        readings[i0].dir.display(),
                        show(b),
                        i + 1,
                        readings[*i].dir.display()
                    )
                })
            })
        });
        match differ {
            Some(reason) => refused.push(Refused {
                case: key.clone(),
                reason,
            }),
            None if with.len() < 2 => refused.push(Refused {
                case: key.clone(),
                reason: format!("measured in R{} only", i0 + 1),
            }),
            None => ok.push(key.clone()),
        }
    }
    (ok, refused)
}

fn series_of(
    readings: &[Reading],
    key: &str,
    builds: &[String],
    diffs: &BTreeMap<usize, FunctionDiff>,
    seen: &touched::Seen,
) -> Vec<MetricSeries> {
    // Every metric any reading has for the key, with its kind and family.
    let mut metrics: BTreeMap<&str, (Kind, Option<&'static str>)> = BTreeMap::new();
    for r in readings {
        for round in r.cases.get(key).map_or(&[][..], |c| &c.rounds[..]) {
            for (n, m) in &round.values {
                metrics.entry(n).or_insert((m.kind, m.family));
            }
        }
    }
    let mut out = Vec::new();
    for (name, (kind, family)) in metrics {
        // Each round's value (0 for a site of a family the round measured).
        let samples = |r: &Reading| -> Vec<f64> {
            r.cases.get(key).map_or(Vec::new(), |c| {
                c.rounds
                    .iter()
                    .filter_map(|round| match (round.values.get(name), family) {
                        (Some(m), _) => Some(m.value),
                        (None, Some(f)) if round.families.contains(f) => Some(0.0),
                        _ => None,
                    })
                    .collect()
            })
        };
        let mut by_build: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
        let mut values = Vec::new();
        for r in readings {
            let s = samples(r);
            by_build.entry(&r.build).or_default().extend(&s);
            values.push(match kind {
                Kind::Exact => s.first().copied(),
                Kind::Timing => crate::stats::median(&s),
            });
        }
        let groups: Vec<Vec<f64>> = by_build.into_values().collect();
        let band = series::band(kind, &groups);
        let moves = series::steps(kind, &values, builds, band);
        let steps = moves
            .steps
            .into_iter()
            .map(|step| {
                let (a, b) = (&readings[step.from], &readings[step.to]);
                let commits = commits_between(a, b);
                let site = read::site_function(name);
                let touched = match (site, &b.git) {
                    (Some(f), Some(g)) if !commits.is_empty() => Some(touched::touched(
                        &g.work_tree,
                        &commits,
                        f,
                        &names_of(diffs, f, step.to),
                        seen,
                    )),
                    _ => None,
                };
                StepReport {
                    commits: commits.into_iter().map(|c| c.line).collect(),
                    function: site.map(|f| {
                        function_state(readings, diffs, step.from, step.to, f).to_string()
                    }),
                    touched,
                    step,
                }
            })
            .collect();
        out.push(MetricSeries {
            metric: name.to_string(),
            kind,
            values,
            band,
            steps,
            unstable: moves.unstable,
        });
    }
    out
}

/// What happened to function `f` (a name as the series shows it: the
/// first name of a renamed function) between readings `from` and `to`.
fn function_state(
    readings: &[Reading],
    diffs: &BTreeMap<usize, FunctionDiff>,
    from: usize,
    to: usize,
    f: &str,
) -> &'static str {
    // The function's name in each reading, following renames from the
    // first reading on.
    let mut name = f.to_string();
    let mut state = "identical";
    for i in 1..=to {
        let d = diffs.get(&i);
        if let Some((_, new)) = d.and_then(|d| {
            d.renamed
                .iter()
                .find(|(o, _)| split_key(o).1 == name.as_str())
        }) {
            name = split_key(new).1.to_string();
        }
        if i <= from || readings[i].build == readings[i - 1].build {
            continue;
        }
        let Some(d) = d else { return "unknown" };
        match d.state_of(&name) {
            FunctionState::Changed => return "changed",
            FunctionState::Added => state = "added",
            _ if d.removed.iter().any(|r| split_key(r).1 == name) => state = "removed",
            _ => {}
        }
    }
    state
}

/// Every name function `f` (the series' name: its first) had up to
/// reading `to`, following renames.
fn names_of(diffs: &BTreeMap<usize, FunctionDiff>, f: &str, to: usize) -> Vec<String> {
    let mut names = vec![f.to_string()];
    for i in 1..=to {
        let last = names.last().expect("one name at least");
        if let Some((_, new)) = diffs
            .get(&i)
            .and_then(|d| d.renamed.iter().find(|(o, _)| split_key(o).1 == last))
        {
            names.push(split_key(new).1.to_string());
        }
    }
    names
}

/// `git log --reverse from..to`, each commit's id and `short subject`,
/// when both readings name a commit and the later one's work tree still
/// exists.
fn commits_between(a: &Reading, b: &Reading) -> Vec<Commit> {
    let (Some(ga), Some(gb)) = (&a.git, &b.git) else {
        return Vec::new();
    };
    if ga.commit == gb.commit {
        return Vec::new();
    }
    let range = format!("{}..{}", ga.commit, gb.commit);
    crate::gitfacts::git(
        &gb.work_tree,
        &["log", "--reverse", "--format=%H %h %s", &range],
    )
    .map(|t| {
        t.lines()
            .filter_map(|l| l.split_once(' '))
            .map(|(id, line)| Commit {
                id: id.to_string(),
                line: line.to_string(),
            })
            .collect()
    })
    .unwrap_or_default()
}
