//! The terminal table and verdict lines of a gate report.

use super::*;

pub(crate) fn num(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.3}"))
}

/// The terminal table and the verdict lines.
pub fn render(r: &GateReport) -> String {
    let cases = match r.cases.as_slice() {
        [(id, _)] => format!("case {id}"),
        many => format!(
            "{} cases ({})",
            many.len(),
            many.iter()
                .map(|(_, k)| k.as_str())
                .collect::<Vec<_>>()
                .join("; ")
        ),
    };
    let mut o = format!(
        "rig gate: {} on {} — {cases}, {} runs × {} requests, counted pass only\n",
        r.baseline.display(),
        r.target,
        r.repeats,
        r.requests
    );
    if let Some(b) = &r.binary {
        o += &format!(
            "binary: {} (sha256 {}{})\n",
            b.path.display(),
            &b.sha256[..16.min(b.sha256.len())],
            b.profile
                .as_ref()
                .map_or(String::new(), |p| format!(", {p} build"))
        );
    }
    if let Some(i) = &r.instructions {
        o += &format!(
            "instructions: {} windows per case counted by {}; deterministic and compared within {}%\n",
            i.windows, i.why, i.tolerance_pct
        );
    }
    if let Some(r) = r.rare_events_per_req.filter(|r| *r > 0.0) {
        o += &format!(
            "event counts (calls, syscalls, faults) within {r}/req of each other are equal, bytes within {r} events' worth (rare_events_per_req)\n"
        );
    }
    o += &format!("{}\n", counter_table(r));
    let det = r.observed.iter().filter(|x| x.deterministic).count();
    o += &format!(
        "{det} of {} observed counters deterministic over {} runs (spread within each counter's tolerance)\n",
        r.observed.len(),
        r.repeats
    );
    if let Some(i) = &r.instructions {
        o += &format!("note: {}\n", i.note);
    }
    for row in r.rows.iter().filter(|x| x.verdict == Verdict::New) {
        o += &format!("new: {}\n", row.note);
    }
    if r.breaches.is_empty() {
        o += "gate: PASS\n";
    } else {
        for b in &r.breaches {
            o += &format!("BREACH {b}\n");
        }
        o += &format!("gate: FAIL ({} breaches)\n", r.breaches.len());
    }
    o
}

/// One row per counter: baseline, now, delta, limit, verdict.
fn counter_table(r: &GateReport) -> comfy_table::Table {
    use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED).set_header(vec![
        "counter", "baseline", "now", "delta", "limit", "verdict",
    ]);
    for row in &r.rows {
        let delta = match (row.baseline, row.now) {
            (Some(b), Some(n)) => format!("{:+.3}", n - b),
            _ => "-".into(),
        };
        let verdict = if row.verdict == Verdict::Skipped
            || (row.verdict == Verdict::Ok && !row.note.is_empty())
        {
            format!("{}: {}", row.verdict.word(), row.note)
        } else {
            row.verdict.word().to_string()
        };
        t.add_row(vec![
            row.counter.clone(),
            num(row.baseline),
            num(row.now),
            delta,
            row.limit.clone().unwrap_or("-".into()),
            verdict,
        ]);
    }
    t
}
