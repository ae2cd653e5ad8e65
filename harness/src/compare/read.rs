//! A result directory read back: one [`Reading`] per target in it.
//!
//! In: a directory of `rig run`, `rig ab` or `rig gate` (`cases.jsonl`,
//! `manifest.json`). Out: for each target, its build (the executable's
//! SHA-256 as launched), its commit (the manifest's `git`, when the
//! executable lived in a work tree) and, per case key, each round's
//! metrics by name.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::Deserialize;
use serde_json::Value;

use super::series::Kind;
use crate::gitfacts::GitFacts;
use crate::metrics::names::PER_REQUEST;
use crate::metrics::per_request;
use crate::results::case::{CaseLine, Clean, Site};
use crate::results::manifest::ManifestView;

/// One target of one result directory.
#[derive(Clone, Debug)]
pub struct Reading {
    pub dir: PathBuf,
    pub target: String,
    /// The executable's SHA-256, as the launches hashed it; when the
    /// target maps shared objects of its own build ([`Reading::modules`]),
    /// the SHA-256 of the executable's and theirs (`own_build`): two arms
    /// that run one executable with two builds of its library are two
    /// builds.
    pub build: String,
    /// The executable, when the manifest names it and the file there still
    /// hashes to what ran (function hashes are read from it).
    pub exe: Option<PathBuf>,
    /// The shared objects of the target's own build that it mapped (inside
    /// its git work tree, or, outside any, its executable's directory; for
    /// `rig ab`, the arm's libraries), each still hashing to what ran.
    pub modules: Vec<PathBuf>,
    /// Shared objects of its own build that are no longer what ran (rebuilt
    /// or deleted since): the function diff is incomplete without them.
    pub modules_gone: Vec<PathBuf>,
    pub git: Option<GitFacts>,
    /// Case key (the id without target and round) → the case.
    pub cases: BTreeMap<String, CaseReading>,
}

#[derive(Clone, Debug, Default)]
pub struct CaseReading {
    /// The case's matrix settings (lengths, counts, timeouts): cases are
    /// aligned across directories only when these are equal.
    pub settings: BTreeMap<String, Value>,
    /// One per round that measured something.
    pub rounds: Vec<Round>,
}

/// One round's metrics.
#[derive(Clone, Debug, Default)]
pub struct Round {
    pub values: BTreeMap<String, Metric>,
    /// Probe families whose totals the counted pass has: a site counter of
    /// one of these absent from the round is 0 there.
    pub families: BTreeSet<&'static str>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Metric {
    pub value: f64,
    pub kind: Kind,
    /// The probe family of a per-site counter (`alloc`, `copy`,
    /// `syscalls`, `faults`); `None` for totals.
    pub family: Option<&'static str>,
}

/// Fields of a case line that are results or identity, not settings.
const NOT_SETTINGS: &[&str] = &[
    "id",
    "target",
    "target_name",
    "repeat",
    "status",
    "reasons",
    "memory",
    "memslope",
    "recovery",
    "soak",
    "live",
    "clean",
    "counted",
    "elapsed_ms",
    "arm",
];

/// The case key of a case id: the id without its target (second part) and
/// round (`#N`), as `metrics::CaseKey::path_form` prints it.
pub fn case_key(id: &str) -> String {
    let mut parts: Vec<&str> = id.split('/').collect();
    if parts.last().is_some_and(|p| p.starts_with('#')) {
        parts.pop();
    }
    if parts.len() > 1 {
        parts.remove(1);
    }
    parts.join("/")
}

