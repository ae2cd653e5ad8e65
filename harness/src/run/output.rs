//! The run's output directory: results survive failure (lesson 16).
//!
//! The directory must be new. `manifest.json` is written before the first
//! case, `cases.jsonl` gets one line as each case finishes (flushed and
//! synced), and `report.json` is rewritten after every case, so an
//! interrupted or crashed run still leaves a report of what finished.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::Serialize;

pub struct OutDir {
    dir: PathBuf,
    cases: File,
}

impl OutDir {
    /// Create `dir`, which must not exist yet.
    pub fn create(dir: &Path) -> Result<OutDir> {
        if dir.exists() {
            bail!(
                "--out {}: already exists; rig writes every run to a new directory and never overwrites results",
                dir.display()
            );
        }
        if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        std::fs::create_dir(dir).with_context(|| format!("creating --out {}", dir.display()))?;
        let cases = OpenOptions::new()
            .create_new(true)
            .append(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(dir.join("cases.jsonl"))
            .with_context(|| format!("creating {}/cases.jsonl", dir.display()))?;
        Ok(OutDir {
            dir: dir.to_path_buf(),
            cases,
        })
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Write `name` atomically (temp file + rename): a reader never sees half
    /// a file, and a crash leaves the previous version.
    pub fn write_json<T: Serialize>(&self, name: &str, value: &T) -> Result<()> {
        let tmp = self.dir.join(format!(".{name}.tmp"));
        let path = self.dir.join(name);
        // A leftover temp file (a crash mid-write) is removed, not followed.
        let _ = std::fs::remove_file(&tmp);
        let mut f = crate::fsutil::create_new(&tmp)
            .with_context(|| format!("creating {}", tmp.display()))?;
        serde_json::to_writer_pretty(&mut f, value)
            .with_context(|| format!("writing {}", tmp.display()))?;
        f.write_all(b"\n")?;
        f.sync_all()?;
        std::fs::rename(&tmp, &path).with_context(|| format!("renaming to {}", path.display()))?;
        Ok(())
    }

    /// Append one finished case as one JSON line.
    pub fn append_case<T: Serialize>(&mut self, case: &T) -> Result<()> {
        let mut line = serde_json::to_vec(case)?;
        line.push(b'\n');
        self.cases.write_all(&line)?;
        self.cases.sync_data()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_an_existing_directory_and_appends_lines() {
        let base = std::env::temp_dir().join(format!("rig-out-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let mut out = OutDir::create(&base.join("run1")).unwrap();
        out.append_case(&serde_json::json!({"id": "a"})).unwrap();
        out.append_case(&serde_json::json!({"id": "b"})).unwrap();
        out.write_json("report.json", &serde_json::json!({"n": 2}))
            .unwrap();
        let lines = std::fs::read_to_string(base.join("run1/cases.jsonl")).unwrap();
        assert_eq!(lines, "{\"id\":\"a\"}\n{\"id\":\"b\"}\n");
        let err = OutDir::create(&base.join("run1"))
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("already exists"), "{err}");
        std::fs::remove_dir_all(&base).unwrap();
    }
}
