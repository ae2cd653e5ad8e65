//! `rig probes --pid P [PATTERN]`: what a running process offers to be
//! probed by name, as `bpftrace -l` lists it: the USDT markers of every
//! file it maps (provider, name, file, address, semaphore, arguments) and,
//! for a pattern, the functions whose names match it.
//!
//! A pattern is a glob (`*` any run of characters, `?` one) matched against
//! each spelling a user may write: `PROVIDER:NAME` and `FILE:PROVIDER:NAME`
//! for a marker, `NAME` and `FILE!NAME` for a function, FILE being the
//! mapped file's path or its base name. Function names are the symbol
//! tables' (`.symtab`, else `.dynsym`), demangled as rig's reports name
//! them (Rust without its hash, C++).

use anyhow::Result;

use crate::elf::usdt::Marker;
use crate::elf::ElfFacts;
use crate::process::maps::{basename, ProcMaps};

/// More matching functions than this are counted, not listed.
pub const MAX_FUNCTIONS: usize = 1000;

/// One mapped file's markers and matching functions.
struct Module {
    path: String,
    markers: Vec<Marker>,
    functions: Vec<String>,
    /// Functions it has in all (whether they match or not).
    all_functions: usize,
}

/// The command: read the process's mapped files and print what matches.
pub fn command(pid: u32, pattern: Option<&str>) -> Result<i32> {
    let maps = ProcMaps::read(pid)?;
    let mut modules = Vec::new();
    // Every spelling the pattern could have meant, for when it matches
    // nothing.
    let mut spellings: Vec<String> = Vec::new();
    for o in maps.objects().into_iter().filter(|o| o.executable) {
        let file = maps.readable_path(&o.path);
        // A mapped file that is not ELF (a font, a locale archive mapped
        // executable by mistake) has nothing to list.
        let Ok(facts) = ElfFacts::shared(&file) else {
            continue;
        };
        let markers = match crate::elf::usdt::markers(&file) {
            Ok(m) => m.0.clone(),
            Err(e) => {
                // Said, not dropped: a file whose notes rig cannot read may
                // have markers this list would otherwise hide.
                crate::errln!("rig: {}: {e:#}", o.path);
                Vec::new()
            }
        };
        let names = facts.function_names();
        let mut functions = Vec::new();
        if let Some(p) = pattern {
            let base = basename(&o.path);
            for m in &markers {
                spellings.push(format!("{}:{}", m.provider, m.name));
                spellings.push(format!("{base}:{}:{}", m.provider, m.name));
            }
            // Each name demangled once, for the match and the spellings.
            for n in names.iter().map(|n| display_name(n)) {
                if function_matches(p, &o.path, &n) {
                    functions.push(n.clone());
                }
                spellings.push(format!("{base}!{n}"));
                spellings.push(n);
            }
        }
        let markers = markers
            .into_iter()
            .filter(|m| pattern.is_none_or(|p| marker_matches(p, &o.path, m)))
            .collect();
        modules.push(Module {
            path: o.path,
            markers,
            functions,
            all_functions: names.len(),
        });
    }
    let matched = modules
        .iter()
        .any(|m| !m.markers.is_empty() || !m.functions.is_empty());
    let near = match pattern {
        Some(p) if !matched => closest(p, &spellings),
        _ => Vec::new(),
    };
    crate::outln!("{}", render(pid, pattern, &modules, &near));
    Ok(crate::exit::OK)
}

/// The spellings nearest to `pattern` (its glob characters left out), best
/// first: at most three, at least half alike, and none much farther than
/// the best. What to offer when it matched nothing.
fn closest(pattern: &str, spellings: &[String]) -> Vec<String> {
    let literal: String = pattern
        .chars()
        .filter(|c| !matches!(c, '*' | '?'))
        .collect();
    let mut scored: Vec<(f64, &String)> = spellings
        .iter()
        .map(|s| (strsim::normalized_levenshtein(&literal, s), s))
        .filter(|(score, _)| *score >= 0.5)
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.1.cmp(b.1)));
    scored.dedup_by(|a, b| a.1 == b.1);
    let best = scored.first().map_or(0.0, |s| s.0);
    scored
        .into_iter()
        .take_while(|(score, _)| *score >= best - 0.15)
        .take(3)
        .map(|(_, s)| s.clone())
        .collect()
}

fn render(pid: u32, pattern: Option<&str>, modules: &[Module], near: &[String]) -> String {
    let mut out = String::new();
    let markers: usize = modules.iter().map(|m| m.markers.len()).sum();
    for m in modules {
        for k in &m.markers {
            let sema = match k.semaphore {
                Some(s) => format!("semaphore {:#x}", s.vaddr),
                None => "no semaphore".to_string(),
            };
            let args = match &k.args {
                Ok(_) => k.args_text.clone(),
                Err(e) => format!("{} ({e})", k.args_text),
            };
            out.push_str(&format!(
                "usdt {}:{}  {}  {:#x}  {sema}  args: {}\n",
                k.provider,
                k.name,
                m.path,
                k.vaddr,
                if args.is_empty() { "none" } else { &args }
            ));
        }
    }
    let mut listed = 0usize;
    let matching: usize = modules.iter().map(|m| m.functions.len()).sum();
    for m in modules {
        for f in &m.functions {
            if listed == MAX_FUNCTIONS {
                break;
            }
            out.push_str(&format!("func {}!{f}\n", m.path));
            listed += 1;
        }
    }
    let files = modules.len();
    out.push_str(&format!(
        "pid {pid}: {markers} USDT marker(s) in {files} mapped file(s)"
    ));
    match pattern {
        Some(p) => {
            out.push_str(&format!(" match `{p}`; {matching} function(s) match it"));
            if matching > listed {
                out.push_str(&format!(
                    ", the first {listed} listed (narrow the pattern to see the rest)"
                ));
            }
            if !near.is_empty() {
                out.push_str(&format!("; closest: `{}`", near.join("`, `")));
            }
        }
        None => {
            let all: usize = modules.iter().map(|m| m.all_functions).sum();
            out.push_str(&format!(
                "; {all} function(s): give a PATTERN to list them (`malloc`, `libc.so.6!mem*`)"
            ));
        }
    }
    out
}

