//! The terminal form of a [`Comparison`]: the readings, then per case a
//! table of every metric's series (a step marked `▲`/`▼` at the reading
//! after it), the steps with their intervals, and the function diffs.

use std::fmt::Write;

use comfy_table::{presets::UTF8_FULL_CONDENSED, CellAlignment, Table};

use super::series::Kind;
use super::{short, Comparison, MetricSeries};

pub fn table(c: &Comparison) -> String {
    let mut s = String::new();
    s.push_str("readings:\n");
    for r in &c.readings {
        let git = r.git.as_ref().map_or(String::new(), |g| {
            format!(", {} {}", &g.commit[..g.commit.len().min(10)], g.subject)
        });
        let _ = writeln!(
            s,
            "  {}  {} ({}), build {}{git}",
            r.label,
            r.dir.display(),
            r.target,
            short(&r.build)
        );
    }
    for r in &c.refused {
        let _ = writeln!(s, "not aligned: {}: {}", r.case, r.reason);
    }
    for case in &c.cases {
        let _ = writeln!(s, "\ncase {}", case.case);
        s.push_str(&series_table(c, &case.series).to_string());
        s.push('\n');
        let mut any = false;
        for m in &case.series {
            for st in &m.steps {
                if !any {
                    s.push_str("steps:\n");
                    any = true;
                }
                let _ = write!(
                    s,
                    "  {}: {} → {} ({:+}) between {} and {}",
                    m.metric,
                    num(st.step.before),
                    num(st.step.after),
                    rounded(st.step.after - st.step.before),
                    c.readings[st.step.from].label,
                    c.readings[st.step.to].label,
                );
                if let Some(f) = &st.function {
                    let _ = write!(s, "; {}", function_words(m, f));
                }
                match st.commits.as_slice() {
                    [] => {}
                    [one] => {
                        let _ = write!(s, "; one commit: {one}");
                    }
                    many => {
                        let _ = write!(s, "; {} commits: {}", many.len(), many.join(" · "));
                    }
                }
                if let Some(t) = &st.touched {
                    // One commit that touched it is what "one commit" said.
                    if st.commits.len() > 1 || t.commits.is_empty() {
                        let _ = write!(s, "; {}", t.message);
                    }
                }
                s.push('\n');
            }
            for (a, b) in &m.unstable {
                let _ = writeln!(
                    s,
                    "  {}: moved between {} and {}, which ran the same build: not exact here",
                    m.metric, c.readings[*a].label, c.readings[*b].label
                );
            }
        }
        if !any {
            s.push_str("steps: none\n");
        }
    }
    if !c.functions.is_empty() {
        s.push_str("\nfunctions:\n");
    }
    for f in &c.functions {
        let (a, b) = (&c.readings[f.from].label, &c.readings[f.to].label);
        match (&f.diff, &f.unavailable) {
            (Some(d), _) => {
                let _ = write!(s, "  {a} → {b}: {} identical", d.identical);
                for (what, names) in [
                    ("changed", &d.changed),
                    ("added", &d.added),
                    ("removed", &d.removed),
                ] {
                    if !names.is_empty() {
                        let _ = write!(s, "; {what}: {}", names.join(", "));
                    }
                }
                if !d.renamed.is_empty() {
                    let r: Vec<String> = d
                        .renamed
                        .iter()
                        .map(|(o, n)| format!("{o} → {n}"))
                        .collect();
                    let _ = write!(s, "; renamed: {}", r.join(", "));
                }
                s.push('\n');
            }
            (None, why) => {
                let _ = writeln!(
                    s,
                    "  {a} → {b}: no function hashes: {}",
                    why.as_deref().unwrap_or("?")
                );
            }
        }
    }
    s.trim_end().to_string()
}

/// What a per-site step says about its function.
fn function_words(m: &MetricSeries, state: &str) -> String {
    let f = super::read::site_function(&m.metric).unwrap_or("?");
    match state {
        "changed" => format!("at {f}, a function that changed"),
        "identical" => {
            format!("at {f}, a function that is byte-identical: the change is in its callers or callees")
        }
        "added" => format!("at {f}, a function added here"),
        "removed" => format!("at {f}, a function removed here"),
        _ => format!("at {f} (no function hashes for this interval)"),
    }
}

fn series_table(c: &Comparison, series: &[MetricSeries]) -> Table {
    let mut t = Table::new();
    let mut header = vec!["metric".to_string(), "band".to_string()];
    header.extend(c.readings.iter().map(|r| r.label.clone()));
    t.load_preset(UTF8_FULL_CONDENSED).set_header(header);
    for m in series {
        let band = match (m.kind, m.band) {
            (Kind::Exact, _) => "exact".to_string(),
            (Kind::Timing, Some(b)) => format!("{:.1}%", b * 100.0),
            (Kind::Timing, None) => "no control".to_string(),
        };
        let mut row = vec![m.metric.clone(), band];
        for (i, v) in m.values.iter().enumerate() {
            let mark = m.steps.iter().find(|s| s.step.to == i).map_or("", |s| {
                if s.step.after > s.step.before {
                    "▲ "
                } else {
                    "▼ "
                }
            });
            row.push(v.map_or("-".to_string(), |v| format!("{mark}{}", num(v))));
        }
        t.add_row(row);
    }
    for i in 2..2 + c.readings.len() {
        if let Some(col) = t.column_mut(i) {
            col.set_cell_alignment(CellAlignment::Right);
        }
    }
    t
}

/// A value as the table shows it: whole numbers whole, others to 2
/// decimals (per-request counts of 1/3 are 0.33).
fn num(v: f64) -> String {
    if v == v.round() && v.abs() < 1e15 {
        format!("{v:.0}")
    } else if v.abs() >= 100.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

fn rounded(v: f64) -> f64 {
    (v * 100.0).round() / 100.0
}
