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
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{bail, Context, Result};

use crate::compare::series::Kind;
use crate::gitfacts::git;
use crate::probe::Family;

mod measure;
mod search;
mod worktree;

pub use measure::renamed_counter;
use measure::*;
pub use search::{search, Ends, NotApart, Outcome, Side};
pub use worktree::rebase_paths;
use worktree::*;

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
mod tests;
