//! `rig compare`'s page: metric series over builds, one small chart each.
//!
//! In: the comparison as `rig compare --json` writes it (read back as JSON,
//! so this stage needs nothing of the command's types). Out: one
//! self-contained HTML page, no script at all: its charts are SVG drawn
//! here, as typed rows for the template (`builds.html`). Per case, every
//! metric's readings in order, the noise band shaded around the level of
//! each run of readings between steps (the first reading's value, then the
//! value after each step; a line for an exact counter, whose band is 0),
//! each step marked with its interval, its commits and which of them
//! touched the step's function; then the function diffs.

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::cases::fmt;

const TEMPLATE: &str = include_str!("builds.html");

#[derive(Deserialize)]
struct Comparison {
    readings: Vec<Reading>,
    #[serde(default)]
    refused: Vec<Refused>,
    #[serde(default)]
    functions: Vec<Functions>,
    #[serde(default)]
    cases: Vec<Case>,
}

#[derive(Deserialize)]
struct Reading {
    label: String,
    dir: String,
    target: String,
    build: String,
    git: Option<Git>,
}

#[derive(Deserialize, Serialize)]
struct Git {
    commit: String,
    describe: String,
    #[serde(default)]
    dirty: bool,
    #[serde(default)]
    subject: String,
}

#[derive(Deserialize, Serialize)]
struct Refused {
    case: String,
    reason: String,
}

#[derive(Deserialize)]
struct Functions {
    from: usize,
    to: usize,
    #[serde(default)]
    added: Vec<String>,
    #[serde(default)]
    removed: Vec<String>,
    #[serde(default)]
    changed: Vec<String>,
    #[serde(default)]
    renamed: Vec<(String, String)>,
    identical: Option<u64>,
    unavailable: Option<String>,
}

#[derive(Deserialize)]
struct Case {
    case: String,
    series: Vec<Series>,
}

#[derive(Deserialize)]
struct Series {
    metric: String,
    kind: String,
    values: Vec<Option<f64>>,
    band: Option<f64>,
    #[serde(default)]
    steps: Vec<Step>,
    #[serde(default)]
    unstable: Vec<(usize, usize)>,
}

#[derive(Deserialize)]
struct Step {
    from: usize,
    to: usize,
    before: f64,
    after: f64,
    #[serde(default)]
    commits: Vec<String>,
    function: Option<String>,
    touched: Option<Touched>,
}

#[derive(Deserialize)]
struct Touched {
    #[serde(default)]
    commits: Vec<String>,
    #[serde(default)]
    naming: Vec<String>,
    message: String,
}

/// What the template is given.
#[derive(Serialize)]
struct Page {
    readings: Vec<ReadingRow>,
    refused: Vec<Refused>,
    cases: Vec<CaseView>,
    functions: Vec<FunctionRow>,
    style: &'static str,
}

#[derive(Serialize)]
struct ReadingRow {
    label: String,
    dir: String,
    target: String,
    build: String,
    git: Option<Git>,
}

#[derive(Serialize)]
struct CaseView {
    case: String,
    /// `case-N`, the anchor.
    id: String,
    steps: usize,
    series: Vec<SeriesView>,
}

#[derive(Serialize)]
struct SeriesView {
    metric: String,
    /// `case-N-M`, the anchor.
    id: String,
    exact: bool,
    /// `band 0 (exact)`, `band ±5.9%` or `no band: no build measured twice`.
    band: String,
    chart: Chart,
    cells: Vec<Cell>,
    steps: Vec<StepView>,
    unstable: Vec<String>,
}

#[derive(Serialize)]
struct Cell {
    label: String,
    text: String,
    /// `up` or `down` at the reading after a step.
    step: Option<&'static str>,
}

#[derive(Serialize)]
struct StepView {
    /// `8 → 9 (+1) between R4 and R5`.
    text: String,
    /// What the function diff says of the step's function.
    function: Option<String>,
    commits: Vec<CommitRow>,
    touched: Option<String>,
}

#[derive(Serialize)]
struct CommitRow {
    line: String,
    /// This commit touched the step's function.
    touched: bool,
    /// It did not, but changed a line naming it.
    naming: bool,
}

#[derive(Serialize)]
struct FunctionRow {
    interval: String,
    identical: Option<u64>,
    changed: Vec<String>,
    added: Vec<String>,
    removed: Vec<String>,
    renamed: Vec<String>,
    unavailable: Option<String>,
}

/// A chart in the page's own units (pixels of the SVG's view box).
#[derive(Serialize)]
struct Chart {
    width: f64,
    height: f64,
    /// The plot's left and right edges, and its top and bottom.
    left: f64,
    right: f64,
    top: f64,
    bottom: f64,
    /// `x,y x,y …`, the readings joined (numbers only).
    line: String,
    points: Vec<Point>,
    bands: Vec<Band>,
    steps: Vec<StepMark>,
    ticks: Vec<Tick>,
    labels: Vec<Tick>,
}

