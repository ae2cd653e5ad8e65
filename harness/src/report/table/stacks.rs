//! The "top stacks" tables: per family, the events merged by user site and
//! the frames above it.

use std::fmt::Write as _;

use super::{per, table};
use crate::probe::Family;
use crate::report::stacks::StackSection;
use crate::report::Attribution;
use crate::symbolize::Naming;

/// The top stacks of each family: the user site (first frame outside the
/// allocator and standard-library wrappers) and the frames that called it.
pub fn stacks(a: &Attribution, top: usize, n: Option<u64>) -> String {
    let st = &a.stacks;
    let mut out = String::new();
    if !st.enabled || st.rows.is_empty() {
        return out;
    }
    let unit = if n.is_some() { "/req" } else { "" };
    for family in crate::probe::Family::ALL {
        let merged = merged_rows(st, family);
        if merged.is_empty() {
            continue;
        }
        let amount = match family {
            crate::probe::Family::Alloc | crate::probe::Family::Copy => Some("bytes"),
            crate::probe::Family::Locks | crate::probe::Family::Sched => Some("µs"),
            _ => None,
        };
        let mut header = vec![format!("count{unit}")];
        if let Some(a) = amount {
            header.push(format!("{a}{unit}"));
        }
        header.extend(["event".into(), "user site".into(), "called from".into()]);
        let mut t = table(&header.iter().map(String::as_str).collect::<Vec<_>>());
        for (event, stack, count, amt) in merged.iter().take(top) {
            let (site, callers, incomplete) = match stack {
                Shown::RigProbes => (RIG_PROBES.to_string(), String::new(), false),
                Shown::Stack(stack) => stack_cells(st, stack),
            };
            let mut row = vec![per(*count, n)];
            if let Some(a) = amount {
                row.push(if a == "µs" {
                    format!("{:.1}", *amt as f64 / 1000.0 / n.unwrap_or(1).max(1) as f64)
                } else {
                    per(*amt, n)
                });
            }
            row.push(event.clone());
            row.push(if incomplete {
                format!("{site} [incomplete]")
            } else {
                site
            });
            row.push(callers);
            t.add_row(row);
        }
        let _ = writeln!(
            out,
            "
{family}: top stacks (by user site)
{t}"
        );
    }
    for l in &st.limits {
        let _ = writeln!(out, "warning: stacks INCOMPLETE: {l}");
    }
    if !st.stack_failures.is_empty() {
        let _ = writeln!(
            out,
            "note: stacks that could not be taken (events still counted): {:?}",
            st.stack_failures
        );
    }
    let lost: u64 = st.incomplete_events.values().sum();
    if lost > 0 {
        let _ = writeln!(
            out,
            "note: {lost} events have incomplete stacks ({:?}); see `stacks` in the JSON for why",
            st.incomplete_events
        );
    }
    out
}

/// The label of the row that holds what happened in rig's own probe
/// handling (`StackRow::rig_probes`): rig's cost, never a user site.
pub const RIG_PROBES: &str = "rig's probes (uprobe handling, not the server's code)";

/// What a merged row shows: a stack (its user site and callers), or rig's
/// probe handling.
enum Shown {
    Stack(Option<String>),
    RigProbes,
}

/// Rows of one family merged over processes, size classes and the frames
/// inside the wrappers: one line per (event, user site, the frames above
/// it), as (event, stack, count, amount), most frequent first; rig's
/// probe handling is one line of its own per event.
fn merged_rows(st: &StackSection, family: Family) -> Vec<(String, Shown, u64, u64)> {
    let mut merged: Vec<(String, Shown, u64, u64)> = Vec::new();
    let shown = |stack: &Option<String>| -> Vec<String> {
        match stack.as_ref().and_then(|s| st.stacks.get(s)) {
            Some(f) => f.frames[f.user_site.min(f.frames.len())..]
                .iter()
                .take(4)
                .map(|s| s.label())
                .chain(f.incomplete.iter().map(|s| s.to_string()))
                .collect(),
            None => Vec::new(),
        }
    };
    let mut at: std::collections::HashMap<(String, Vec<String>), usize> =
        std::collections::HashMap::new();
    for r in st.rows.iter().filter(|r| r.family == family) {
        let key = match r.rig_probes {
            true => (r.event.clone(), vec![RIG_PROBES.to_string()]),
            false => (r.event.clone(), shown(&r.stack)),
        };
        match at.get(&key) {
            Some(&i) => {
                merged[i].2 += r.count;
                merged[i].3 = merged[i].3.wrapping_add(r.amount);
            }
            None => {
                at.insert(key, merged.len());
                let s = match r.rig_probes {
                    true => Shown::RigProbes,
                    false => Shown::Stack(r.stack.clone()),
                };
                merged.push((r.event.clone(), s, r.count, r.amount));
            }
        }
    }
    merged.sort_by(|a, b| b.2.cmp(&a.2).then(b.3.cmp(&a.3)));
    merged
}

