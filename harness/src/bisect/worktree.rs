//! A temporary worktree of the repository per bisection, and the target
//! spec moved into it.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

use super::BisectSettings;
use crate::gitfacts::git;
use crate::launch::spec::TargetSpec;

/// The repository's worktree for the bisection, removed on drop.
pub(super) struct Worktree {
    repo: PathBuf,
    pub(super) path: PathBuf,
}

impl Worktree {
    pub(super) fn add(repo: &Path, path: &Path, commit: &str) -> Result<Worktree> {
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

    pub(super) fn checkout(&self, commit: &str) -> Result<()> {
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

pub(super) fn resolve(repo: &Path, flag: &str, commit: &str) -> Result<String> {
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
pub(super) fn worktree_spec(s: &BisectSettings, wt: &Path, scratch: &Path) -> Result<TargetSpec> {
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
