//! The user family's lines: each probe a user named with its calls (and
//! its argument summed), then its call sites.

use std::fmt::Write as _;

use super::{per, table, Attribution};
use crate::report::user::UserProbeRow;

/// One block per probe: its total, then its sites (at most `top`).
pub(super) fn user_probes(out: &mut String, a: &Attribution, top: usize, n: Option<u64>) {
    let unit = if n.is_some() { "/req" } else { "" };
    for p in &a.user {
        let arg = match (p.arg, p.arg_sum) {
            (Some(i), Some(sum)) => format!(", argument {i} summed: {}{unit}", per_signed(sum, n)),
            _ => String::new(),
        };
        let inside = match p.ns_inside {
            Some(ns) => format!(
                ", {:.2} µs{unit} inside",
                ns as f64 / 1000.0 / n.unwrap_or(1).max(1) as f64
            ),
            None => String::new(),
        };
        let _ = writeln!(
            out,
            "\n{}: {} calls{unit}{arg}{inside} (probed at {})",
            p.probe,
            per(p.calls, n),
            p.probed_at.join(", ")
        );
        if p.sites.is_empty() {
            continue;
        }
        let mut header = vec!["call site".to_string(), format!("calls{unit}")];
        if p.arg.is_some() {
            header.push(format!("argument sum{unit}"));
        }
        let h: Vec<&str> = header.iter().map(String::as_str).collect();
        let mut t = table(&h);
        for s in p.sites.iter().take(top) {
            let mut row = vec![s.site.label(), per(s.calls, n)];
            if let Some(sum) = s.arg_sum {
                row.push(per_signed(sum, n));
            }
            t.add_row(row);
        }
        let _ = writeln!(out, "{t}");
        if let Some(by) = p.by {
            by_value(out, p, by.arg, top, n);
        }
    }
}

/// A probe's calls by the string its argument `arg` pointed at (at most
/// `top`, and how many more there were).
fn by_value(out: &mut String, p: &UserProbeRow, arg: u8, top: usize, n: Option<u64>) {
    let unit = if n.is_some() { "/req" } else { "" };
    let mut header = vec![format!("argument {arg}"), format!("calls{unit}")];
    if p.arg.is_some() {
        header.push(format!("argument sum{unit}"));
    }
    let h: Vec<&str> = header.iter().map(String::as_str).collect();
    let mut t = table(&h);
    for v in p.by_value.iter().take(top) {
        let mut row = vec![v.value.clone(), per(v.calls, n)];
        if let Some(sum) = v.arg_sum {
            row.push(per_signed(sum, n));
        }
        t.add_row(row);
    }
    let more = p.by_value.len().saturating_sub(top);
    let _ = writeln!(
        out,
        "{}: by argument {arg}, {} values{}\n{t}",
        p.probe,
        p.by_value.len(),
        if more > 0 {
            format!(" ({more} more not shown)")
        } else {
            String::new()
        }
    );
}

/// A summed argument per request (it may be negative).
fn per_signed(sum: i128, n: Option<u64>) -> String {
    match n {
        Some(n) if n > 0 => format!("{:.2}", sum as f64 / n as f64),
        _ => sum.to_string(),
    }
}
