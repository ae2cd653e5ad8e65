//! A gate report in the formats CI systems read: Bencher Metric Format
//! JSON (`gate.bmf.json`), a markdown summary for a job summary
//! (`gate.md`), and JUnit XML with one test case per counter
//! (`gate.junit.xml`; a breach is a failure, a skipped counter is skipped).

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use super::*;

/// (benchmark, measure) of a counter: a multi-case gate names counters
/// `case key: counter`; a one-case gate's counters belong to its case.
fn split<'a>(r: &'a GateReport, counter: &'a str) -> (&'a str, &'a str) {
    match counter.split_once(": ") {
        Some((case, c)) if r.cases.len() > 1 => (case, c),
        _ => (
            r.cases.first().map_or("gate", |(id, _)| id.as_str()),
            counter,
        ),
    }
}

/// Bencher Metric Format: `{benchmark: {measure: {value, lower_value,
/// upper_value}}}`, the median of the runs with their minimum and maximum.
/// Only deterministic counters: the rest are not measurements a gate or a
/// trend line should use.
pub fn bmf(r: &GateReport) -> Value {
    let mut out: BTreeMap<String, Map<String, Value>> = BTreeMap::new();
    for o in r
        .observed
        .iter()
        .filter(|o| o.deterministic && !o.values.is_empty())
    {
        let (bench, measure) = split(r, &o.name);
        let lo = o.values.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = o.values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        out.entry(bench.to_string()).or_default().insert(
            measure.to_string(),
            json!({"value": o.now(), "lower_value": lo, "upper_value": hi}),
        );
    }
    json!(out)
}

fn cell(s: &str) -> String {
    s.replace('|', "\\|")
}

/// A markdown summary: the verdict first, then breaches, then every row.
pub fn markdown(r: &GateReport) -> String {
    let verdict = if r.passed() {
        "✅ PASS".to_string()
    } else {
        format!("❌ FAIL ({} breaches)", r.breaches.len())
    };
    let mut md = format!(
        "## rig gate: {verdict}\n\n`{}` on `{}`: {} runs × {} requests per case, counted pass only (no timing).\n\n",
        r.baseline.display(),
        r.target,
        r.repeats,
        r.requests
    );
    for b in &r.breaches {
        md.push_str(&format!("- **breach** {}\n", cell(b)));
    }
    if !r.breaches.is_empty() {
        md.push('\n');
    }
    md.push_str(
        "| counter | baseline | now | delta | limit | verdict |\n|---|---:|---:|---:|---|---|\n",
    );
    for row in &r.rows {
        let delta = match (row.baseline, row.now) {
            (Some(b), Some(n)) => format!("{:+.3}", n - b),
            _ => "-".into(),
        };
        let verdict = match row.verdict {
            Verdict::SoftBreach | Verdict::HardBreach => format!("**{}**", row.verdict.word()),
            _ if row.note.is_empty() => row.verdict.word().to_string(),
            _ => format!("{}: {}", row.verdict.word(), row.note),
        };
        md.push_str(&format!(
            "| {} | {} | {} | {delta} | {} | {} |\n",
            cell(&row.counter),
            num(row.baseline),
            num(row.now),
            cell(row.limit.as_deref().unwrap_or("-")),
            cell(&verdict)
        ));
    }
    md
}

fn xml(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The breach messages of a row: its own (soft or hard breach), or the
/// `max_new_sites` breach that names it.
fn failure(r: &GateReport, row: &Row) -> Option<String> {
    match row.verdict {
        Verdict::SoftBreach | Verdict::HardBreach => Some(row.note.clone()),
        Verdict::New => r
            .breaches
            .iter()
            .find(|b| b.contains(&format!("{}: new site", row.counter)))
            .cloned(),
        _ => None,
    }
}

/// JUnit XML: a test suite per gate, a test case per counter row.
pub fn junit(r: &GateReport) -> String {
    let fails: Vec<Option<String>> = r.rows.iter().map(|row| failure(r, row)).collect();
    let failures = fails.iter().filter(|f| f.is_some()).count();
    let skipped = r
        .rows
        .iter()
        .filter(|x| x.verdict == Verdict::Skipped)
        .count();
    let name = xml(&format!(
        "rig gate {} on {}",
        r.baseline.display(),
        r.target
    ));
    let mut x = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"rig gate\" tests=\"{n}\" failures=\"{failures}\" skipped=\"{skipped}\">\n  <testsuite name=\"{name}\" tests=\"{n}\" failures=\"{failures}\" skipped=\"{skipped}\" errors=\"0\">\n",
        n = r.rows.len()
    );
    for (row, fail) in r.rows.iter().zip(&fails) {
        let (bench, counter) = split(r, &row.counter);
        let text = format!(
            "baseline {}, now {}, limit {}",
            num(row.baseline),
            num(row.now),
            row.limit.as_deref().unwrap_or("-")
        );
        x.push_str(&format!(
            "    <testcase classname=\"{}\" name=\"{}\">\n",
            xml(&format!("rig.gate.{bench}")),
            xml(counter)
        ));
        if let Some(m) = fail {
            x.push_str(&format!(
                "      <failure message=\"{}\" type=\"{}\">{}</failure>\n",
                xml(m),
                row.verdict.word(),
                xml(&text)
            ));
        } else if row.verdict == Verdict::Skipped {
            x.push_str(&format!(
                "      <skipped message=\"{}\"/>\n",
                xml(&row.note)
            ));
        }
        x.push_str(&format!(
            "      <system-out>{}</system-out>\n    </testcase>\n",
            xml(&text)
        ));
    }
    x.push_str("  </testsuite>\n</testsuites>\n");
    x
}

/// Write the three files into the gate's output directory.
pub fn write_exports(dir: &std::path::Path, r: &GateReport) -> Result<()> {
    for (name, bytes) in [
        ("gate.bmf.json", serde_json::to_vec_pretty(&bmf(r))?),
        ("gate.md", markdown(r).into_bytes()),
        ("gate.junit.xml", junit(r).into_bytes()),
    ] {
        let p = dir.join(name);
        crate::fsutil::write_new(&p, &bytes).with_context(|| format!("writing {}", p.display()))?;
    }
    Ok(())
}