/// Every target of `dir`, in the order its cases name them.
pub fn read_dir(dir: &Path) -> Result<Vec<Reading>> {
    let cases_path = dir.join("cases.jsonl");
    let text = std::fs::read_to_string(&cases_path).with_context(|| {
        format!(
            "{}: not a result directory of rig run, rig ab or rig gate (no readable cases.jsonl)",
            dir.display()
        )
    })?;
    let manifest: Value = std::fs::read(dir.join("manifest.json"))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or(Value::Null);
    let manifest = ManifestView::of(&manifest);
    let mut out: Vec<Reading> = Vec::new();
    for (n, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let at = || format!("{} line {}", cases_path.display(), n + 1);
        let json: Value = serde_json::from_str(line).with_context(at)?;
        let c = CaseLine::of(&json).with_context(at)?;
        let target = c.target_name.unwrap_or("?").to_string();
        let Some(exe_sha) = c.exe_sha256() else {
            continue;
        };
        let own = own_objects(&manifest, &target);
        let build = own_build(exe_sha, &own);
        let i = match out
            .iter()
            .position(|r| r.target == target && r.build == build)
        {
            Some(i) => i,
            None => {
                let (modules, modules_gone) = still_there(&own);
                out.push(Reading {
                    dir: dir.to_path_buf(),
                    exe: exe_of(&manifest, &target, exe_sha),
                    modules,
                    modules_gone,
                    git: git_of(&manifest, &target),
                    target: target.clone(),
                    build,
                    cases: BTreeMap::new(),
                });
                out.len() - 1
            }
        };
        let id = c.id.unwrap_or_default();
        let entry = out[i].cases.entry(case_key(id)).or_default();
        if entry.settings.is_empty() {
            entry.settings = settings(&json);
        }
        let round = round(&c);
        if !round.values.is_empty() {
            entry.rounds.push(round);
        }
    }
    if out.is_empty() {
        bail!(
            "{}: cases.jsonl holds no measured case (every case failed or was skipped)",
            dir.display()
        );
    }
    Ok(out)
}