/// Whether `pattern` names marker `m` of the file mapped as `path`.
fn marker_matches(pattern: &str, path: &str, m: &Marker) -> bool {
    let pn = format!("{}:{}", m.provider, m.name);
    glob(pattern, &pn)
        || glob(pattern, &format!("{}:{pn}", basename(path)))
        || glob(pattern, &format!("{path}:{pn}"))
}

/// Whether `pattern` names function `name` of the file mapped as `path`.
fn function_matches(pattern: &str, path: &str, name: &str) -> bool {
    glob(pattern, name)
        || glob(pattern, &format!("{}!{name}", basename(path)))
        || glob(pattern, &format!("{path}!{name}"))
}

/// A symbol's name as rig's reports print it: Rust demangled without its
/// hash, C++ demangled, anything else as it is.
pub fn display_name(raw: &str) -> String {
    if let Ok(d) = rustc_demangle::try_demangle(raw) {
        return format!("{d:#}");
    }
    if raw.starts_with("_Z") {
        if let Ok(Ok(d)) = cpp_demangle::Symbol::new(raw).map(|s| s.demangle()) {
            return d;
        }
    }
    raw.to_string()
}

/// Glob match: `*` any run of characters (also none), `?` one character,
/// anything else itself.
pub fn glob(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    // The classic two-pointer match, backtracking to the last `*`.
    let (mut i, mut j) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while j < t.len() {
        if i < p.len() && (p[i] == '?' || p[i] == t[j]) {
            i += 1;
            j += 1;
        } else if i < p.len() && p[i] == '*' {
            star = Some((i, j));
            i += 1;
        } else if let Some((si, sj)) = star {
            i = si + 1;
            j = sj + 1;
            star = Some((si, sj + 1));
        } else {
            return false;
        }
    }
    p[i..].iter().all(|&c| c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glob_matches_runs_single_characters_and_literals() {
        for (p, t) in [
            ("postgresql:query__*", "postgresql:query__start"),
            ("*:transaction__start", "postgresql:transaction__start"),
            ("mem*", "memcpy"),
            ("*", ""),
            ("a?c", "abc"),
            ("*a*b*", "xxaxxbxx"),
            ("malloc", "malloc"),
        ] {
            assert!(glob(p, t), "{p} ~ {t}");
        }
        for (p, t) in [
            ("malloc", "malloc_usable_size"),
            ("mem*", "xmemcpy"),
            ("a?c", "ac"),
            ("*a*b", "xxaxxbxx"),
            ("query__*", "postgresql:query__start"),
        ] {
            assert!(!glob(p, t), "{p} !~ {t}");
        }
    }

    #[test]
    fn a_pattern_that_matches_nothing_is_offered_the_nearest_names() {
        let names: Vec<String> = [
            "python:function__entry",
            "python:function__return",
            "python:gc__start",
            "malloc",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(
            closest("python:functon__entry", &names),
            ["python:function__entry"]
        );
        assert_eq!(
            closest("python:function__*", &names),
            ["python:function__entry", "python:function__return"]
        );
        assert_eq!(closest("mallco*", &names), ["malloc"]);
        assert!(closest("zzzzzzzz", &names).is_empty());
    }

    #[test]
    fn names_are_demangled_as_reports_print_them() {
        assert_eq!(
            display_name("_ZN4core3fmt5write17h0123456789abcdefE"),
            "core::fmt::write"
        );
        assert_eq!(
            display_name("_ZNSt6vectorIiSaIiEE9push_backERKi"),
            "std::vector<int, std::allocator<int> >::push_back(int const&)"
        );
        assert_eq!(
            display_name("ngx_http_core_run_phases"),
            "ngx_http_core_run_phases"
        );
    }

    #[test]
    fn a_pattern_names_a_marker_or_function_by_every_spelling() {
        let m = Marker {
            provider: "postgresql".into(),
            name: "query__start".into(),
            vaddr: 0,
            file_offset: 0,
            semaphore: None,
            args_text: String::new(),
            args: Ok(Vec::new()),
        };
        let path = "/usr/lib/postgresql/15/bin/postgres";
        for p in [
            "postgresql:query__*",
            "postgres:postgresql:query__start",
            "/usr/lib/postgresql/15/bin/postgres:postgresql:*",
        ] {
            assert!(marker_matches(p, path, &m), "{p}");
        }
        assert!(!marker_matches("python:*", path, &m));
        let libc = "/usr/lib/x86_64-linux-gnu/libc.so.6";
        assert!(function_matches("libc.so.6!mem*", libc, "memcpy"));
        assert!(function_matches("malloc", libc, "malloc"));
        assert!(!function_matches("libm.so.6!*", libc, "malloc"));
    }
}
