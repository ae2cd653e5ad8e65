//! `rig probes --pid P [PATTERN]`: what a running process offers to be
//! probed by name, as `bpftrace -l` lists it: the USDT markers of every
//! file it maps (provider, name, file, address, semaphore, arguments), an
//! interpreter whose calls `--interp-calls` counts, and, for a pattern,
//! the functions whose names match it.
//!
//! A pattern is a glob (`*` any run of characters, `?` one) matched against
//! each spelling a user may write: `PROVIDER:NAME` and `FILE:PROVIDER:NAME`
//! for a marker, `NAME` and `FILE!NAME` for a function, FILE being the
//! mapped file's path or its base name. Function names are the symbol
//! tables' (`.symtab`, else `.dynsym`; Go's function table in Go code),
//! demangled as rig's reports name them (Rust without its hash, C++).

use anyhow::Result;

use crate::elf::usdt::Marker;
use crate::elf::ElfFacts;
use crate::probe::user::names::{closest, display_name, function_matches, marker_matches};
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
    /// An interpreter's calls, as `--interp-calls` counts them: the
    /// language, or why rig cannot count them there.
    interp_calls: Option<Result<&'static str, String>>,
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
        // Go's functions by its own table (a stripped Go binary has no
        // symbol table), every other module's by its symbol tables.
        let names = crate::probe::user::function_names(&o.path, &file, &facts);
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
        let interp_calls = crate::probe::user::interp_calls(&o.path, &file, &facts);
        modules.push(Module {
            path: o.path,
            markers,
            functions,
            all_functions: names.len(),
            interp_calls,
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
    for m in modules.iter().filter(|_| pattern.is_none()) {
        match &m.interp_calls {
            Some(Ok(language)) => out.push_str(&format!(
                "interp-calls {language}  {}  (every call by function)\n",
                m.path
            )),
            Some(Err(why)) => out.push_str(&format!("interp-calls: {}: {why}\n", m.path)),
            None => {}
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