#[derive(Serialize)]
struct Point {
    x: f64,
    y: f64,
    /// `R5: 9`, the point's tooltip.
    title: String,
    step: bool,
}

/// The band around one run of readings: a rectangle, or a line (height 0)
/// for an exact counter.
#[derive(Serialize)]
struct Band {
    x: f64,
    y: f64,
    w: f64,
    h: f64,
    title: String,
}

#[derive(Serialize)]
struct StepMark {
    x: f64,
    /// `+1`, above the mark.
    text: String,
}

#[derive(Serialize)]
struct Tick {
    /// Along the axis: y for the value ticks, x for the reading labels.
    at: f64,
    text: String,
}

const WIDTH: f64 = 440.0;
const HEIGHT: f64 = 150.0;
const LEFT: f64 = 56.0;
const RIGHT: f64 = 430.0;
const TOP: f64 = 18.0;
const BOTTOM: f64 = 128.0;

fn chart(s: &Series, labels: &[String]) -> Chart {
    let n = s.values.len().max(1);
    let x = |i: usize| {
        if n == 1 {
            (LEFT + RIGHT) / 2.0
        } else {
            LEFT + 10.0 + (RIGHT - LEFT - 20.0) * i as f64 / (n - 1) as f64
        }
    };
    let band = s.band.unwrap_or(0.0);
    // Runs of readings between steps, each with the level it starts at.
    let mut runs: Vec<(usize, usize, f64)> = Vec::new();
    for (i, v) in s.values.iter().enumerate() {
        let Some(v) = *v else { continue };
        match runs.last_mut() {
            Some(r) if !s.steps.iter().any(|st| st.to == i) => r.1 = i,
            _ => runs.push((i, i, v)),
        }
    }
    let half = |level: f64| {
        if band.is_finite() {
            band * level.abs()
        } else {
            0.0
        }
    };
    let mut lo = f64::INFINITY;
    let mut hi = f64::NEG_INFINITY;
    for v in s.values.iter().flatten() {
        lo = lo.min(*v);
        hi = hi.max(*v);
    }
    if s.band.is_some() {
        for &(_, _, level) in &runs {
            lo = lo.min(level - half(level));
            hi = hi.max(level + half(level));
        }
    }
    if !lo.is_finite() {
        (lo, hi) = (0.0, 1.0);
    }
    let pad = if hi > lo {
        (hi - lo) * 0.1
    } else {
        hi.abs().max(1.0) * 0.1
    };
    let (lo, hi) = (lo - pad, hi + pad);
    let y = |v: f64| BOTTOM - (BOTTOM - TOP) * (v - lo) / (hi - lo);
    let r1 = |v: f64| (v * 10.0).round() / 10.0;
    let points: Vec<Point> = s
        .values
        .iter()
        .enumerate()
        .filter_map(|(i, v)| {
            v.map(|v| Point {
                x: r1(x(i)),
                y: r1(y(v)),
                title: format!("{}: {}", labels.get(i).map_or("?", |l| l), fmt(v)),
                step: s.steps.iter().any(|st| st.to == i),
            })
        })
        .collect();
    let line = points
        .iter()
        .map(|p| format!("{},{}", p.x, p.y))
        .collect::<Vec<_>>()
        .join(" ");
    let gap = if n > 1 {
        (RIGHT - LEFT - 20.0) / (n - 1) as f64 / 2.0
    } else {
        10.0
    };
    let bands = match s.band {
        None => Vec::new(),
        Some(_) => runs
            .iter()
            .map(|&(a, b, level)| {
                let (x0, x1) = (x(a) - gap.min(10.0), x(b) + gap.min(10.0));
                let (top, bottom) = (y(level + half(level)), y(level - half(level)));
                Band {
                    x: r1(x0),
                    y: r1(top),
                    w: r1(x1 - x0),
                    h: r1(bottom - top),
                    title: if band == 0.0 {
                        format!("band 0 (exact) at {}", fmt(level))
                    } else {
                        format!("band ±{:.1}% around {}", band * 100.0, fmt(level))
                    },
                }
            })
            .collect(),
    };
    let steps = s
        .steps
        .iter()
        .map(|st| StepMark {
            x: r1((x(st.from) + x(st.to)) / 2.0),
            text: signed(st.after - st.before),
        })
        .collect();
    let ticks = [hi - pad, lo + pad]
        .iter()
        .map(|v| Tick {
            at: r1(y(*v)),
            text: fmt(*v),
        })
        .collect();
    Chart {
        width: WIDTH,
        height: HEIGHT,
        left: LEFT,
        right: RIGHT,
        top: TOP,
        bottom: BOTTOM,
        line,
        points,
        bands,
        steps,
        ticks,
        labels: (0..s.values.len())
            .map(|i| Tick {
                at: r1(x(i)),
                text: labels.get(i).cloned().unwrap_or_default(),
            })
            .collect(),
    }
}

