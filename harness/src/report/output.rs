//! The run's output directory: results survive failure (a long run that
//! dies in its last case keeps every case before it).
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

/// Version of the `manifest.json` layout.
pub const MANIFEST_SCHEMA_VERSION: u32 = 1;

/// What every `manifest.json` starts with; the command's own fields follow.
#[derive(Serialize)]
struct Manifest<'a, T: Serialize> {
    schema_version: u32,
    rig_version: &'static str,
    started_unix_s: u64,
    argv: &'a [String],
    host: crate::host::HostFacts,
    #[serde(flatten)]
    command: &'a T,
}

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
        let written = (|| -> std::io::Result<()> {
            // Buffered: the serializer writes a token at a time, and a
            // report of 2000 cases is hundreds of thousands of tokens.
            let mut w = std::io::BufWriter::with_capacity(1 << 16, &mut f);
            serde_json::to_writer_pretty(&mut w, value)?;
            w.write_all(b"\n")?;
            w.flush()?;
            drop(w);
            f.sync_all()?;
            std::fs::rename(&tmp, &path)
        })();
        if let Err(e) = written {
            // A full disk: the previous version stays, no half file is left.
            let _ = std::fs::remove_file(&tmp);
            return Err(e).with_context(|| format!("writing {}", path.display()));
        }
        Ok(())
    }

    /// `manifest.json` of `rig run`, `rig ab` and `rig gate`: schema and rig
    /// version, start time, argv and host facts, then `command`'s fields
    /// (a struct or a JSON object).
    pub fn write_manifest<T: Serialize>(&self, argv: &[String], command: &T) -> Result<()> {
        let m = Manifest {
            schema_version: MANIFEST_SCHEMA_VERSION,
            rig_version: env!("CARGO_PKG_VERSION"),
            started_unix_s: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            argv,
            host: crate::host::HostFacts::gather(),
            command,
        };
        self.write_json("manifest.json", &m)
    }

    /// Append one finished case as one JSON line.
    pub fn append_case<T: Serialize>(&mut self, case: &T) -> Result<()> {
        self.append_cases(std::slice::from_ref(case))
    }

    /// Append cases as JSON lines, in one write and one sync (the cases
    /// an interrupted run skips, all at once).
    pub fn append_cases<T: Serialize>(&mut self, cases: &[T]) -> Result<()> {
        let mut lines = Vec::new();
        for c in cases {
            serde_json::to_writer(&mut lines, c)?;
            lines.push(b'\n');
        }
        let before = self.cases.metadata()?.len();
        if let Err(e) = self
            .cases
            .write_all(&lines)
            .and_then(|()| self.cases.sync_data())
        {
            // Lines that did not fit (a full disk) are taken back whole:
            // every line of cases.jsonl stays one complete JSON value.
            let _ = self.cases.set_len(before);
            return Err(e)
                .with_context(|| format!("appending to {}/cases.jsonl", self.dir.display()));
        }
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

    #[test]
    fn every_manifest_has_the_same_head_then_the_commands_fields() {
        let base = std::env::temp_dir().join(format!("rig-manifest-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let out = OutDir::create(&base).unwrap();
        let argv = vec!["rig".to_string(), "gate".to_string()];
        out.write_manifest(&argv, &serde_json::json!({"baseline": "b.toml"}))
            .unwrap();
        let text = std::fs::read_to_string(base.join("manifest.json")).unwrap();
        let m: serde_json::Value = serde_json::from_str(&text).unwrap();
        let keys: Vec<&str> = m.as_object().unwrap().keys().map(|k| k.as_str()).collect();
        assert_eq!(
            keys,
            [
                "argv",
                "baseline",
                "host",
                "rig_version",
                "schema_version",
                "started_unix_s"
            ]
        );
        assert_eq!(m["schema_version"], MANIFEST_SCHEMA_VERSION);
        assert_eq!(m["argv"], serde_json::json!(["rig", "gate"]));
        assert_eq!(m["baseline"], "b.toml");
        assert!(
            text.find("\"schema_version\"").unwrap() < text.find("\"baseline\"").unwrap(),
            "the head comes first: {text}"
        );
        std::fs::remove_dir_all(&base).unwrap();
    }
}