fn settings(c: &Value) -> BTreeMap<String, Value> {
    c.as_object()
        .map(|o| {
            o.iter()
                .filter(|(k, _)| !NOT_SETTINGS.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        })
        .unwrap_or_default()
}

/// The executable the manifest names for `target` (`rig run`: the first
/// object of its `targets[]` entry; `rig ab`: the arm's `binary`
/// expectation; `rig gate`: `binary`), if it is still the build that ran.
fn exe_of(manifest: &ManifestView, target: &str, build: &str) -> Option<PathBuf> {
    let run = manifest
        .target(target)
        .and_then(|t| t.objects.first()?.path);
    let ab = || {
        manifest
            .arm(target)?
            .expected_objects
            .iter()
            .find(|e| e.via == Some("binary"))?
            .path
    };
    let path = PathBuf::from(run.or_else(ab).or_else(|| manifest.binary_path())?);
    let (_, sha, _) = crate::launch::start::hash_file(&path).ok()?;
    (sha == build).then_some(path)
}

/// The shared objects of `target`'s own build, `(path, sha256)` as they
/// ran, by path. `rig run` and `rig gate`: the mapped objects of the first
/// launch (`targets[].objects` after the executable) inside the target's
/// git work tree, or, when the executable is in none, under its
/// directory: what the target's build produced, not the system's
/// libraries. `rig ab`: the arm's expected objects other than its binary
/// (the libraries the arm selects).
fn own_objects(manifest: &ManifestView, target: &str) -> Vec<(PathBuf, String)> {
    let entry = |path: Option<&str>, sha256: Option<&str>| -> Option<(PathBuf, String)> {
        Some((PathBuf::from(path?), sha256?.to_string()))
    };
    let mut out: Vec<(PathBuf, String)> = match manifest.target(target) {
        Some(t) => {
            let Some((exe, _)) = t.objects.first().and_then(|o| entry(o.path, o.sha256)) else {
                return Vec::new();
            };
            let root = match git_of(manifest, target) {
                Some(g) => g.work_tree,
                None => exe.parent().map(Path::to_path_buf).unwrap_or_default(),
            };
            t.objects
                .iter()
                .filter_map(|o| entry(o.path, o.sha256))
                .filter(|(p, _)| *p != exe && p.starts_with(&root) && root.as_os_str().len() > 1)
                .collect()
        }
        None => manifest
            .arm(target)
            .map(|a| {
                a.expected_objects
                    .iter()
                    .filter(|o| o.via != Some("binary"))
                    .filter_map(|o| entry(o.path, o.sha256))
                    .collect()
            })
            .unwrap_or_default(),
    };
    out.sort();
    out.dedup();
    out
}

/// The build of a reading: the executable's SHA-256 alone, or with the
/// target's own shared objects, the SHA-256 of `exe:sha,...` over them
/// in path order.
fn own_build(exe: &str, own: &[(PathBuf, String)]) -> String {
    use sha2::{Digest, Sha256};
    if own.is_empty() {
        return exe.to_string();
    }
    let mut h = Sha256::new();
    h.update(exe.as_bytes());
    for (_, sha) in own {
        h.update(b":");
        h.update(sha.as_bytes());
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// The objects of `own` whose file still hashes to what ran, and those
/// that do not.
fn still_there(own: &[(PathBuf, String)]) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let mut there = Vec::new();
    let mut gone = Vec::new();
    for (p, sha) in own {
        match crate::launch::start::hash_file(p) {
            Ok((_, now, _)) if now == *sha => there.push(p.clone()),
            _ => gone.push(p.clone()),
        }
    }
    (there, gone)
}

/// The commit of `target`'s executable: `targets[].git` of `rig run` and
/// `rig gate`, `arms[].git` of `rig ab`.
fn git_of(manifest: &ManifestView, target: &str) -> Option<GitFacts> {
    let git = match manifest.target(target) {
        Some(t) => &t.git,
        None => &manifest.arm(target)?.git,
    };
    GitFacts::deserialize(git).ok()
}

/// A metric's value in a case line.
type Read = fn(&CaseLine) -> Option<f64>;

/// Timing metrics of the clean pass (and the memory pass's idle RSS), by
/// name, in µs where the case has ns.
const TIMING: &[(&str, Read)] = &[
    ("rps", |c| clean(c)?.load.rps),
    ("latency p50 µs", |c| us(clean(c)?.load.latency.p50_ns)),
    ("latency p90 µs", |c| us(clean(c)?.load.latency.p90_ns)),
    ("latency p99 µs", |c| us(clean(c)?.load.latency.p99_ns)),
    ("latency p99.9 µs", |c| us(clean(c)?.load.latency.p999_ns)),
    ("server CPU µs/req", |c| {
        clean(c)?.server.cpu_us_per_request
    }),
    ("RSS max KiB", |c| clean(c)?.server.rss_max_kib),
    ("PSS max KiB", |c| clean(c)?.server.pss_max_kib),
    ("idle RSS KiB", |c| c.memory.as_ref()?.rss_kib()),
];

fn clean<'c, 'a>(c: &'c CaseLine<'a>) -> Option<&'c Clean<'a>> {
    c.clean.as_ref()
}

fn us(ns: Option<f64>) -> Option<f64> {
    ns.map(|ns| ns / 1e3)
}

/// How the metric `name` (as `rig compare` names it) moves between
/// readings of one build, and whether the clean pass (no probes) measures
/// it: the timing totals of the clean pass, the scheduling-dependent
/// totals of the counted pass, and every other name (the exact totals,
/// per-site counters, `syscall NAME`) an exact counter of the counted pass.
pub fn kind_of(name: &str) -> (Kind, bool) {
    if TIMING.iter().any(|(n, _)| *n == name) {
        return (Kind::Timing, true);
    }
    match PER_REQUEST.iter().find(|t| t.name == name) {
        Some(t) if !t.exact => (Kind::Timing, false),
        _ => (Kind::Exact, false),
    }
}

fn round(c: &CaseLine) -> Round {
    let mut r = Round::default();
    for (name, value) in TIMING {
        if let Some(v) = value(c) {
            r.values.insert(name.to_string(), timing(v));
        }
    }
    let Some(counted) = &c.counted else {
        return r;
    };
    for (t, v) in counted.per_request.values() {
        let Some(v) = v else { continue };
        let kind = if t.exact { Kind::Exact } else { Kind::Timing };
        r.values.insert(
            t.name.to_string(),
            Metric {
                value: v,
                kind,
                family: None,
            },
        );
        // A family whose totals the pass has: its sites absent from the
        // round are 0 there.
        r.families.insert(t.family);
    }
    let a = &counted.attribution;
    let Some(requests) = a
        .window
        .as_ref()
        .and_then(|w| w.requests)
        .filter(|n| *n > 0)
    else {
        return r;
    };
    let mut add = |name: String, family: &'static str, count: Option<u64>| {
        let e = r.values.entry(name).or_insert(Metric {
            value: 0.0,
            kind: Kind::Exact,
            family: Some(family),
        });
        e.value += per_request(count.unwrap_or(0), Some(requests)).unwrap_or(0.0);
    };
    // As `metrics::counters` names them: an application allocator's entry
    // points said as such.
    let alloc = a.alloc.iter().map(|r| {
        let kind = crate::metrics::names::alloc_site_kind(r.kind.unwrap_or("?"), r.allocator);
        ("alloc", kind, &r.site, r.calls, r.bytes)
    });
    let copy = a.copy.iter().map(|r| {
        (
            "copy",
            r.kind.unwrap_or("?").to_string(),
            &r.site,
            r.calls,
            r.bytes,
        )
    });
    for (family, kind, site, calls, bytes) in alloc.chain(copy) {
        let f = function_of(site);
        add(format!("{kind} calls @ {f}"), family, calls);
        // Frees have no bytes: no `free bytes` counter (absent is 0).
        if let Some(bytes) = bytes.filter(|b| *b > 0) {
            add(format!("{kind} bytes @ {f}"), family, Some(bytes));
        }
    }
    for row in &a.syscalls {
        let name = row.name.unwrap_or("?");
        add(format!("syscall {name}"), "syscalls", row.count);
    }
    for row in &a.faults {
        add(
            format!("faults @ {}", function_of(&row.site)),
            "faults",
            row.count,
        );
    }
    // The probes a user named: each listed (0 calls included) by the pass
    // that attached it, as `metrics::counters` names them.
    for p in &a.user {
        let probe = p.probe.unwrap_or("?");
        add(format!("{probe} calls/req"), "user", p.calls);
        for s in &p.sites {
            add(
                format!("{probe} calls @ {}", function_of(&s.site)),
                "user",
                s.calls,
            );
        }
    }
    // A summed argument may be negative: divided here, not by `add`.
    for p in &a.user {
        if let (Some(i), Some(sum)) = (p.arg, p.arg_sum) {
            r.values.insert(
                format!("{} arg{i} summed/req", p.probe.unwrap_or("?")),
                Metric {
                    value: sum as f64 / requests as f64,
                    kind: Kind::Exact,
                    family: Some("user"),
                },
            );
        }
    }
    if !a.user.is_empty() {
        r.families.insert("user");
    }
    r
}

fn timing(value: f64) -> Metric {
    Metric {
        value,
        kind: Kind::Timing,
        family: None,
    }
}

/// A site by its function, not its line: lines move between commits
/// whenever code above them is edited; the function stays (and a rename is
/// told by the function hashes).
fn function_of(site: &Site) -> String {
    match site.function {
        Some(f) => f.to_string(),
        None => format!(
            "{}+{:#x}",
            site.module
                .and_then(|m| m.rsplit('/').next())
                .unwrap_or("?"),
            site.module_offset.unwrap_or(0)
        ),
    }
}

/// The function of a per-site counter name (`malloc calls @ f` → `f`).
pub fn site_function(name: &str) -> Option<&str> {
    name.split_once(" @ ").map(|(_, f)| f)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_case_key_drops_the_target_and_the_round() {
        assert_eq!(
            case_key("calib/calib/h1/calib/closed/1x1/ka/#1"),
            "calib/h1/calib/closed/1x1/ka"
        );
        assert_eq!(case_key("memory/peer/plain/#2"), "memory/plain");
    }

    #[test]
    fn a_round_has_timing_totals_and_sites_by_function() {
        let c = serde_json::json!({
            "clean": {"load": {"rps": 1000.0, "latency": {"p50_ns": 2000}},
                      "server": {"cpu_us_per_request": 5.0}},
            "counted": {
                "per_request": {"allocations": 2.0, "syscalls": 1.0, "voluntary_cs": 0.5},
                "attribution": {
                    "window": {"requests": 10},
                    "alloc": [
                        {"kind": "malloc", "calls": 10, "bytes": 240,
                         "site": {"function": "f", "line": 3}},
                        {"kind": "malloc", "calls": 10, "bytes": 240,
                         "site": {"function": "f", "line": 4}}
                    ],
                    "syscalls": [{"name": "read", "count": 10}],
                    "user": [
                        {"probe": "usdt:app:req", "arg": 1, "calls": 20, "arg_sum": -50,
                         "sites": [{"site": {"function": "serve"}, "calls": 20}]},
                        {"probe": "func:never", "calls": 0, "sites": []}
                    ]
                }
            }
        });
        let r = round(&CaseLine::of(&c).unwrap());
        assert_eq!(r.values["usdt:app:req calls/req"].value, 2.0);
        assert_eq!(r.values["usdt:app:req calls @ serve"].value, 2.0);
        assert_eq!(r.values["usdt:app:req arg1 summed/req"].value, -5.0);
        assert_eq!(r.values["func:never calls/req"].value, 0.0);
        assert!(r.families.contains("user"));
        assert_eq!(r.values["rps"].kind, Kind::Timing);
        assert_eq!(r.values["latency p50 µs"].value, 2.0);
        assert_eq!(r.values["allocs/req"].kind, Kind::Exact);
        assert_eq!(r.values["voluntary cs/req"].kind, Kind::Timing);
        assert_eq!(r.values["malloc calls @ f"].value, 2.0);
        assert_eq!(r.values["malloc bytes @ f"].value, 48.0);
        assert_eq!(r.values["syscall read"].value, 1.0);
        assert!(r.families.contains("alloc") && !r.families.contains("copy"));
    }

    #[test]
    fn the_shared_objects_of_the_targets_own_build_are_part_of_its_build() {
        let m = serde_json::json!({"targets": [{
            "name": "dyn",
            "git": {"work_tree": "/src/app", "commit": "c", "describe": "c",
                    "dirty": false, "subject": "s"},
            "objects": [
                {"path": "/src/app/build/server", "sha256": "e1"},
                {"path": "/src/app/build/server", "sha256": "e1"},
                {"path": "/usr/lib/x86_64-linux-gnu/libc.so.6", "sha256": "c1"},
                {"path": "/src/app/build/lib/libwork.so", "sha256": "w1"},
                {"path": "/src/application/libother.so", "sha256": "o1"}
            ]
        }]});
        let own = own_objects(&ManifestView::of(&m), "dyn");
        assert_eq!(
            own,
            vec![(
                PathBuf::from("/src/app/build/lib/libwork.so"),
                "w1".to_string()
            )]
        );
        // Another build of the library is another build of the target.
        let other = [(own[0].0.clone(), "w2".to_string())];
        assert_ne!(own_build("e1", &own), own_build("e1", &other));
        assert_eq!(own_build("e1", &[]), "e1");
        // Outside any work tree: under the executable's directory.
        let m = serde_json::json!({"targets": [{"name": "dyn", "objects": [
            {"path": "/opt/x/server", "sha256": "e1"},
            {"path": "/opt/x/ab/libwork.so", "sha256": "w1"},
            {"path": "/lib/libc.so.6", "sha256": "c1"}
        ]}]});
        assert_eq!(own_objects(&ManifestView::of(&m), "dyn").len(), 1);
        // rig ab: the arm's libraries.
        let m = serde_json::json!({"arms": [{"name": "b", "expected_objects": [
            {"path": "/o/calib_dyn", "sha256": "e1", "via": "binary"},
            {"path": "/o/ab/b/libcalibwork.so", "sha256": "b1", "via": "LD_LIBRARY_PATH"}
        ]}]});
        assert_eq!(
            own_objects(&ManifestView::of(&m), "b"),
            vec![(PathBuf::from("/o/ab/b/libcalibwork.so"), "b1".to_string())]
        );
    }

    #[test]
    fn a_metric_name_says_its_kind_and_its_pass() {
        assert_eq!(kind_of("rps"), (Kind::Timing, true));
        assert_eq!(kind_of("latency p99 µs"), (Kind::Timing, true));
        assert_eq!(kind_of("server CPU µs/req"), (Kind::Timing, true));
        assert_eq!(kind_of("voluntary cs/req"), (Kind::Timing, false));
        assert_eq!(kind_of("allocs/req"), (Kind::Exact, false));
        assert_eq!(kind_of("malloc calls @ f"), (Kind::Exact, false));
    }
}