/// A stack's user site (with file:line), its next two callers (an
/// interpreted site's: the next two interpreted frames), and whether the
/// walk was incomplete.
fn stack_cells(st: &StackSection, stack: &Option<String>) -> (String, String, bool) {
    let frames = stack.as_ref().and_then(|s| st.stacks.get(s));
    match frames {
        Some(f) => {
            let site = f
                .frames
                .get(f.user_site)
                .map(|s| match (&s.function, s.file_line()) {
                    // An interpreted function's name is short already
                    // (`work.<locals>.<genexpr>` is no generic argument).
                    _ if s.naming == Naming::Interpreted => s.label(),
                    (Some(func), Some(fl)) => format!("{} ({fl})", short_name(func)),
                    (Some(func), None) => short_name(func),
                    _ => s.label(),
                })
                .unwrap_or_default();
            // A Python site's callers are the Python functions that
            // called it, past the interpreter's C between them.
            let python = f
                .frames
                .get(f.user_site)
                .is_some_and(|s| s.naming == Naming::Interpreted);
            let callers: Vec<String> = f
                .frames
                .iter()
                .skip(f.user_site + 1)
                .filter(|s| !python || s.naming == Naming::Interpreted)
                .take(2)
                .map(|s| match s.function.as_deref() {
                    Some(f) if s.naming == Naming::Interpreted => f.to_string(),
                    Some(f) => short_name(f),
                    None => s.label(),
                })
                .collect();
            (site, callers.join(" ← "), !f.incomplete.is_empty())
        }
        None => ("(no stack)".to_string(), String::new(), true),
    }
}

/// A function name short enough for a table: generic arguments dropped,
/// `<T as Trait>::f` shown as `T::f`, and a long path cut to its crate and
/// last two segments (`hyper::…::Server::poll_msg`). The JSON keeps the
/// whole name.
pub fn short_name(name: &str) -> String {
    // `<A as B>::rest` -> `A::rest`
    let mut s = name.to_string();
    if let Some(inner) = name.strip_prefix('<') {
        let mut depth = 0usize;
        let mut split = None;
        for (i, c) in inner.char_indices() {
            match c {
                '<' => depth += 1,
                '>' if depth == 0 => {
                    split = Some(i);
                    break;
                }
                '>' => depth -= 1,
                ' ' if depth == 0 && inner[i..].starts_with(" as ") => {
                    let end = inner[i..].find(">::").map(|e| i + e);
                    if let Some(e) = end {
                        s = format!("{}{}", &inner[..i], &inner[e + 1..]);
                    }
                    break;
                }
                _ => {}
            }
        }
        if let Some(i) = split {
            s = format!("{}{}", &inner[..i], &inner[i + 1..]);
        }
    }
    // Drop generic arguments.
    let mut out = String::with_capacity(s.len());
    let mut depth = 0usize;
    for c in s.chars() {
        match c {
            '<' => depth += 1,
            '>' if depth > 0 => depth -= 1,
            _ if depth == 0 => out.push(c),
            _ => {}
        }
    }
    let out = out.trim_start_matches('&').to_string();
    let parts: Vec<&str> = out.split("::").collect();
    if parts.len() > 4 {
        format!("{}::…::{}", parts[0], parts[parts.len() - 2..].join("::"))
    } else {
        out
    }
}
