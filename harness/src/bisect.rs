//! `rig bisect`: the first commit where a counter moved.
//!
//! In: a git repository, a build command, a target spec, a good and a bad
//! commit and a counter (`allocs/req`, `syscalls/req`, `malloc calls @
//! FUNCTION`, `rps`, `latency p99 µs`, as `rig compare` names them). Out:
//! the first commit on the ancestry path from good to bad whose counter
//! is like bad's, with the evidence: every commit measured and its
//! readings, the commit's files, and the functions that changed between it
//! and its parent; or, for a timing metric, the commit whose readings are
//! like neither end (ambiguous) and the interval known when it was met.
//!
//! Commits are checked out into a temporary worktree of the repository
//! (`git worktree add --detach`, removed at the end), never into the
//! user's checkout. Paths of the spec inside the repository (argv, cwd,
//! env values, the spec's own directory) are moved into the worktree, so
//! the spec that runs the user's build runs each commit's. Each commit is
//! built, then measured by `rig run` of one case: an exact counter by one
//! counted window (the same code gives the same count, so one run
//! decides); a timing metric by `--repeats` clean windows, each in a fresh
//! server, whose median is the commit's reading. The timing band is
//! `rig compare`'s (`series::band`), from the repeats of good and bad:
//! good and bad must be further apart than it, and a commit is good-like
//! or bad-like when its median is inside that end's band (the nearer end
//! when inside both). A per-site counter's function is followed through
//! renames (the same code under a new name, by `funchash`), from each
//! commit measured to the next measured after it on the path.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{bail, Context, Result};

use crate::compare::series::{self, Kind};
use crate::gitfacts::git;
use crate::launch::spec::TargetSpec;
use crate::probe::Family;

pub struct BisectSettings {
    /// The repository's top directory, absolute.
    pub repo: PathBuf,
    pub build: String,
    /// The target spec file.
    pub target: PathBuf,
    pub good: String,
    pub bad: String,
    pub counter: String,
    /// The matrix of the one case measured; `None`: one h1 connection on
    /// the spec's first endpoint.
    pub matrix: Option<PathBuf>,
    pub families: Vec<Family>,
    pub requests: u64,
    /// Windows per commit (each in a fresh server): at least 2 for a
    /// timing metric, whose band comes from them.
    pub repeats: u32,
    pub argv: Vec<String>,
}

/// One commit built and measured.
#[derive(Clone, Debug)]
pub struct Measured {
    pub commit: String,
    pub subject: String,
    /// One reading per repeat, in the order measured.
    pub values: Vec<f64>,
    /// Their median: the commit's reading.
    pub value: f64,
    /// The counter's name here: a per-site counter's function renamed
    /// (the same code under a new name) is read under its new name.
    pub counter: String,
    /// The build's functions (its executable's and its own shared
    /// objects', hashed while the worktree held them), or why not.
    pub functions: Result<Vec<crate::funchash::FunctionHash>, String>,
    /// The run directory the readings are in.
    pub dir: PathBuf,
}

/// The name of `counter` (as given) in a build whose functions are `now`,
/// followed from the build measured `before` it on the path: its name
/// there, renamed when the function is renamed between the two builds.
fn followed(
    counter: &str,
    before: Option<&Measured>,
    now: Option<&[crate::funchash::FunctionHash]>,
) -> String {
    let Some(b) = before else {
        return counter.to_string();
    };
    match (&b.functions, now) {
        (Ok(a), Some(now)) => renamed_counter(&b.counter, a, now),
        _ => None,
    }
    .unwrap_or_else(|| b.counter.clone())
}

/// The repository's worktree for the bisection, removed on drop.
struct Worktree {
    repo: PathBuf,
    path: PathBuf,
}