fn signed(d: f64) -> String {
    let d = (d * 100.0).round() / 100.0;
    if d >= 0.0 {
        format!("+{}", fmt(d))
    } else {
        fmt(d)
    }
}

fn function_words(metric: &str, state: &str) -> String {
    let f = metric.split_once(" @ ").map_or("?", |(_, f)| f);
    match state {
        "changed" => format!("{f} changed"),
        "identical" => format!("{f} is byte-identical: the change is in its callers or callees"),
        "added" => format!("{f} was added here"),
        "removed" => format!("{f} was removed here"),
        _ => format!("no function hashes for {f} in this interval"),
    }
}

fn view(c: Comparison) -> Page {
    let labels: Vec<String> = c.readings.iter().map(|r| r.label.clone()).collect();
    let label = |i: usize| labels.get(i).map_or("?".to_string(), |l| l.clone());
    let cases = c
        .cases
        .iter()
        .enumerate()
        .map(|(ci, case)| {
            let series: Vec<SeriesView> = case
                .series
                .iter()
                .enumerate()
                .map(|(si, s)| {
                    let exact = s.kind == "exact";
                    SeriesView {
                        metric: s.metric.clone(),
                        id: format!("case-{}-{}", ci + 1, si + 1),
                        exact,
                        band: match (exact, s.band) {
                            (true, _) => "band 0 (exact)".to_string(),
                            (false, Some(b)) => format!("band ±{:.1}%", b * 100.0),
                            (false, None) => "no band: no build measured twice".to_string(),
                        },
                        chart: chart(s, &labels),
                        cells: s
                            .values
                            .iter()
                            .enumerate()
                            .map(|(i, v)| Cell {
                                label: label(i),
                                text: v.map_or("—".to_string(), fmt),
                                step: s.steps.iter().find(|st| st.to == i).map(|st| {
                                    if st.after > st.before {
                                        "up"
                                    } else {
                                        "down"
                                    }
                                }),
                            })
                            .collect(),
                        steps: s
                            .steps
                            .iter()
                            .map(|st| StepView {
                                text: format!(
                                    "{} → {} ({}) between {} and {}",
                                    fmt(st.before),
                                    fmt(st.after),
                                    signed(st.after - st.before),
                                    label(st.from),
                                    label(st.to)
                                ),
                                function: st
                                    .function
                                    .as_deref()
                                    .map(|f| function_words(&s.metric, f)),
                                commits: st
                                    .commits
                                    .iter()
                                    .map(|l| CommitRow {
                                        line: l.clone(),
                                        touched: st
                                            .touched
                                            .as_ref()
                                            .is_some_and(|t| t.commits.contains(l)),
                                        naming: st
                                            .touched
                                            .as_ref()
                                            .is_some_and(|t| t.naming.contains(l)),
                                    })
                                    .collect(),
                                touched: st.touched.as_ref().map(|t| t.message.clone()),
                            })
                            .collect(),
                        unstable: s
                            .unstable
                            .iter()
                            .map(|(a, b)| {
                                format!(
                                    "moved between {} and {}, which ran the same build: not exact here",
                                    label(*a),
                                    label(*b)
                                )
                            })
                            .collect(),
                    }
                })
                .collect();
            CaseView {
                case: case.case.clone(),
                id: format!("case-{}", ci + 1),
                steps: series.iter().map(|s| s.steps.len()).sum(),
                series,
            }
        })
        .collect();
    Page {
        readings: c
            .readings
            .into_iter()
            .map(|r| ReadingRow {
                build: r.build.chars().take(12).collect(),
                label: r.label,
                dir: r.dir,
                target: r.target,
                git: r.git.map(|mut g| {
                    g.commit = g.commit.chars().take(10).collect();
                    g
                }),
            })
            .collect(),
        refused: c.refused,
        cases,
        functions: c
            .functions
            .into_iter()
            .map(|f| FunctionRow {
                interval: format!("{} → {}", label(f.from), label(f.to)),
                identical: f.identical,
                changed: f.changed,
                added: f.added,
                removed: f.removed,
                renamed: f
                    .renamed
                    .iter()
                    .map(|(o, n)| format!("{o} → {n}"))
                    .collect(),
                unavailable: f.unavailable,
            })
            .collect(),
        style: super::STYLE,
    }
}

