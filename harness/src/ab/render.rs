//! `rig ab`'s outputs for people: the benchstat-like terminal table and
//! the markdown summary (`ab.md`).

use crate::stats::Comparison;

use super::*;

fn delta_text(c: &Comparison) -> String {
    match c.rel {
        Some(r) => format!("{:+.2}%", r * 100.0),
        None => format!("{:+.3}", c.diff_median),
    }
}

fn ci_text(c: &Comparison) -> String {
    c.ci.map_or("-".into(), |i| format!("{:.3} .. {:.3}", i.lo, i.hi))
}

/// The benchstat-like terminal table.
pub fn render(r: &AbReport) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "rig ab: arms {} — run order {}\n",
        r.arms.join(", "),
        r.order.join(" ")
    ));
    for i in 1..r.arms.len() {
        out.push_str(&arm_table(r, i));
    }
    for d in &r.code_differences {
        if d.sites.is_empty() {
            out.push_str(&format!(
                "{}: no call site differs between the arms\n",
                d.case
            ));
        }
        if d.varying_sites > 0 {
            out.push_str(&format!(
                "{}: {} call site(s) vary between runs of one arm (they move with timing): \
                 not taken as differences\n",
                d.case, d.varying_sites
            ));
        }
        for (site, meds) in &d.sites {
            let v = meds
                .iter()
                .map(|m| format!("{m:.3}"))
                .collect::<Vec<_>>()
                .join(" vs ");
            out.push_str(&format!("{}: {site}: {v} per request\n", d.case));
        }
    }
    if let Some(e) = &r.equality {
        for (i, d) in e.differences.iter().enumerate() {
            if d.is_empty() {
                out.push_str(&format!(
                    "outputs: {} answers byte-identical to {} on {} (masked: {})\n",
                    r.arms[i + 1],
                    r.arms[0],
                    e.paths.join(", "),
                    e.masks.join(", ")
                ));
            } else {
                out.push_str(&format!(
                    "outputs: {} differs from {}: {}\n",
                    r.arms[i + 1],
                    r.arms[0],
                    d.join("; ")
                ));
            }
        }
    }
    out.push_str(&format!("evidence: {}\n", r.evidence));
    for d in &r.drift {
        out.push_str(&format!("drift: {d}\n"));
    }
    for f in &r.failed_runs {
        out.push_str(&format!("failed: {f}\n"));
    }
    out.push_str(&format!("verdict: {}\n", r.verdict));
    out
}

/// The same, as markdown.
/// Arm `i` against the first arm: every metric that is not an identical
/// exact counter, then how many exact counters were identical.
fn arm_table(r: &AbReport, i: usize) -> String {
    use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
    let arm = &r.arms[i];
    let mut out = String::new();
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED).set_header(vec![
        "case".to_string(),
        "metric".to_string(),
        format!("{} median", r.arms[0]),
        format!("{arm} median"),
        "delta".to_string(),
        "95% CI of Δ".to_string(),
        "p".to_string(),
        "verdict".to_string(),
    ]);
    for m in &r.metrics {
        let c = &m.vs_first[i - 1];
        if m.values.exact
            && c.diff_median == 0.0
            && c.ci.is_some_and(|i| i.lo == 0.0 && i.hi == 0.0)
        {
            continue; // identical exact counters: summarized below
        }
        t.add_row(vec![
            format!(
                "{}{}",
                m.values.case,
                if m.values.control { " [control]" } else { "" }
            ),
            m.values.metric.clone(),
            format!("{:.3}", c.a_median),
            format!("{:.3}", c.b_median),
            delta_text(c),
            ci_text(c),
            c.p_value.map_or("-".into(), |p| format!("{p:.3}")),
            c.verdict.word().to_string(),
        ]);
    }
    out.push_str(&format!("{t}\n"));
    let same = r
        .metrics
        .iter()
        .filter(|m| m.values.exact && m.vs_first[i - 1].diff_median == 0.0)
        .count();
    out.push_str(&format!(
        "{same} exact counters identical between {} and {arm}\n",
        r.arms[0]
    ));
    let varying = r
        .metrics
        .iter()
        .filter(|m| m.values.counter && !m.values.exact)
        .count();
    if varying > 0 {
        out.push_str(&format!(
            "{varying} counter(s) not proven deterministic (they vary between runs of one arm, \
             or an arm has fewer than {} runs): compared by their spread, not as exact\n",
            super::analyse::PROOF_RUNS
        ));
    }
    out
}

pub fn markdown(r: &AbReport) -> String {
    let mut md = format!(
        "# rig ab: {}\n\nRun order: {}\n\n## Evidence\n\n{}\n\n## Verdict\n\n{}\n\n",
        r.arms.join(" vs "),
        r.order.join(" "),
        r.evidence,
        r.verdict
    );
    md.push_str("## Call sites that differ (per request, arm medians)\n\n| case | site | medians |\n|---|---|---|\n");
    for d in &r.code_differences {
        for (site, meds) in &d.sites {
            let v = meds
                .iter()
                .map(|m| format!("{m:.3}"))
                .collect::<Vec<_>>()
                .join(" / ");
            md.push_str(&format!(
                "| {} | {} | {} |\n",
                d.case,
                site.replace('|', "\\|"),
                v
            ));
        }
    }
    md.push_str("\n## Metrics\n\n| case | metric | arm | A median | B median | delta | 95% CI | p | verdict |\n|---|---|---|---|---|---|---|---|---|\n");
    for m in &r.metrics {
        for (i, c) in m.vs_first.iter().enumerate() {
            md.push_str(&format!(
                "| {} | {} | {} | {:.3} | {:.3} | {} | {} | {} | {} |\n",
                m.values.case,
                m.values.metric,
                r.arms[i + 1],
                c.a_median,
                c.b_median,
                delta_text(c),
                ci_text(c),
                c.p_value.map_or("-".into(), |p| format!("{p:.3}")),
                c.verdict.word()
            ));
        }
    }
    for d in &r.drift {
        md.push_str(&format!("\n**Drift:** {d}\n"));
    }
    md
}