impl Worktree {
    fn add(repo: &Path, path: &Path, commit: &str) -> Result<Worktree> {
        let out = Command::new("git")
            .arg("-C")
            .arg(repo)
            .args(["worktree", "add", "--detach", "-q"])
            .arg(path)
            .arg(commit)
            .output()
            .context("running git worktree add")?;
        if !out.status.success() {
            bail!(
                "git worktree add {}: {}",
                path.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(Worktree {
            repo: repo.to_path_buf(),
            path: path.to_path_buf(),
        })
    }

    fn checkout(&self, commit: &str) -> Result<()> {
        let out = Command::new("git")
            .arg("-C")
            .arg(&self.path)
            .args(["checkout", "-q", "--detach", commit])
            .output()
            .context("running git checkout")?;
        if !out.status.success() {
            bail!(
                "git checkout {commit} in {}: {}",
                self.path.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(())
    }
}

impl Drop for Worktree {
    fn drop(&mut self) {
        let _ = Command::new("git")
            .arg("-C")
            .arg(&self.repo)
            .args(["worktree", "remove", "--force"])
            .arg(&self.path)
            .output();
        let _ = Command::new("git")
            .arg("-C")
            .arg(&self.repo)
            .args(["worktree", "prune"])
            .output();
    }
}

fn resolve(repo: &Path, flag: &str, commit: &str) -> Result<String> {
    match git(
        repo,
        &[
            "rev-parse",
            "--verify",
            "-q",
            &format!("{commit}^{{commit}}"),
        ],
    ) {
        Some(c) => Ok(c),
        None => crate::refuse!(
            "{flag} {commit}: not a commit of {}; give a commit id, tag or branch",
            repo.display()
        ),
    }
}

/// `text` with every path inside `repo` (the directory itself, or
/// `repo/...`) moved into `wt`; a sibling whose name starts the same
/// (`repo-old`) stays.
pub fn rebase_paths(text: &str, repo: &Path, wt: &Path) -> String {
    let (from, to) = (repo.display().to_string(), wt.display().to_string());
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find(&from) {
        let after = &rest[i + from.len()..];
        let inside = after
            .chars()
            .next()
            .is_none_or(|c| matches!(c, '/' | '"' | '\'' | ' ' | '\n'));
        out.push_str(&rest[..i]);
        out.push_str(if inside { &to } else { &from });
        rest = after;
    }
    out.push_str(rest);
    out
}

/// The target spec for the worktree's build: the spec file with its paths
/// inside the repository moved into the worktree, written where it sits in
/// the worktree when it is inside the repository (its relative paths then
/// name the worktree's files), else into the scratch directory (a spec
/// outside the repository names the build by absolute path), and loaded
/// after the build, when the executable it names exists.
fn worktree_spec(s: &BisectSettings, wt: &Path, scratch: &Path) -> Result<TargetSpec> {
    let text = std::fs::read_to_string(&s.target)
        .with_context(|| format!("--target {}", s.target.display()))?;
    let spec = std::fs::canonicalize(&s.target).unwrap_or_else(|_| s.target.clone());
    let at = match spec.strip_prefix(&s.repo) {
        Ok(rel) => wt.join(rel),
        Err(_) => scratch.join("target.toml"),
    };
    if let Some(d) = at.parent() {
        std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
    }
    std::fs::write(&at, rebase_paths(&text, &s.repo, wt))
        .with_context(|| format!("writing {}", at.display()))?;
    TargetSpec::load(&at)
        .with_context(|| format!("--target {} in the worktree", s.target.display()))
}

/// The readings of `counter` in a finished run directory, one per round
/// (a name of `rig compare`'s; a per-site counter absent from a window is
/// 0 there).
fn counter_values(dir: &Path, counter: &str) -> Result<Vec<f64>> {
    let readings = crate::compare::read_dir(dir)?;
    let r = &readings[0];
    let rounds: Vec<&crate::compare::read::Round> =
        r.cases.values().flat_map(|c| &c.rounds).collect();
    if rounds.is_empty() {
        bail!("{}: the window measured nothing", dir.display());
    }
    let mut values = Vec::new();
    for round in &rounds {
        match round.values.get(counter) {
            Some(m) => values.push(m.value),
            None if counter.contains(" @ ") || counter.starts_with("syscall ") => values.push(0.0),
            None => {
                let names: Vec<&str> = round
                    .values
                    .iter()
                    .filter(|(_, m)| m.family.is_none())
                    .map(|(n, _)| n.as_str())
                    .collect();
                crate::refuse!(
                    "--counter {counter}: not measured (probes: check --probes); totals measured: {}",
                    names.join(", ")
                )
            }
        }
    }
    Ok(values)
}

/// The functions of the build a finished run directory ran: its
/// executable's and those of the shared objects of its own build.
fn functions_of(dir: &Path) -> Result<Vec<crate::funchash::FunctionHash>, String> {
    let readings = crate::compare::read_dir(dir).map_err(|e| e.to_string())?;
    let r = readings.first().ok_or("no reading")?;
    let exe = r.exe.as_ref().ok_or("the run named no executable")?;
    crate::funchash::hash_build(exe, &r.modules).map_err(|e| e.to_string())
}

/// The name of per-site counter `counter` (`KIND @ FUNCTION`) in a build
/// whose functions are `now`, when its function is renamed there from
/// an earlier build's (`good`: the same code under another name); `None`
/// when it is not a per-site counter or its function kept its name.
pub fn renamed_counter(
    counter: &str,
    good: &[crate::funchash::FunctionHash],
    now: &[crate::funchash::FunctionHash],
) -> Option<String> {
    use crate::funchash::split_key;
    let (kind, f) = counter.split_once(" @ ")?;
    let d = crate::funchash::diff(good, now);
    // A site names its function without its module.
    let (_, new) = d.renamed.iter().find(|(old, _)| split_key(old).1 == f)?;
    Some(format!("{kind} @ {}", split_key(new).1))
}

/// Which end of the bisection a commit's reading is like.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    Good,
    Bad,
    /// A timing reading inside neither end's band.
    Ambiguous,
}

/// The two ends' readings (medians) and the band a reading may stray from
/// each: for an exact counter 0, and any value other than good's is bad.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Ends {
    pub kind: Kind,
    /// Relative, as `rig compare`'s (`series::band`).
    pub band: f64,
    pub good: f64,
    pub bad: f64,
}

/// Why good and bad cannot be bisected.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum NotApart {
    /// The same value (an exact counter), or medians inside the band.
    Inside { band: f64 },
    /// A timing metric read once at an end: nothing says how far it
    /// moves by itself.
    NoBand,
}

impl Ends {
    /// The ends of `good`'s and `bad`'s readings (one per repeat each).
    /// A timing metric's band comes from the spread of each end's repeats
    /// (`series::band`, as `rig compare` computes a band from the readings
    /// of identical builds); good and bad must differ by more than it.
    pub fn new(kind: Kind, good: &[f64], bad: &[f64]) -> Result<Ends, NotApart> {
        let median = |v: &[f64]| crate::stats::median(v).unwrap_or(f64::NAN);
        let (g, b) = (median(good), median(bad));
        let band = series::band(kind, &[good.to_vec(), bad.to_vec()]).ok_or(NotApart::NoBand)?;
        if !series::moved(kind, band, g, b) {
            return Err(NotApart::Inside { band });
        }
        Ok(Ends {
            kind,
            band,
            good: g,
            bad: b,
        })
    }

