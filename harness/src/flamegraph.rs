//! `rig flame` and the flamegraphs of every output directory.
//!
//! In: recorded results (an attach JSON, a `cases.jsonl`) or an output
//! directory just written by `rig run`, `rig ab` or `rig gate`. Out: one
//! graph in one format (`rig flame`), or `flame/<case slug>/` files for
//! every counted case (and A→B differential graphs for `rig ab`), and the
//! lines `rig run` prints under its table: the top user sites of each
//! family per request, and where the flamegraphs are.

use std::collections::BTreeMap;
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

/// `rig flame`: the graph written to `--out`, or to stdout.
pub fn command(s: &FlameSettings) -> Result<i32> {
    let bytes = render(s)?;
    match &s.out {
        Some(p) => crate::fsutil::write_new(p, &bytes).context("--out")?,
        // `rig flame … | head` is not an error.
        None => crate::console::out_bytes(&bytes).context("standard output")?,
    }
    Ok(crate::exit::OK)
}

/// `flame/<slug>/` for every counted case of a run or gate directory.
pub fn write_cases(dir: &Path) -> Result<Vec<PathBuf>> {
    outdir::cases(dir, crate::scenario::slug)
        .with_context(|| format!("writing flamegraphs in {}/flame", dir.display()))
}

/// `rig ab`: every case's graphs, and arm 0 → arm i differential graphs of
/// each case key (`keys`: case id → key, as `rig ab` grouped its runs).
pub fn write_ab(
    dir: &Path,
    arms: &[String],
    keys: &BTreeMap<String, String>,
) -> Result<Vec<PathBuf>> {
    let mut all = write_cases(dir)?;
    all.extend(
        outdir::ab(dir, arms, keys, crate::scenario::slug).with_context(|| {
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde_json::json;

    use super::*;
    use crate::report::flame::svg::tests::frames;
    use crate::report::flame::tests::site;
    use crate::report::stacks::{StackFrames, StackSection};

    const REQUESTS: u64 = 1000;
    const ONE: &str = "calib/calib/h1/calib/closed/1x1/ka/#1";
    const FOUR: &str = "calib/calib/h1/calib/closed/4x1/ka/#1";
    const FAILED: &str = "calib/calib/h1/calib/closed/8x1/ka/#1";

    /// A `report::stacks::StackRow` as rig writes it: `count` mallocs of
    /// `bytes` in all per request at `stack`.
    fn alloc_row(count: u64, bytes: u64, stack: &str) -> serde_json::Value {
        json!({
            "family": "alloc", "event": "malloc", "size_class": 5, "pid": 7,
            "count": count * REQUESTS, "amount": bytes * REQUESTS,
            "stack": stack, "kernel_stack": null, "inner": false,
        })
    }

    /// A `cases.jsonl` line of a counted case, its stacks as rig
    /// serializes them, `rows` at the stacks `a` (malloc in build_reply)
    /// and `b` (malloc in parse).
    fn counted(id: &str, rows: Vec<serde_json::Value>) -> serde_json::Value {
        let app = "/srv/app";
        let frames = |f: &str, line| StackFrames {
            frames: vec![
                site("/lib/libc.so.6", 0x5000, "malloc", None),
                site(app, 0x1200, f, Some(line)),
                site(app, 0x1100, "serve", Some(10)),
                site(app, 0x1010, "main", Some(3)),
            ],
            user_site: 1,
            incomplete: vec![],
        };
        let stacks = StackSection {
            enabled: true,
            stacks: BTreeMap::from([
                ("a".to_string(), frames("build_reply", 20)),
                ("b".to_string(), frames("parse", 30)),
            ]),
            kernel: BTreeMap::new(),
            rows: Vec::new(),
            incomplete_events: BTreeMap::new(),
            stack_failures: BTreeMap::new(),
            limits: Vec::new(),
        };
        let mut stacks = serde_json::to_value(stacks).unwrap();
        stacks["rows"] = rows.into();
        json!({
            "id": id, "target_name": "calib", "status": "ok",
            "counted": {"attribution": {
                "pid": 7, "command": "/srv/app", "families": ["alloc"],
                "window": {"elapsed_ns": 2_000_000, "requests": REQUESTS},
                "stacks": stacks,
                "cpu": {"period_ns": 0},
            }},
        })
    }

    /// `counted` as run by the arm `arm`.
    fn counted_by(arm: &str, id: &str, rows: Vec<serde_json::Value>) -> serde_json::Value {
        let mut v = counted(id, rows);
        v["target_name"] = arm.into();
        v
    }

    /// Three cases of a `rig run`: two counted with different costs, one
    /// failed before its counted pass.
    fn cases_jsonl() -> tempfile::NamedTempFile {
        let lines = [
            counted(ONE, vec![alloc_row(3, 72, "a"), alloc_row(1, 100, "b")]),
            counted(FOUR, vec![alloc_row(5, 120, "a")]),
            json!({"id": FAILED, "target_name": "calib", "status": "failed",
                   "reasons": ["the target exited"]}),
        ];
        let f = tempfile::Builder::new()
            .suffix(".jsonl")
            .tempfile()
            .unwrap();
        let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
        std::fs::write(f.path(), text).unwrap();
        f
    }

    fn settings(file: &Path, case: Option<&str>, graph: &str, format: &str) -> FlameSettings {
        FlameSettings {
            file: file.to_path_buf(),
            case: case.map(String::from),
            graph: graph.into(),
            format: format.parse().unwrap(),
            out: None,
        }
    }

    fn text(s: &FlameSettings) -> String {
        String::from_utf8(render(s).unwrap()).unwrap()
    }

    #[test]
    fn rig_flame_renders_the_case_named_by_case_from_a_cases_jsonl() {
        let f = cases_jsonl();
        assert_eq!(
            text(&settings(f.path(), Some(FOUR), "alloc", "folded")),
            format!(
                "# rig flame: {FOUR}: 1000 requests, allocations per request\n\
                 main;serve;build_reply;malloc 5\n"
            )
        );
        // By its slug (the name of its flame/ directory), another measure.
        let slug = crate::scenario::slug(ONE);
        assert_eq!(
            text(&settings(f.path(), Some(&slug), "alloc_bytes", "folded")),
            format!(
                "# rig flame: {ONE}: 1000 requests, bytes allocated per request\n\
                 main;serve;build_reply;malloc 72\n\
                 main;serve;parse;malloc 100\n"
            )
        );
        let svg = text(&settings(f.path(), Some(ONE), "alloc", "svg"));
        assert!(svg.contains(&format!("{ONE}: 1000 requests, allocations per request")));
        let mut got: Vec<(String, u64)> = frames(&svg).into_iter().map(|f| (f.0, f.2)).collect();
        let want = [
            ("all (4 allocations per request, 100%)", 4),
            ("main (4 allocations per request, 100.00%)", 4),
            ("serve (4 allocations per request, 100.00%)", 4),
            ("build_reply (3 allocations per request, 75.00%)", 3),
            ("malloc (3 allocations per request, 75.00%)", 3),
            ("parse (1 allocations per request, 25.00%)", 1),
            ("malloc (1 allocations per request, 25.00%)", 1),
        ];
        got.sort();
        let mut want: Vec<(String, u64)> = want.iter().map(|(t, w)| (t.to_string(), *w)).collect();
        want.sort();
        assert_eq!(got, want);
        let p = crate::report::flame::pprof::decode(
            &render(&settings(f.path(), Some(ONE), "alloc", "pprof")).unwrap(),
        )
        .unwrap();
        let values: Vec<&[i64]> = p.sample.iter().map(|s| s.value.as_slice()).collect();
        assert_eq!(values, vec![&[3, 72][..], &[1, 100][..]]);
    }

    #[test]
    fn rig_flame_on_a_cases_jsonl_names_the_cases_it_can_draw() {
        let f = cases_jsonl();
        let err = |case: Option<&str>| {
            format!(
                "{:#}",
                render(&settings(f.path(), case, "alloc", "folded")).unwrap_err()
            )
        };
        let file = f.path().display();
        assert_eq!(
            err(None),
            format!(
                "{file} holds 2 cases with a counted pass; name one with --case: {ONE}, {FOUR}"
            )
        );
        assert_eq!(
            err(Some(FAILED)),
            format!("{file}: case {FAILED} has no counted pass (no probes ran in it)")
        );
        assert_eq!(
            err(Some("calib/nope")),
            format!("{file}: no case \"calib/nope\"; cases with a counted pass: {ONE}, {FOUR}")
        );
        let bad = |graph: &str| {
            format!(
                "{:#}",
                render(&settings(f.path(), Some(FOUR), graph, "folded")).unwrap_err()
            )
        };
        assert!(
            bad("allocs").starts_with(&format!(
                "case {FOUR}: no graph \"allocs\"; graphs: syscalls, alloc, alloc_bytes, "
            )),
            "{}",
            bad("allocs")
        );
        assert_eq!(
            bad("copy"),
            format!("case {FOUR}: family copy did not run in this window, or took no stacks")
        );
    }

    /// The runs of one case are the runs `rig ab` keyed alike, whatever the
    /// arms are called: an arm named like the suite and the path (`calib`)
    /// still meets its other arm in one differential graph.
    #[test]
    fn rig_ab_draws_each_case_key_once_across_its_arms() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (ONE, "calib/dyn/h1/calib/closed/1x1/ka/#1");
        let lines = [
            counted_by("calib", a, vec![alloc_row(3, 72, "a")]),
            counted_by("dyn", b, vec![alloc_row(2, 48, "a")]),
        ];
        let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
        std::fs::write(dir.path().join("cases.jsonl"), text).unwrap();
        let key = "calib/h1/calib/closed/1x1/ka".to_string();
        let keys = BTreeMap::from([(a.to_string(), key.clone()), (b.to_string(), key)]);
        write_ab(dir.path(), &["calib".into(), "dyn".into()], &keys).unwrap();
        let folded = std::fs::read_to_string(
            dir.path()
                .join("flame/calib_h1_calib_closed_1x1_ka/alloc.diff.folded"),
        )
        .unwrap();
        let rows: Vec<&str> = folded.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(rows, ["main;serve;build_reply;malloc 3 2"], "{folded}");
    }
}
