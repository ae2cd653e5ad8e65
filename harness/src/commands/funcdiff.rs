//! `rig funcdiff A B`: which functions two builds of an ELF file add,
//! remove, change or rename (`funchash`), printed one per line and, with
//! `--json`, written as data.

use std::path::Path;

use serde::Serialize;

use crate::funchash::{diff, hash_functions, FunctionDiff};

/// `rig funcdiff A B`: the diff as data (its `--json`).
#[derive(Debug, Serialize)]
pub struct Funcdiff<'a> {
    pub a: &'a Path,
    pub b: &'a Path,
    #[serde(flatten)]
    pub diff: &'a FunctionDiff,
}

/// The lines `rig funcdiff` prints: one per function that differs, its
/// state first (`changed`, `added`, `removed`, `renamed OLD → NEW`), then
/// how many are identical.
pub fn render(a: &Path, b: &Path, d: &FunctionDiff) -> String {
    let mut out = format!("a: {}\nb: {}\n", a.display(), b.display());
    for (state, names) in [
        ("changed", &d.changed),
        ("added", &d.added),
        ("removed", &d.removed),
    ] {
        for n in names {
            out.push_str(&format!("{state:<8} {n}\n"));
        }
    }
    for (old, new) in &d.renamed {
        out.push_str(&format!("renamed  {old} → {new}\n"));
    }
    out.push_str(&format!("{} identical", d.identical));
    out
}

/// The command: hash both files, print the diff, write `--json`.
pub fn command(a: &Path, b: &Path, json: Option<&Path>) -> anyhow::Result<i32> {
    use anyhow::Context;
    let d = diff(&hash_functions(a)?, &hash_functions(b)?);
    crate::outln!("{}", render(a, b, &d));
    if let Some(p) = json {
        let mut text = serde_json::to_string_pretty(&Funcdiff { a, b, diff: &d })?;
        text.push('\n');
        crate::fsutil::write_new(p, text.as_bytes())
            .with_context(|| format!("writing {}", p.display()))?;
    }
    Ok(crate::exit::OK)
}
