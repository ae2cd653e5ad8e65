//! `report.html`: one self-contained page per output directory of `rig run`,
//! `rig ab` and `rig gate`, for a person to open in a browser.
//!
//! In: the directory's files as written (`manifest.json`, `cases.jsonl`,
//! `report.json`, `ab.json`, `gate.json`, and the flamegraphs
//! `flame/<case slug>/<family>.svg` and `<family>.diff.svg` when present),
//! read back through the typed views of `results`, every field optional,
//! so a directory of an older rig still renders. Out: one
//! HTML file with its styles, its script and its data inline (no network):
//! the matrix table (sortable, filtered by suite, protocol and target), per
//! case the latency percentile curves from the HDR histograms, memory and
//! CPU over time from the 50 ms samples, the top user sites per family per
//! request, the process table and the flamegraphs; sweeps (a parameter
//! varied within a suite) as curves with the spread of repeats; the A/B
//! comparison or the gate's verdicts.
//!
//! The page is rendered with minijinja (`page.html`); its charts are drawn
//! by `page.js`, a small script kept here that turns the JSON data blob into
//! SVG, so no chart library is fetched.
//!
//! `rig compare`'s page (`builds.rs`, `builds.html`) is the same kind of
//! file from another input: a comparison of result directories, its
//! charts drawn as SVG here, without a script.

mod builds;
mod cases;
mod chart;
mod compare;
mod flames;
mod lite;
mod sweep;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::results::case::CaseLine;
use crate::results::manifest::ManifestView;

const TEMPLATE: &str = include_str!("page.html");
const SCRIPT: &str = include_str!("page.js");
const STYLE: &str = include_str!("page.css");

/// The file name inside an output directory.
pub const FILE: &str = "report.html";

/// Which command wrote the directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Run,
    Ab,
    Gate,
}

/// What the directory holds, read back.
pub struct Inputs {
    pub dir: PathBuf,
    pub kind: Kind,
    pub manifest: Value,
    pub cases: Vec<Value>,
    /// `report.json`, `ab.json` or `gate.json`.
    pub summary: Value,
    pub flames: flames::Flames,
}

fn read_json(p: &Path) -> Result<Option<Value>> {
    match std::fs::read(p) {
        Ok(b) => Ok(Some(
            serde_json::from_slice(&b).with_context(|| format!("parsing {}", p.display()))?,
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("reading {}", p.display())),
    }
}

/// The counts of a `rig run` (`report.json`), in the page's header.
#[derive(Default, Deserialize, Serialize)]
struct RunCounts {
    complete: Option<bool>,
    interrupted: Option<bool>,
    ok: Option<u64>,
    limited: Option<u64>,
    failed: Option<u64>,
    skipped: Option<u64>,
}

/// The counts of `report.json`, which also repeats every case (hundreds of
/// MB for a long run): only the counts are parsed.
fn run_summary(p: &Path) -> Result<Value> {
    let bytes = match std::fs::read(p) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Value::Null),
        Err(e) => return Err(e).with_context(|| format!("reading {}", p.display())),
    };
    // From a slice, not a reader: the skipped cases are scanned, not copied.
    let c: RunCounts =
        serde_json::from_slice(&bytes).with_context(|| format!("parsing {}", p.display()))?;
    Ok(serde_json::to_value(c)?)
}

impl Inputs {
    pub fn read(dir: &Path) -> Result<Inputs> {
        use std::io::BufRead;
        let jsonl = dir.join("cases.jsonl");
        let file = std::fs::File::open(&jsonl).with_context(|| {
            format!(
                "{}: not an output directory of rig run, rig ab or rig gate (no cases.jsonl)",
                dir.display()
            )
        })?;
        let mut cases = Vec::new();
        let mut lines = std::io::BufReader::new(file).lines().enumerate().peekable();
        while let Some((i, line)) = lines.next() {
            let line = line.with_context(|| format!("reading {}", jsonl.display()))?;
            if line.trim().is_empty() {
                continue;
            }
            match lite::parse(&line) {
                Ok(v) => cases.push(cases::slim(v)),
                // The last line cut short by a crash is dropped, said, not
                // fatal: the cases before it are the results that survived
                // (`rig flame` does the same). Any other line is damage.
                Err(e) if lines.peek().is_none() => crate::errln!(
                    "rig: warning: {}:{}: the last line is cut short ({e}): dropped; the {} \
                     case(s) before it are kept",
                    jsonl.display(),
                    i + 1,
                    cases.len()
                ),
                Err(e) => anyhow::bail!("{}:{}: not a case line: {e}", jsonl.display(), i + 1),
            }
        }
        let (kind, summary) = if let Some(v) = read_json(&dir.join("ab.json"))? {
            (Kind::Ab, v)
        } else if let Some(v) = read_json(&dir.join("gate.json"))? {
            (Kind::Gate, v)
        } else {
            (Kind::Run, run_summary(&dir.join("report.json"))?)
        };
        Ok(Inputs {
            dir: dir.to_path_buf(),
            kind,
            manifest: read_json(&dir.join("manifest.json"))?.unwrap_or(Value::Null),
            cases,
            summary,
            flames: flames::Flames::read(&dir.join("flame"))?,
        })
    }
}

