//! Names as a user writes them for `--usdt`, `--func` and `rig probes`:
//! globs over symbol names as rig's reports print them (demangled), and
//! the nearest spellings to offer when a pattern matches nothing.

use crate::elf::usdt::Marker;
use crate::process::maps::basename;

/// The spellings nearest to `pattern` (its glob characters left out), best
/// first: at most three, at least half alike, and none much farther than
/// the best. What to offer when it matched nothing.
pub fn closest(pattern: &str, spellings: &[String]) -> Vec<String> {
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

/// Whether `pattern` names marker `m` of the file mapped as `path`:
/// `PROVIDER:NAME`, or `BINARY:PROVIDER:NAME` with BINARY the file's path
/// or base name (each part a glob).
pub fn marker_matches(pattern: &str, path: &str, m: &Marker) -> bool {
    let pn = format!("{}:{}", m.provider, m.name);
    match pattern.rsplitn(3, ':').collect::<Vec<_>>()[..] {
        [_, _, binary] => {
            let rest = &pattern[binary.len() + 1..];
            in_module(binary, path) && glob(rest, &pn)
        }
        _ => glob(pattern, &pn),
    }
}

/// Whether `pattern` names function `name` of the file mapped as `path`:
/// `NAME`, or `MODULE!NAME` with MODULE the file's path or base name (each
/// part a glob).
pub fn function_matches(pattern: &str, path: &str, name: &str) -> bool {
    match pattern.split_once('!') {
        Some((module, rest)) if !module.is_empty() => in_module(module, path) && glob(rest, name),
        _ => glob(pattern, name),
    }
}

/// Whether a module pattern names the file mapped as `path`.
pub fn in_module(pattern: &str, path: &str) -> bool {
    glob(pattern, path) || glob(pattern, basename(path))
}

#[cfg(test)]
mod tests {
    use super::*;

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
        // A name pattern is matched against names alone: `calib_*` is not
        // every function of a file called calib_server.
        assert!(!function_matches("calib_*", "/x/calib_server", "main"));
        assert!(function_matches("calib_*!main", "/x/calib_server", "main"));
        assert!(!marker_matches("postgres:*", path, &m));
    }

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
}