    /// Is a commit whose reading (median) is `v` like good, like bad, or
    /// like neither? Exact: good only when equal to good. Timing: inside
    /// one end's band only, that end; inside both (the bands overlap
    /// between two close ends), the nearer; inside neither, ambiguous.
    pub fn classify(&self, v: f64) -> Side {
        let near_good = !series::moved(self.kind, self.band, self.good, v);
        if self.kind == Kind::Exact {
            return if near_good { Side::Good } else { Side::Bad };
        }
        let near_bad = !series::moved(self.kind, self.band, self.bad, v);
        match (near_good, near_bad) {
            (true, false) => Side::Good,
            (false, true) => Side::Bad,
            (true, true) if (v - self.good).abs() <= (v - self.bad).abs() => Side::Good,
            (true, true) => Side::Bad,
            (false, false) => Side::Ambiguous,
        }
    }

    /// About how far a reading may stray from `level`, in its unit (the
    /// half width `series::moved` allows is the band of the mean of the
    /// two values compared).
    pub fn reach(&self, level: f64) -> f64 {
        self.band * level.abs()
    }
}

/// Where [`search`] stopped, as indexes of the ancestry path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// `first` is bad-like and `parent` (its predecessor on the path)
    /// good-like.
    Found { parent: usize, first: usize },
    /// `at` is like neither end; the step is in `lo..=hi` (`lo` good-like,
    /// `hi` bad-like), the interval known when `at` was met.
    Ambiguous { at: usize, lo: usize, hi: usize },
}

/// Binary search of a path of `len` commits whose first is good-like and
/// last bad-like: `side(i, lo)` measures and classifies commit `i`; `lo`
/// is the nearest commit before it already measured (good-like).
pub fn search(len: usize, mut side: impl FnMut(usize, usize) -> Result<Side>) -> Result<Outcome> {
    let (mut lo, mut hi) = (0, len - 1);
    while hi - lo > 1 {
        let mid = (lo + hi) / 2;
        match side(mid, lo)? {
            Side::Good => lo = mid,
            Side::Bad => hi = mid,
            Side::Ambiguous => return Ok(Outcome::Ambiguous { at: mid, lo, hi }),
        }
    }
    Ok(Outcome::Found {
        parent: lo,
        first: hi,
    })
}

const MATRIX: &str = r#"[defaults]
warmup_ms = 100
duration_ms = 100
settle_ms = 50
counted_requests = REQUESTS