/// What the template is given. Typed, so it goes to the template in one
/// conversion; the matrix and the skipped cases, most rows of a large
/// interrupted run, are never built as JSON first.
#[derive(Serialize)]
struct Page<'a> {
    title: &'static str,
    kind: Kind,
    dir: String,
    rig_version: &'a Value,
    argv: Option<String>,
    started_unix_s: &'a Value,
    host: &'a Value,
    run: Option<RunCounts>,
    matrix: cases::Matrix<'a>,
    cases: Vec<cases::View<'a>>,
    sweeps: Vec<Value>,
    ab: Option<Value>,
    gate: Option<Value>,
    other_flames: Vec<Value>,
    style: &'static str,
    script: &'static str,
    charts: serde_json::Map<String, Value>,
}

/// The page as HTML.
pub fn render(inp: &Inputs) -> Result<String> {
    let mut charts = serde_json::Map::new();
    let typed = inp
        .cases
        .iter()
        .enumerate()
        .map(|(i, c)| CaseLine::of(c).with_context(|| format!("case {} of cases.jsonl", i + 1)))
        .collect::<Result<Vec<_>>>()?;
    let parts = cases::parts(&typed);
    let matrix = cases::matrix(&typed, &parts);
    let views = cases::views(&parts, &inp.flames, &mut charts);
    let sweeps = sweep::sweeps(&typed, &mut charts);
    let ab = (inp.kind == Kind::Ab)
        .then(|| compare::ab(inp, &typed).context("ab.json"))
        .transpose()?;
    let gate = (inp.kind == Kind::Gate)
        .then(|| compare::gate(&inp.summary).context("gate.json"))
        .transpose()?;
    let known: BTreeSet<String> = typed.iter().map(cases::slug_of).collect();
    let other_flames = inp.flames.except(&known);
    let m = ManifestView::of(&inp.manifest);
    let run = (inp.kind == Kind::Run)
        .then(|| Option::<RunCounts>::deserialize(&inp.summary))
        .transpose()
        .context("report.json")?
        .map(Option::unwrap_or_default);
    let page = Page {
        title: match inp.kind {
            Kind::Run => "rig run",
            Kind::Ab => "rig ab",
            Kind::Gate => "rig gate",
        },
        kind: inp.kind,
        dir: inp.dir.display().to_string(),
        rig_version: &m.rig_version,
        argv: m.argv.as_ref().map(|a| a.join(" ")),
        started_unix_s: &m.started_unix_s,
        host: &m.host,
        run,
        matrix,
        cases: views,
        sweeps,
        ab,
        gate,
        other_flames,
        style: STYLE,
        script: SCRIPT,
        charts,
    };
    environment("page.html", TEMPLATE)?
        .get_template("page.html")?
        .render(minijinja::value::Serde(&page))
        .context("rendering report.html")
}

/// `rig compare`'s page (`rig compare --html`), from the comparison as
/// its `--json` has it.
pub fn compare_page(comparison: &Value) -> Result<String> {
    builds::render(comparison)
}

/// The template `name` with the page's escaping and undefined values.
fn environment(
    name: &'static str,
    template: &'static str,
) -> Result<minijinja::Environment<'static>> {
    let mut env = minijinja::Environment::new();
    env.set_undefined_behavior(minijinja::UndefinedBehavior::Chainable);
    env.set_formatter(format_value);
    env.add_template(name, template)
        .with_context(|| format!("{name}: the template"))?;
    Ok(env)
}

/// Values into the page: HTML-escaped unless marked safe, and `none` as
/// nothing. Unlike minijinja's default escaping, `/` stays `/` (it needs no
/// escaping in text or quoted attributes, and case ids are full of it).
fn format_value(
    out: &mut minijinja::Output,
    _: &mut minijinja::State,
    v: &minijinja::Value,
) -> Result<(), minijinja::Error> {
    use std::fmt::Write;
    let io = |_| minijinja::Error::new(minijinja::ErrorKind::WriteFailure, "writing the page");
    if v.is_none() || v.is_undefined() {
        return Ok(());
    }
    let text = v.to_string();
    if v.is_safe() {
        return out.write_str(&text).map_err(io);
    }
    for ch in text.chars() {
        match ch {
            '&' => out.write_str("&amp;"),
            '<' => out.write_str("&lt;"),
            '>' => out.write_str("&gt;"),
            '"' => out.write_str("&quot;"),
            '\'' => out.write_str("&#39;"),
            c => out.write_char(c),
        }
        .map_err(io)?;
    }
    Ok(())
}

/// Read `dir` and write `dir/report.html` (atomically: temp file, then
/// rename, so a reader never sees half a page). Returns its path.
pub fn write(dir: &Path) -> Result<PathBuf> {
    let html = render(&Inputs::read(dir)?)?;
    let path = dir.join(FILE);
    let tmp = dir.join(format!(".{FILE}.tmp"));
    let _ = std::fs::remove_file(&tmp);
    {
        use std::io::Write;
        let mut f = crate::fsutil::create_new(&tmp)
            .with_context(|| format!("creating {}", tmp.display()))?;
        f.write_all(html.as_bytes())?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, &path).with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

/// `report: <path>` and a newline when `dir` has a report.html, else
/// nothing: the line `rig run`, `rig ab` and `rig gate` end with.
pub fn report_line(dir: &Path) -> String {
    let p = dir.join(FILE);
    if p.exists() {
        format!("report: {}\n", p.display())
    } else {
        String::new()
    }
}

/// After a command's results are written: the page too, but a page that
/// cannot be made never costs the results (they are on disk already).
pub fn write_or_warn(dir: &Path) -> Option<PathBuf> {
    match write(dir) {
        Ok(p) => Some(p),
        Err(e) => {
            crate::errln!("rig: could not write {}/{FILE}: {e:#}", dir.display());
            None
        }
    }
}

#[cfg(test)]
mod tests;
