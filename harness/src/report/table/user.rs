//! The user family's lines: each probe a user named with its calls (and
//! its argument summed), then its call sites, and its calls by a string
//! argument where it is counted by one.

use std::fmt::Write as _;

use super::{per, table, Attribution};
use crate::symbolize::Naming;

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
        // An interpreter's calls (`--interp-calls`) are by the function
        // they entered.
        let interpreted = p.sites.iter().all(|s| s.site.naming == Naming::Interpreted);
        let head = if interpreted {
            "function called"
        } else {
            "call site"
        };
        let sites = p.sites.iter().take(top);
        let sites = sites.map(|s| (s.site.label(), s.calls, s.arg_sum, None));
        let _ = writeln!(out, "{}", counts(head, sites, p.arg.is_some(), n));
        if let Some(by) = p.by {
            let more = p.by_value.len().saturating_sub(top);
            let values = p.by_value.iter().take(top).map(|v| {
                // Where most of them were made, and how many other places.
                let at = v.sites.first().map(|s| match v.sites.len() {
                    1 => s.site.label(),
                    k => format!("{} (+{} more)", s.site.label(), k - 1),
                });
                (v.value.clone(), v.calls, v.arg_sum, at)
            });
            let head = format!("argument {}", by.arg);
            let _ = writeln!(
                out,
                "{}: by argument {}, {} values{}\n{}",
                p.probe,
                by.arg,
                p.by_value.len(),
                if more > 0 {
                    format!(" ({more} more not shown)")
                } else {
                    String::new()
                },
                counts(&head, values, p.arg.is_some(), n)
            );
        }
    }
}

/// A table of (what, calls, argument sum) rows, per request when `n` is
/// the request count, with the sum's column when `summed`.
/// A row's last column, where given, is where its calls were made.
fn counts(
    what: &str,
    rows: impl Iterator<Item = (String, u64, Option<i128>, Option<String>)>,
    summed: bool,
    n: Option<u64>,
) -> comfy_table::Table {
    let unit = if n.is_some() { "/req" } else { "" };
    let rows: Vec<_> = rows.collect();
    let mut header = vec![what.to_string(), format!("calls{unit}")];
    if summed {
        header.push(format!("argument sum{unit}"));
    }
    let made = rows.iter().any(|r| r.3.is_some());
    if made {
        header.push("made at".to_string());
    }
    let h: Vec<&str> = header.iter().map(String::as_str).collect();
    let mut t = table(&h);
    for (label, calls, sum, at) in rows {
        let mut row = vec![label, per(calls, n)];
        if let Some(sum) = sum {
            row.push(per_signed(sum, n));
        }
        if made {
            row.push(at.unwrap_or_default());
        }
        t.add_row(row);
    }
    t
}

/// A summed argument per request (it may be negative).
fn per_signed(sum: i128, n: Option<u64>) -> String {
    match n {
        Some(n) if n > 0 => format!("{:.2}", sum as f64 / n as f64),
        _ => sum.to_string(),
    }
}