[[suite]]
name = "bisect"
kind = "http"
protocols = ["h1"]
paths = ["PATH"]
topologies = ["1"]
"#;

struct Session<'a> {
    s: &'a BisectSettings,
    wt: Worktree,
    scratch: PathBuf,
    matrix: PathBuf,
    /// The clean pass measures the counter (a timing total), not the
    /// counted one.
    clean: bool,
    stop: &'a AtomicBool,
}

impl Session<'_> {
    /// Build and measure `commit`; a per-site counter is read under the
    /// name its function has there, followed from `before` (a commit
    /// measured earlier on the path: its name, its functions).
    fn measure(&self, commit: &str, before: Option<&Measured>) -> Result<Measured> {
        let short = &commit[..12];
        let subject = git(&self.s.repo, &["log", "-1", "--format=%s", commit]).unwrap_or_default();
        self.wt.checkout(commit)?;
        let out = Command::new("sh")
            .arg("-c")
            .arg(&self.s.build)
            .current_dir(&self.wt.path)
            .output()
            .with_context(|| format!("running --build {:?}", self.s.build))?;
        if !out.status.success() {
            bail!(
                "--build {:?} failed at {short} ({subject}): {}",
                self.s.build,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        let spec = worktree_spec(self.s, &self.wt.path, &self.scratch)?;
        let dir = self.scratch.join("runs").join(short);
        let passes = if self.clean { "clean" } else { "counted" };
        let rs = crate::run::RunSettings {
            targets: vec![(spec, None)],
            matrix_path: self.matrix.clone(),
            matrix: crate::scenario::Matrix::load(&self.matrix)?,
            suites: Vec::new(),
            out: dir.clone(),
            families: if self.clean {
                Vec::new()
            } else {
                self.s.families.clone()
            },
            passes: crate::run::Passes::parse(passes).map_err(anyhow::Error::msg)?,
            repeats: Some(self.s.repeats),
            server_cpus: None,
            client_cpus: None,
            memory_mib: None,
            cpu_quota: None,
            argv: self.s.argv.clone(),
            verify_arms: false,
            spin: None,
        };
        let results = crate::run::run(&rs, self.stop)?;
        if self.stop.load(Ordering::Relaxed) {
            bail!("interrupted");
        }
        if let Some(r) = results.iter().find(|r| !r.status.measured()) {
            bail!(
                "the {passes} window at {short} ({subject}) did not measure: {}",
                r.reasons.join("; ")
            );
        }
        // Now: the next commit rebuilds the worktree's files.
        let functions = functions_of(&dir);
        let counter = followed(&self.s.counter, before, functions.as_deref().ok());
        let values = counter_values(&dir, &counter)?;
        Ok(Measured {
            dir,
            functions,
            commit: commit.to_string(),
            subject,
            value: crate::stats::median(&values).unwrap_or(f64::NAN),
            values,
            counter,
        })
    }
}

/// The evidence line of one commit: its id, its reading (the median of
/// its repeats, then every repeat), how it was classified, its subject.
fn evidence(m: &Measured, counter: &str, side: Option<Side>) -> String {
    let repeats = if m.values.len() > 1 {
        format!(
            "  ({})",
            m.values
                .iter()
                .map(|v| num(*v))
                .collect::<Vec<_>>()
                .join(", ")
        )
    } else {
        String::new()
    };
    let side = match side {
        Some(Side::Good) => "  good-like",
        Some(Side::Bad) => "  bad-like",
        Some(Side::Ambiguous) => "  ambiguous",
        None => "",
    };
    let name = match m.counter.split_once(" @ ") {
        Some((_, f)) if m.counter != counter => format!("  (at {f}, renamed)"),
        _ => String::new(),
    };
    format!(
        "  {}  {:>10}{repeats}{side}{name}  {}",
        &m.commit[..12],
        num(m.value),
        m.subject
    )
}

/// What the bisection found.
pub struct Found {
    pub good: Measured,
    pub bad: Measured,
    pub ends: Ends,
    /// Builds measured, good and bad included.
    pub measured: usize,
    pub end: End,
}

/// How the bisection ended.
pub enum End {
    /// The first commit whose counter is like bad's, and its parent on
    /// the path (the last like good's).
    First {
        first: Measured,
        parent: Measured,
        /// The functions of `first`'s build against `parent`'s, or why
        /// not.
        functions: Result<crate::funchash::FunctionDiff, String>,
        /// For a per-site counter: whether `first` changed a line of its
        /// function (under any name it had, in a file followed through
        /// renames).
        touched: Option<crate::compare::touched::Touched>,
    },
    /// A commit like neither end: the bisection stops with the interval
    /// it had, `lo` (good-like) to `hi` (bad-like), and the commits after
    /// `lo` up to `hi` (`short subject`), oldest first.
    Ambiguous {
        at: Measured,
        lo: Measured,
        hi: Measured,
        commits: Vec<String>,
    },
}

/// The first `path = "..."` of an `[[endpoints]]` table of the spec
/// (read before the build, when the spec cannot be loaded yet).
fn endpoint_of(spec: &Path) -> String {
    let text = std::fs::read_to_string(spec).unwrap_or_default();
    let v: toml::Value = toml::from_str(&text).unwrap_or(toml::Value::Integer(0));
    v.get("endpoints")
        .and_then(|e| {
            e.as_array()?
                .first()?
                .get("path")?
                .as_str()
                .map(str::to_string)
        })
        .unwrap_or_else(|| "/".to_string())
}

pub fn bisect(s: &BisectSettings, stop: &AtomicBool) -> Result<Found> {
    let (kind, clean) = crate::compare::read::kind_of(&s.counter);
    let good = resolve(&s.repo, "--good", &s.good)?;
    let bad = resolve(&s.repo, "--bad", &s.bad)?;
    if git(&s.repo, &["merge-base", "--is-ancestor", &good, &bad]).is_none() {
        crate::refuse!(
            "--good {} is not an ancestor of --bad {}: give a good commit the bad one descends from",
            s.good,
            s.bad
        );
    }
    let path = git(
        &s.repo,
        &[
            "rev-list",
            "--reverse",
            "--ancestry-path",
            &format!("{good}..{bad}"),
        ],
    )
    .unwrap_or_default();
    let path: Vec<String> = std::iter::once(good.clone())
        .chain(path.lines().map(str::to_string))
        .collect();
    if path.len() < 2 {
        crate::refuse!("--good and --bad are the same commit; give two commits");
    }
    let scratch = tempfile::Builder::new()
        .prefix("rig-bisect-")
        .tempdir()
        .context("creating the bisection's temporary directory")?;
    let endpoint = endpoint_of(&s.target);
    let matrix = match &s.matrix {
        Some(m) => m.clone(),
        None => {
            let m = scratch.path().join("matrix.toml");
            let text = MATRIX
                .replace("REQUESTS", &s.requests.to_string())
                .replace("PATH", &endpoint);
            std::fs::write(&m, text).context("writing the bisection's matrix")?;
            m
        }
    };
    let wt = Worktree::add(&s.repo, &scratch.path().join("worktree"), &good)?;
    let session = Session {
        s,
        wt,
        scratch: scratch.path().to_path_buf(),
        matrix,
        clean,
        stop,
    };
    crate::outln!(
        "rig bisect: {} commits from {} (good) to {} (bad), counter `{}`{}",
        path.len(),
        &good[..12],
        &bad[..12],
        s.counter,
        match kind {
            Kind::Exact => String::new(),
            Kind::Timing => format!(
                " (timing: median of {} clean windows per commit)",
                s.repeats
            ),
        }
    );
    let mut m: Vec<Option<Measured>> = vec![None; path.len()];
    let last = path.len() - 1;
    for i in [0, last] {
        let v = session.measure(&path[i], m[0].as_ref())?;
        crate::outln!("{}", evidence(&v, &s.counter, None));
        m[i] = Some(v);
    }
    let g = m[0].clone().unwrap();
    let b = m[last].clone().unwrap();
    let ends = match Ends::new(kind, &g.values, &b.values) {
        Ok(e) => e,
        Err(NotApart::Inside { .. }) if kind == Kind::Exact => bail!(
            "`{}` is {} at both --good {} and --bad {}: it did not move, nothing to bisect",
            s.counter,
            num(g.value),
            &good[..12],
            &bad[..12]
        ),
        Err(NotApart::Inside { band }) => crate::refuse!(
            "`{}`: --good {} reads {} and --bad {} reads {} (medians of {} repeats), {:.1}% apart, \
             not more than the noise band of their repeats ({:.1}%): good and bad are not told \
             apart, nothing to bisect; give more --repeats, a --matrix with longer windows, or \
             commits further apart",
            s.counter,
            &good[..12],
            num(g.value),
            &bad[..12],
            num(b.value),
            s.repeats,
            100.0 * (b.value - g.value).abs() / ((g.value.abs() + b.value.abs()) / 2.0),
            100.0 * band
        ),
        Err(NotApart::NoBand) => crate::refuse!(
            "--repeats {}: `{}` is a timing metric; its band comes from the repeats of each end, \
             give --repeats 2 or more",
            s.repeats,
            s.counter
        ),
    };
    if kind == Kind::Timing {
        crate::outln!(
            "  band ±{:.1}% (from the repeats of good and bad): good-like {} ± {}, bad-like {} ± {}",
            100.0 * ends.band,
            num(ends.good),
            num(ends.reach(ends.good)),
            num(ends.bad),
            num(ends.reach(ends.bad))
        );
    }
    let mut measured = 2;
    let outcome = search(path.len(), |mid, lo| {
        let v = session.measure(&path[mid], m[lo].as_ref())?;
        measured += 1;
        let side = ends.classify(v.value);
        crate::outln!("{}", evidence(&v, &s.counter, Some(side)));
        m[mid] = Some(v);
        Ok(side)
    })?;
    // Bad was read with its function's name followed from good alone; a
    // rename that came with a change (so the hashes do not pair the two
    // names) shows only step by step, through the commits measured since.
    if let Some(pred) = (1..last).rev().find(|i| m[*i].is_some()) {
        let bad = m[last].as_ref().unwrap();
        let name = followed(&s.counter, m[pred].as_ref(), bad.functions.as_deref().ok());
        if name != bad.counter {
            let values = counter_values(&bad.dir, &name)?;
            let bad = m[last].as_mut().unwrap();
            bad.value = crate::stats::median(&values).unwrap_or(f64::NAN);
            bad.values = values;
            bad.counter = name;
            crate::outln!(
                "{}  (bad, read again: its function followed through the commits measured)",
                evidence(bad, &s.counter, None)
            );
        }
    }
    let b = m[last].clone().unwrap();
    let end = match outcome {
        Outcome::Found { parent, first } => {
            let (parent, first) = (m[parent].clone().unwrap(), m[first].clone().unwrap());
            let functions = match (&parent.functions, &first.functions) {
                (Ok(a), Ok(b)) => Ok(crate::funchash::diff(a, b)),
                (Err(e), _) | (_, Err(e)) => Err(e.clone()),
            };
            let touched = crate::compare::read::site_function(&s.counter).map(|f| {
                let mut names = vec![f.to_string()];
                for m in [&parent, &first] {
                    if let Some(g) = crate::compare::read::site_function(&m.counter) {
                        if !names.iter().any(|n| n == g) {
                            names.push(g.to_string());
                        }
                    }
                }
                let line = git(&s.repo, &["log", "-1", "--format=%h %s", &first.commit])
                    .unwrap_or_else(|| first.commit.clone());
                crate::compare::touched::touched(
                    &s.repo,
                    &[crate::compare::touched::Commit {
                        id: first.commit.clone(),
                        line,
                    }],
                    f,
                    &names,
                    &Default::default(),
                )
            });
            End::First {
                first,
                parent,
                functions,
                touched,
            }
        }
        Outcome::Ambiguous { at, lo, hi } => End::Ambiguous {
            commits: path[lo + 1..=hi]
                .iter()
                .map(|c| {
                    git(&s.repo, &["log", "-1", "--format=%h %s", c]).unwrap_or_else(|| c.clone())
                })
                .collect(),
            at: m[at].clone().unwrap(),
            lo: m[lo].clone().unwrap(),
            hi: m[hi].clone().unwrap(),
        },
    };
    Ok(Found {
        good: g,
        bad: b,
        ends,
        measured,
        end,
    })
}

pub fn command(s: &BisectSettings, stop: &AtomicBool) -> Result<i32> {
    let f = match bisect(s, stop) {
        Ok(f) => f,
        // The worktree is already removed (dropped with the session).
        Err(_) if stop.load(Ordering::Relaxed) => {
            crate::errln!("rig bisect: interrupted; no commit found");
            return Ok(crate::exit::INTERRUPTED);
        }
        Err(e) => return Err(e),
    };
    let (p, c, functions, touched) = match &f.end {
        End::First {
            first,
            parent,
            functions,
            touched,
        } => (parent, first, functions, touched),
        End::Ambiguous {
            at,
            lo,
            hi,
            commits,
        } => {
            crate::outln!(
                "ambiguous: `{}` at {} {} reads {}, inside neither band (good-like {} ± {}, \
                 bad-like {} ± {}); stopped after {} builds",
                s.counter,
                &at.commit[..12],
                at.subject,
                num(at.value),
                num(f.ends.good),
                num(f.ends.reach(f.ends.good)),
                num(f.ends.bad),
                num(f.ends.reach(f.ends.bad)),
                f.measured
            );
            crate::outln!(
                "interval: after {} {} (good-like, {}) up to {} {} (bad-like, {}): {} commits",
                &lo.commit[..12],
                lo.subject,
                num(lo.value),
                &hi.commit[..12],
                hi.subject,
                num(hi.value),
                commits.len()
            );
            for l in commits {
                crate::outln!("  {l}");
            }
            return Ok(crate::exit::UNDECIDED);
        }
    };
    crate::outln!(
        "first commit where `{}` moved: {} {}",
        s.counter,
        &c.commit[..12],
        c.subject
    );
    crate::outln!(
        "  {} → {} ({}{}) against {} {} ({} builds measured)",
        num(p.value),
        num(c.value),
        if c.value >= p.value { "+" } else { "" },
        num(c.value - p.value),
        &p.commit[..12],
        p.subject,
        f.measured
    );
    if let Some(stat) = git(&s.repo, &["show", "--stat", "--format=", &c.commit]) {
        for l in stat.lines() {
            crate::outln!("  {}", l.trim());
        }
    }
    match functions {
        Ok(d) => crate::outln!(
            "  functions: {} identical; changed: {}; added: {}; removed: {}; renamed: {}",
            d.identical,
            list(&d.changed),
            list(&d.added),
            list(&d.removed),
            list(
                &d.renamed
                    .iter()
                    .map(|(o, n)| format!("{o} → {n}"))
                    .collect::<Vec<_>>()
            )
        ),
        Err(e) => crate::outln!("  functions: not hashed: {e}"),
    }
    if let Some(t) = touched {
        crate::outln!("  {}", t.message);
    }
    Ok(crate::exit::OK)
}

fn list(v: &[String]) -> String {
    if v.is_empty() {
        "none".to_string()
    } else {
        v.join(", ")
    }
}

fn num(v: f64) -> String {
    if v == v.round() {
        format!("{v:.0}")
    } else {
        format!("{v:.3}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Five repeats at good (median 1000, sample sd √62.5 = 7.906, 0.79%
    /// of the median) and at bad (median 800, sd √14.5 = 3.808, 0.48%):
    /// the band is compare's, 3·√2·0.79% = 3.354%.
    fn timing_ends() -> Ends {
        let good = [1000.0, 1010.0, 990.0, 1005.0, 995.0];
        let bad = [800.0, 805.0, 795.0, 802.0, 798.0];
        Ends::new(Kind::Timing, &good, &bad).unwrap()
    }

    #[test]
    fn the_timing_band_is_compares_band_of_the_two_ends_repeats() {
        let e = timing_ends();
        assert_eq!((e.good, e.bad), (1000.0, 800.0));
        let s = 62.5f64.sqrt() / 1000.0;
        assert!((e.band - 3.0 * 2f64.sqrt() * s).abs() < 1e-12, "{e:?}");
        assert!((e.band - 0.033541).abs() < 1e-6, "{e:?}");
    }

    #[test]
    fn a_timing_reading_is_like_the_end_whose_band_it_is_inside() {
        let e = timing_ends();
        // 990: 10 from good, inside its 3.354% (33.4 at 995); 190 from bad.
        assert_eq!(e.classify(990.0), Side::Good);
        assert_eq!(e.classify(1000.0), Side::Good);
        assert_eq!(e.classify(810.0), Side::Bad);
        assert_eq!(e.classify(800.0), Side::Bad);
        // 900: 100 from each, outside both bands (31.9 and 28.5).
        assert_eq!(e.classify(900.0), Side::Ambiguous);
        // Faster than good by more than the band: like neither.
        assert_eq!(e.classify(1100.0), Side::Ambiguous);
    }

    #[test]
    fn a_timing_reading_inside_both_bands_goes_to_the_nearer_end() {
        // Good 100 (sd 1), bad 106 (sd 1): band 3·√2·1% = 4.243%, 6 apart
        // is more than 4.243% of 103 = 4.37, so they are told apart.
        let e = Ends::new(Kind::Timing, &[100.0, 101.0, 99.0], &[106.0, 107.0, 105.0]).unwrap();
        assert!((e.band - 0.042426).abs() < 1e-6, "{e:?}");
        // 103.5: 3.5 from good (its band there: 4.32) and 2.5 from bad
        // (4.43): inside both, nearer bad.
        assert_eq!(e.classify(103.5), Side::Bad);
        // 103: 3 from each: a tie stays good.
        assert_eq!(e.classify(103.0), Side::Good);
        assert_eq!(e.classify(102.0), Side::Good);
    }

    #[test]
    fn ends_not_apart_by_more_than_the_band_are_refused() {
        // Good 100 (sd 1), bad 104: 4 apart, the band is 4.33 at 102.
        assert_eq!(
            Ends::new(Kind::Timing, &[100.0, 101.0, 99.0], &[104.0, 105.0, 103.0]),
            Err(NotApart::Inside {
                band: 3.0 * 2f64.sqrt() * 0.01
            })
        );
        // One reading per end: no band.
        assert_eq!(
            Ends::new(Kind::Timing, &[100.0], &[200.0]),
            Err(NotApart::NoBand)
        );
        assert_eq!(
            Ends::new(Kind::Exact, &[8.0], &[8.0]),
            Err(NotApart::Inside { band: 0.0 })
        );
    }

    #[test]
    fn an_exact_counter_is_good_only_at_goods_value() {
        let e = Ends::new(Kind::Exact, &[8.0], &[9.0]).unwrap();
        assert_eq!(e.band, 0.0);
        assert_eq!(e.classify(8.0), Side::Good);
        assert_eq!(e.classify(9.0), Side::Bad);
        assert_eq!(e.classify(10.0), Side::Bad, "moved from good: not good");
    }

    /// [`search`] over commits whose medians are `readings`, classified by
    /// `timing_ends`: where it ended and the commits it measured.
    fn run_search(readings: &[f64]) -> (Outcome, Vec<usize>) {
        let e = timing_ends();
        let mut asked = Vec::new();
        let o = search(readings.len(), |i, _| {
            asked.push(i);
            Ok(e.classify(readings[i]))
        })
        .unwrap();
        (o, asked)
    }

    #[test]
    fn bisection_ends_at_the_first_bad_like_commit() {
        let r = [
            1000.0, 1001.0, 998.0, 1003.0, 801.0, 799.0, 800.0, 802.0, 800.0,
        ];
        let (o, asked) = run_search(&r);
        assert_eq!(
            o,
            Outcome::Found {
                parent: 3,
                first: 4
            }
        );
        assert_eq!(asked, vec![4, 2, 3]);
    }

    #[test]
    fn bisection_stops_at_an_ambiguous_commit_with_the_interval_it_has() {
        let r = [
            1000.0, 1001.0, 998.0, 900.0, 801.0, 799.0, 800.0, 802.0, 800.0,
        ];
        let (o, asked) = run_search(&r);
        assert_eq!(
            o,
            Outcome::Ambiguous {
                at: 3,
                lo: 2,
                hi: 4
            }
        );
        assert_eq!(asked, vec![4, 2, 3]);
        // Two commits: nothing to measure between them.
        let (o, asked) = run_search(&[1000.0, 800.0]);
        assert_eq!(
            o,
            Outcome::Found {
                parent: 0,
                first: 1
            }
        );
        assert!(asked.is_empty());
    }

    #[test]
    fn a_site_counter_follows_its_function_renamed_since_good() {
        let f = |name: &str, hash: &str| crate::funchash::FunctionHash {
            module: None,
            name: name.into(),
            addr: 0,
            size: 1,
            hash: hash.into(),
        };
        let good = [f("calib_alloc_small", "1"), f("calib_request", "2")];
        let renamed = [f("calib_alloc_three", "1"), f("calib_request", "2")];
        assert_eq!(
            renamed_counter("malloc calls @ calib_alloc_small", &good, &renamed),
            Some("malloc calls @ calib_alloc_three".to_string())
        );
        // Renamed and changed: not the same function, not followed.
        let changed = [f("calib_alloc_three", "9"), f("calib_request", "2")];
        assert_eq!(
            renamed_counter("malloc calls @ calib_alloc_small", &good, &changed),
            None
        );
        assert_eq!(renamed_counter("allocs/req", &good, &renamed), None);
        // In a shared object of the build: keyed by its module, named
        // by the site without it.
        let lib = |name: &str, hash: &str| crate::funchash::FunctionHash {
            module: Some("libwork.so".into()),
            ..f(name, hash)
        };
        assert_eq!(
            renamed_counter(
                "malloc calls @ work_alloc",
                &[lib("work_alloc", "3")],
                &[lib("work_alloc_three", "3")]
            ),
            Some("malloc calls @ work_alloc_three".to_string())
        );
    }

    #[test]
    fn paths_inside_the_repository_move_into_the_worktree() {
        let text = r#"argv = ["/src/app/build/server", "--root", "/src/application", "/src/app"]"#;
        assert_eq!(
            rebase_paths(text, Path::new("/src/app"), Path::new("/tmp/wt")),
            r#"argv = ["/tmp/wt/build/server", "--root", "/src/application", "/tmp/wt"]"#
        );
    }
}
