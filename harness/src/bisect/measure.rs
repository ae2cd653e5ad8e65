//! Measuring one commit: `rig run` of one case in the worktree, the
//! counter read back from its output directory, a per-site counter's
//! function followed through renames.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{bail, Context, Result};

use super::*;

/// The name of `counter` (as given) in a build whose functions are `now`,
/// followed from the build measured `before` it on the path: its name
/// there, renamed when the function is renamed between the two builds.
pub(super) fn followed(
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

/// The readings of `counter` in a finished run directory, one per round
/// (a name of `rig compare`'s; a per-site counter absent from a window is
/// 0 there).
pub(super) fn counter_values(dir: &Path, counter: &str) -> Result<Vec<f64>> {
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
pub(super) fn functions_of(dir: &Path) -> Result<Vec<crate::funchash::FunctionHash>, String> {
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

pub(super) const MATRIX: &str = r#"[defaults]
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

pub(super) struct Session<'a> {
    pub(super) s: &'a BisectSettings,
    pub(super) wt: Worktree,
    pub(super) scratch: PathBuf,
    pub(super) matrix: PathBuf,
    /// The clean pass measures the counter (a timing total), not the
    /// counted one.
    pub(super) clean: bool,
    pub(super) stop: &'a AtomicBool,
}

impl Session<'_> {
    /// Build and measure `commit`; a per-site counter is read under the
    /// name its function has there, followed from `before` (a commit
    /// measured earlier on the path: its name, its functions).
    pub(super) fn measure(&self, commit: &str, before: Option<&Measured>) -> Result<Measured> {
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
pub(super) fn evidence(m: &Measured, counter: &str, side: Option<Side>) -> String {
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
