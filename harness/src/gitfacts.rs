//! The git commit a file was built from, when it lives in a git work tree.
//!
//! In: a path (a target's executable). Out: [`GitFacts`] (work tree, commit,
//! `git describe`, dirty), or `None` when the file is not inside a work tree
//! or git is not installed. `rig run` writes them into the manifest, so a
//! series of result directories (`rig compare`) names its builds by commit.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GitFacts {
    /// The work tree's top directory.
    pub work_tree: PathBuf,
    /// The full commit id of HEAD.
    pub commit: String,
    /// `git describe --always --dirty --tags`: `v1.2-3-gabc1234`, or the
    /// short id when there is no tag.
    pub describe: String,
    /// Tracked files differ from HEAD: the build may not be the commit's.
    pub dirty: bool,
    /// HEAD's subject line.
    pub subject: String,
}

/// `git -C dir ARGS`, its stdout trimmed, or `None` when it fails.
pub fn git(dir: &Path, args: &[&str]) -> Option<String> {
    git_output(dir, args).map(|s| s.trim().to_string())
}

/// `git -C dir ARGS`, its stdout as it is (a file's text keeps its line
/// numbers), or `None` when it fails.
pub fn git_output(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_OPTIONAL_LOCKS", "0")
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The facts of the work tree `file` sits in (the directory itself when
/// `file` is one).
pub fn of(file: &Path) -> Option<GitFacts> {
    let dir = if file.is_dir() { file } else { file.parent()? };
    let work_tree = PathBuf::from(git(dir, &["rev-parse", "--show-toplevel"])?);
    let commit = git(dir, &["rev-parse", "HEAD"])?;
    let describe = git(dir, &["describe", "--always", "--dirty", "--tags"])?;
    let subject = git(dir, &["log", "-1", "--format=%s"]).unwrap_or_default();
    Some(GitFacts {
        work_tree,
        dirty: describe.ends_with("-dirty"),
        commit,
        describe,
        subject,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_outside_any_work_tree_has_no_facts() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("x");
        std::fs::write(&f, "x").unwrap();
        assert_eq!(of(&f), None);
    }

    #[test]
    fn a_file_in_a_work_tree_names_its_commit() {
        let d = tempfile::tempdir().unwrap();
        let g = |args: &[&str]| {
            let ok = Command::new("git")
                .arg("-C")
                .arg(d.path())
                .args(args)
                .output()
                .unwrap()
                .status
                .success();
            assert!(ok, "git {args:?}");
        };
        g(&["init", "-q"]);
        std::fs::write(d.path().join("a"), "a").unwrap();
        g(&["add", "a"]);
        g(&[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "commit",
            "-qm",
            "first",
        ]);
        let f = of(&d.path().join("a")).unwrap();
        assert_eq!(f.commit.len(), 40);
        assert!(f.commit.starts_with(&f.describe), "{f:?}");
        assert_eq!(f.subject, "first");
        assert!(!f.dirty);
        std::fs::write(d.path().join("a"), "b").unwrap();
        assert!(of(&d.path().join("a")).unwrap().dirty);
    }
}
