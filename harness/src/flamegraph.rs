//! `rig flame` and the flamegraphs of every output directory.
//!
//! In: recorded results (an attach JSON, a `cases.jsonl`) or an output
//! directory just written by `rig run`, `rig ab` or `rig gate`. Out: one
//! graph in one format (`rig flame`), or `flame/<case slug>/` files for
//! every counted case (and A→B differential graphs for `rig ab`), and the
//! lines `rig run` prints under its table: the top user sites of each
//! family per request, and where the flamegraphs are.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::report::flame::{input, outdir, sites, write};
use crate::report::Attribution;

/// What `rig flame` renders.
#[derive(Clone, Debug)]
pub struct FlameSettings {
    pub file: PathBuf,
    pub case: Option<String>,
    /// A graph name: a family (`alloc`, `cpu`, ...) or one of its other
    /// measures (`alloc_bytes`, `lock_wait`, ...).
    pub graph: String,
    pub format: write::Format,
    pub out: Option<PathBuf>,
}

/// `rig flame`: one graph of a recorded window, without re-running.
pub fn render(s: &FlameSettings) -> Result<Vec<u8>> {
    let found = input::load(&s.file, s.case.as_deref(), crate::scenario::slug)?;
    let bytes = write::render(&found.recorded, &found.id, &s.graph, s.format)
        .with_context(|| format!("case {}", found.id))?;
    Ok(bytes)
}

/// `flame/<slug>/` for every counted case of a run or gate directory.
pub fn write_cases(dir: &Path) -> Result<Vec<PathBuf>> {
    outdir::cases(dir, crate::scenario::slug)
        .with_context(|| format!("writing flamegraphs in {}/flame", dir.display()))
}

/// `rig ab`: every case's graphs, and arm 0 → arm i differential graphs.
pub fn write_ab(dir: &Path, arms: &[String]) -> Result<Vec<PathBuf>> {
    let mut all = write_cases(dir)?;
    all.extend(
        outdir::ab(dir, arms, crate::scenario::slug).with_context(|| {
            format!(
                "writing differential flamegraphs in {}/flame",
                dir.display()
            )
        })?,
    );
    Ok(all)
}

/// `rig attach --flame DIR`: the window's graphs in a new directory.
pub fn write_window(dir: &Path, a: &Attribution) -> Result<Vec<PathBuf>> {
    crate::fsutil::create_new_dir(dir)
        .with_context(|| format!("--flame {}: give a new directory", dir.display()))?;
    let r = input::Recorded::of(a);
    Ok(write::window(dir, Path::new("."), &r, &r.label())?)
}

/// The top `top` user sites per family of each case with stacks, per
/// request: `(case id, lines)`.
pub fn top_sites<'a>(
    cases: impl IntoIterator<Item = (&'a str, &'a Attribution)>,
    top: usize,
) -> String {
    let mut out = String::new();
    for (id, a) in cases {
        let t = sites::top(&input::Recorded::of(a), top);
        let text = sites::render(&t);
        if !text.is_empty() {
            out.push_str(&format!("{id}\n{text}"));
        }
    }
    if !out.is_empty() {
        out.insert_str(
            0,
            &format!("top {top} user sites per family (first frame outside allocators and std):\n"),
        );
    }
    out
}

/// One line naming where the graphs went, or nothing when none were written.
pub fn where_written(dir: &Path, files: &[PathBuf]) -> String {
    if files.is_empty() {
        return String::new();
    }
    let svgs = files
        .iter()
        .filter(|f| f.extension().is_some_and(|e| e == "svg"))
        .count();
    format!(
        "flamegraphs: {}/flame/<case>/ ({} SVG, folded stacks and pprof .pb.gz; `rig flame` renders one)\n",
        dir.display(),
        svgs
    )
}