/// The page of a comparison (`rig compare --json`'s value) as HTML.
pub fn render(comparison: &Value) -> Result<String> {
    let c: Comparison = serde_json::from_value(comparison.clone())
        .context("reading the comparison for its page")?;
    let page = view(c);
    let env = super::environment("builds.html", TEMPLATE)?;
    env.get_template("builds.html")?
        .render(minijinja::value::Serde(&page))
        .context("rendering the compare page")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    fn reading(i: usize, build: &str, commit: &str, subject: &str) -> serde_json::Value {
        json!({"label": format!("R{i}"), "dir": format!("/r/run-{i}"), "target": "calib",
               "build": build, "exe": null,
               "git": {"work_tree": "/src", "commit": commit, "describe": commit,
                       "dirty": false, "subject": subject}})
    }

    fn comparison() -> serde_json::Value {
        json!({
            "readings": [
                reading(1, "aaaa", "c1c1c1c1c1c1", "import"),
                reading(2, "aaaa", "c1c1c1c1c1c1", "import"),
                reading(3, "bbbb", "c4c4c4c4c4c4", "calib_alloc_small: a fourth <allocation>"),
            ],
            "refused": [],
            "functions": [{"from": 1, "to": 2, "added": [], "removed": [],
                           "changed": ["calib_alloc_small"], "renamed": [["old_f", "new_f"]],
                           "identical": 40, "unavailable": null}],
            "cases": [{"case": "series/h1/calib", "series": [
                {"metric": "malloc calls @ calib_alloc_small<int>", "kind": "exact",
                 "values": [3.0, 3.0, 4.0], "band": 0.0, "unstable": [],
                 "steps": [{"from": 1, "to": 2, "before": 3.0, "after": 4.0,
                            "commits": ["c2c2c2c docs", "c3c3c3c calib_request: call it", "c4c4c4c calib_alloc_small: a fourth <allocation>"],
                            "function": "changed",
                            "touched": {"function": "calib_alloc_small<int>",
                                        "commits": ["c4c4c4c calib_alloc_small: a fourth <allocation>"],
                                        "naming": ["c3c3c3c calib_request: call it"],
                                        "message": "only c4c4c4c touched calib_alloc_small<int>"}}]},
                {"metric": "rps", "kind": "timing", "values": [1000.0, 1020.0, 1010.0],
                 "band": 0.06, "unstable": [], "steps": []},
            ]}],
        })
    }

    #[test]
    fn the_page_draws_each_series_with_its_band_and_marks_the_step_and_its_commit() {
        let html = super::render(&comparison()).unwrap();
        // No script, nothing fetched.
        assert!(!html.contains("<script"), "{html}");
        assert!(!html.contains("http://") && !html.contains("https://"));
        // Both series drawn; the exact counter's band is a line (height 0),
        // the timing metric's a shaded rectangle of ±6% around 1000.
        assert_eq!(html.matches("<svg class=\"plot\"").count(), 2);
        assert!(html.contains("<line class=\"band exact\""), "{html}");
        assert!(html.contains("band 0 (exact) at 3</title>"), "{html}");
        assert!(html.contains("<rect class=\"band\""), "{html}");
        assert!(html.contains("band ±6.0% around 1000</title>"), "{html}");
        // The step: its mark, the reading after it, its interval.
        assert_eq!(html.matches("<line class=\"step\"").count(), 1);
        assert!(html.contains(">+1</text>"), "{html}");
        assert!(html.contains("<td class=\"n up\">4</td>"), "{html}");
        assert!(html
            .contains("step: 3 → 4 (+1) between R2 and R3; calib_alloc_small&lt;int&gt; changed"));
        // Its commits, the one that touched the function marked, and
        // every name and subject escaped.
        assert!(
            html.contains("<mark class=\"touched\">c4c4c4c calib_alloc_small: a fourth &lt;allocation&gt;</mark>"),
            "{html}"
        );
        assert!(html.contains("<li>c2c2c2c docs</li>"), "{html}");
        assert!(
            html.contains("<span class=\"naming\">c3c3c3c calib_request: call it</span> <small>(names it)</small>"),
            "{html}"
        );
        assert!(html.contains("only c4c4c4c touched calib_alloc_small&lt;int&gt;"));
        assert!(!html.contains("<allocation>") && !html.contains("<int>"));
        assert!(html.contains("<td>R2 → R3</td>"));
        assert!(html.contains("old_f → new_f"));
    }

    #[test]
    fn a_timing_metric_without_a_repeated_build_has_no_band() {
        let mut c = comparison();
        c["cases"][0]["series"][1]["band"] = serde_json::Value::Null;
        let html = super::render(&c).unwrap();
        assert!(!html.contains("<rect class=\"band\""), "{html}");
        assert!(html.contains("no band: no build measured twice"));
    }
}
