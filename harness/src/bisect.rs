//! `rig bisect`: the first commit where an exact counter moved.
//!
//! In: a git repository, a build command, a target spec, a good and a bad
//! commit and a counter (`allocs/req`, `syscalls/req`, `malloc calls @
//! FUNCTION`, as `rig compare` names them). Out: the first commit on the
//! ancestry path from good to bad whose counter differs from good's, with
//! the evidence: every commit measured and its value, the commit's files,
//! and the functions that changed between it and its parent.
//!
//! Commits are checked out into a temporary worktree of the repository
//! (`git worktree add --detach`, removed at the end), never into the
//! user's checkout. Paths of the spec inside the repository (argv, cwd,
//! env values, the spec's own directory) are moved into the worktree, so
//! the spec that runs the user's build runs each commit's. Each commit is
//! built, then measured by one counted window (`rig run --passes counted`
//! of one case): an exact counter needs no repeat.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{bail, Context, Result};

use crate::compare::series::Kind;
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
    pub argv: Vec<String>,
}

/// One commit built and measured.
#[derive(Clone, Debug)]
pub struct Measured {
    pub commit: String,
    pub subject: String,
    pub value: f64,
    /// The executable as built, kept for the function diff.
    pub exe: Option<PathBuf>,
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

/// The value of `counter` in a finished run directory: a name of `rig
/// compare`'s; a per-site counter absent from the window is 0 there.
fn counter_value(dir: &Path, counter: &str) -> Result<(f64, Option<PathBuf>)> {
    let readings = crate::compare::read_dir(dir)?;
    let r = &readings[0];
    let Some(round) = r.cases.values().find_map(|c| c.rounds.first()) else {
        bail!("{}: the counted window measured nothing", dir.display());
    };
    match round.values.get(counter) {
        Some(m) if m.kind == Kind::Timing => crate::refuse!(
            "--counter {counter}: a timing metric; rig bisect follows exact counters \
             (allocs/req, syscalls/req, `malloc calls @ FUNCTION`…), which one run per commit decides"
        ),
        Some(m) => Ok((m.value, r.exe.clone())),
        None if counter.contains(" @ ") || counter.starts_with("syscall ") => {
            Ok((0.0, r.exe.clone()))
        }
        None => {
            let names: Vec<&str> = round
                .values
                .iter()
                .filter(|(_, m)| m.kind == Kind::Exact && m.family.is_none())
                .map(|(n, _)| n.as_str())
                .collect();
            crate::refuse!(
                "--counter {counter}: not measured (probes: check --probes); totals measured: {}",
                names.join(", ")
            )
        }
    }
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
    stop: &'a AtomicBool,
}

impl Session<'_> {
    fn measure(&self, commit: &str) -> Result<Measured> {
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
        let rs = crate::run::RunSettings {
            targets: vec![(spec, None)],
            matrix_path: self.matrix.clone(),
            matrix: crate::scenario::Matrix::load(&self.matrix)?,
            suites: Vec::new(),
            out: dir.clone(),
            families: self.s.families.clone(),
            passes: crate::run::Passes::parse("counted").map_err(anyhow::Error::msg)?,
            repeats: Some(1),
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
                "the counted window at {short} ({subject}) did not measure: {}",
                r.reasons.join("; ")
            );
        }
        let (value, exe) = counter_value(&dir, &self.s.counter)?;
        // The worktree's executable is rebuilt by the next commit: keep it.
        let exe = exe.and_then(|e| {
            let kept = self.scratch.join("exe").join(short);
            std::fs::create_dir_all(kept.parent()?).ok()?;
            std::fs::copy(&e, &kept).ok()?;
            Some(kept)
        });
        crate::outln!("  {short}  {:>10}  {subject}", num(value));
        Ok(Measured {
            commit: commit.to_string(),
            subject,
            value,
            exe,
        })
    }
}

/// What the bisection found.
pub struct Found {
    pub good: Measured,
    pub bad: Measured,
    /// The first commit whose counter differs from good's, and its parent
    /// on the path (the last that does not).
    pub first: Measured,
    pub parent: Measured,
    pub measured: usize,
    /// The functions of `first`'s build against `parent`'s, or why not.
    pub functions: Result<crate::funchash::FunctionDiff, String>,
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
        stop,
    };
    crate::outln!(
        "rig bisect: {} commits from {} (good) to {} (bad), counter `{}`",
        path.len(),
        &good[..12],
        &bad[..12],
        s.counter
    );
    let mut m: Vec<Option<Measured>> = vec![None; path.len()];
    let last = path.len() - 1;
    m[0] = Some(session.measure(&path[0])?);
    m[last] = Some(session.measure(&path[last])?);
    let g = m[0].clone().unwrap();
    let b = m[last].clone().unwrap();
    if !crate::compare::series::moved(Kind::Exact, 0.0, g.value, b.value) {
        bail!(
            "`{}` is {} at both --good {} and --bad {}: it did not move, nothing to bisect",
            s.counter,
            num(g.value),
            &good[..12],
            &bad[..12]
        );
    }
    // Invariant: path[lo] has good's value, path[hi] does not.
    let (mut lo, mut hi) = (0, last);
    let mut measured = 2;
    while hi - lo > 1 {
        let mid = (lo + hi) / 2;
        let v = session.measure(&path[mid])?;
        measured += 1;
        let same = !crate::compare::series::moved(Kind::Exact, 0.0, g.value, v.value);
        m[mid] = Some(v);
        if same {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    let (parent, first) = (m[lo].clone().unwrap(), m[hi].clone().unwrap());
    // Before the scratch directory (which holds the kept executables) goes.
    let functions = match (&parent.exe, &first.exe) {
        (Some(a), Some(b)) => crate::funchash::hash_functions(a)
            .and_then(|ha| {
                Ok(crate::funchash::diff(
                    &ha,
                    &crate::funchash::hash_functions(b)?,
                ))
            })
            .map_err(|e| e.to_string()),
        _ => Err("the run named no executable".to_string()),
    };
    Ok(Found {
        first,
        parent,
        good: g,
        bad: b,
        measured,
        functions,
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
    let (p, c) = (&f.parent, &f.first);
    crate::outln!(
        "first commit where `{}` moved: {} {}",
        s.counter,
        &c.commit[..12],
        c.subject
    );
    crate::outln!(
        "  {} → {} ({:+}) against {} {} ({} builds measured)",
        num(p.value),
        num(c.value),
        c.value - p.value,
        &p.commit[..12],
        p.subject,
        f.measured
    );
    if let Some(stat) = git(&s.repo, &["show", "--stat", "--format=", &c.commit]) {
        for l in stat.lines() {
            crate::outln!("  {}", l.trim());
        }
    }
    match &f.functions {
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

    #[test]
    fn paths_inside_the_repository_move_into_the_worktree() {
        let text = r#"argv = ["/src/app/build/server", "--root", "/src/application", "/src/app"]"#;
        assert_eq!(
            rebase_paths(text, Path::new("/src/app"), Path::new("/tmp/wt")),
            r#"argv = ["/tmp/wt/build/server", "--root", "/src/application", "/tmp/wt"]"#
        );
    }
}
