//! Probes a user names: USDT markers (`--usdt [BINARY:]PROVIDER:NAME[@N][#S[/L]]`),
//! functions (`--func [MODULE!]PATTERN`) and an interpreter's calls
//! (`--interp-calls LANGUAGE`), found in the modules a process maps and
//! counted per request like any family (`Family::User`).
//!
//! In: the specs as written and a process's memory map. Out: the sites a
//! probe goes at ([`UserSite`]: a marker's `nop`, a function's entry, an
//! interpreter's call handler), each
//! with the probe it counts for, its semaphore and the argument it sums;
//! or why a spec cannot be counted (nothing matches it, with the nearest
//! names; more functions than [`MAX_SITES`]; an argument the marker does
//! not have). Each marker or function a pattern matches is a probe of its
//! own in the report: `usdt:postgresql:query__start`, `func:malloc`.

mod markers;
pub mod names;

use serde::{Deserialize, Serialize};

use crate::elf::usdt::Marker;
use crate::elf::ElfFacts;
use crate::process::maps::{basename, ProcMaps};
use crate::runtime::{FuncEntry, ModuleKind};
pub use markers::arg_location;
use markers::marker_site;
use names::{closest, display_name, function_matches, marker_matches};
use rig_ebpf::abi::{user_arg, UserArg, UserByArg};

/// One pattern may match at most this many functions or markers: more is
/// refused with the count (each is a uprobe the kernel takes about 0.1 s
/// to remove, and a site table of `user_arg::SITES` for all).
pub const MAX_SITES: usize = 1000;

/// A probe as the user wrote it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UserProbe {
    /// `[BINARY:]PROVIDER:NAME`, globs in each part, the argument to sum
    /// (numbered from 0, as bpftrace's `arg0`), and the string argument its
    /// calls are also counted by (`#S[/L]`).
    Usdt {
        pattern: String,
        arg: Option<u8>,
        #[serde(default)]
        by: Option<ByArg>,
    },
    /// `[MODULE!]PATTERN` over function names as reports print them;
    /// `timed`: also the time inside each call (`--func-time`).
    Func { pattern: String, timed: bool },
    /// A function declared an application allocator (`--alloc-func
    /// [MODULE!]NAME[@N]`, its size argument N from 0) or its free
    /// (`--free-func [MODULE!]NAME`): counted by the alloc family as a
    /// layer beside the heap's (`runtime::pools`), not by this one.
    Alloc {
        name: String,
        size_arg: Option<u8>,
        free: bool,
    },
    /// The calls of every function an interpreter runs, by function
    /// (`--interp-calls LANGUAGE`): at the interpreter's handler of a
    /// call's first instruction (`runtime::interp_calls`).
    InterpCalls { language: String },
}

/// A marker's string argument its calls are counted by (`#S[/L]`): the
/// argument that points at the string, and the one that gives its length
/// when the string is not NUL-terminated (the JVM's class names).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ByArg {
    pub arg: u8,
    #[serde(default)]
    pub len: Option<u8>,
}

impl std::fmt::Display for ByArg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.len {
            Some(l) => write!(f, "#{}/{l}", self.arg),
            None => write!(f, "#{}", self.arg),
        }
    }
}

impl UserProbe {
    /// `--usdt [BINARY:]PROVIDER:NAME[@N][#S[/L]]`.
    pub fn usdt(spec: &str) -> Result<UserProbe, String> {
        let number = |n: &str| n.parse::<u8>().ok().filter(|n| *n < 12);
        let (spec_at, by) = match spec.rsplit_once('#') {
            Some((p, b)) => {
                let (arg, len) = match b.split_once('/') {
                    Some((a, l)) => (number(a), Some(number(l))),
                    None => (number(b), None),
                };
                let bad = || {
                    format!(
                        "`{spec}`: after `#` comes the number of the string argument to count \
                         by, 0 to 11, and `/N` the number of its length argument when the \
                         string has no NUL"
                    )
                };
                let len = len.map(|l| l.ok_or_else(bad)).transpose()?;
                (
                    p,
                    Some(ByArg {
                        arg: arg.ok_or_else(bad)?,
                        len,
                    }),
                )
            }
            None => (spec, None),
        };
        let spec = spec_at;
        let (pattern, arg) = match spec.rsplit_once('@') {
            Some((p, n)) => {
                let n: u8 = n.parse().ok().filter(|n| *n < 12).ok_or_else(|| {
                    format!("`{spec}`: after `@` comes the number of the argument to sum, 0 to 11")
                })?;
                (p, Some(n))
            }
            None => (spec, None),
        };
        if pattern.split(':').filter(|p| !p.is_empty()).count() < 2 {
            return Err(format!(
                "`{spec}` is not `[BINARY:]PROVIDER:NAME` (e.g. `postgresql:query__start`; \
                 `rig probes --pid PID` lists a process's markers)"
            ));
        }
        Ok(UserProbe::Usdt {
            pattern: pattern.to_string(),
            arg,
            by,
        })
    }

    /// `--func [MODULE!]PATTERN`.
    pub fn func(spec: &str) -> Result<UserProbe, String> {
        if spec.trim().is_empty() || spec.ends_with('!') {
            return Err(format!(
                "`{spec}` names no function: `--func [MODULE!]PATTERN`, e.g. \
                 `ngx_http_core_run_phases` or `libc.so.6!mem*`"
            ));
        }
        Ok(UserProbe::Func {
            pattern: spec.to_string(),
            timed: false,
        })
    }

    /// `--alloc-func [MODULE!]NAME[@N]` (`free`: `--free-func
    /// [MODULE!]NAME`): one function, no glob.
    pub fn alloc(spec: &str, free: bool) -> Result<UserProbe, String> {
        let flag = if free { "free-func" } else { "alloc-func" };
        let (name, size_arg) = match spec.rsplit_once('@') {
            Some(_) if free => {
                return Err(format!(
                    "{flag} `{spec}`: a free takes no size argument; give the function alone"
                ))
            }
            Some((name, n)) => {
                let n = n
                    .parse::<u8>()
                    .ok()
                    .filter(|n| crate::runtime::pools::size_program(Some(*n)).is_some())
                    .ok_or_else(|| {
                        format!(
                            "{flag} `{spec}`: after `@` comes the number of the argument that \
                             holds the size, 0 to 5 (the ones passed in registers)"
                        )
                    })?;
                (name, Some(n))
            }
            None => (spec, None),
        };
        let bare = name.rsplit('!').next().unwrap_or(name);
        if bare.trim().is_empty() || bare.contains(['*', '?', ' ']) {
            return Err(format!(
                "{flag} `{spec}` names no one function: `[MODULE!]NAME`, e.g. `arena_alloc@1`"
            ));
        }
        Ok(UserProbe::Alloc {
            name: name.to_string(),
            size_arg,
            free,
        })
    }

    /// `--interp-calls LANGUAGE`: the languages whose interpreters rig
    /// counts calls in.
    pub fn interp_calls(language: &str) -> Result<UserProbe, String> {
        match crate::runtime::CALL_LANGUAGES.contains(&language) {
            true => Ok(UserProbe::InterpCalls {
                language: language.to_string(),
            }),
            false => Err(format!(
                "interp-calls `{language}`: rig counts the calls of `{}`",
                crate::runtime::CALL_LANGUAGES.join("`, `")
            )),
        }
    }

    /// Whether the user family counts it (markers, functions, an
    /// interpreter's calls); a declared allocator is the alloc family's.
    pub fn counted_by_user_family(&self) -> bool {
        !matches!(self, UserProbe::Alloc { .. })
    }

    /// The lists of a target spec, a matrix's `[probes]` or the flags,
    /// each checked for its form.
    pub fn of_spec(n: Named<'_>) -> Result<Vec<UserProbe>, String> {
        let mut out = Vec::new();
        for u in n.usdt {
            out.push(UserProbe::usdt(u).map_err(|e| format!("usdt {e}"))?);
        }
        for f in n.func {
            let mut p = UserProbe::func(f).map_err(|e| format!("func {e}"))?;
            if let UserProbe::Func { timed, .. } = &mut p {
                *timed = n.func_time;
            }
            out.push(p);
        }
        if n.func_time && n.func.is_empty() {
            return Err("func-time without a function to time: name one with func".into());
        }
        for l in n.interp_calls {
            out.push(UserProbe::interp_calls(l)?);
        }
        for (list, free) in [(n.alloc_func, false), (n.free_func, true)] {
            for spec in list {
                out.push(UserProbe::alloc(spec, free)?);
            }
        }
        Ok(out)
    }

    /// The spec as written on the command line.
    pub fn spec(&self) -> String {
        match self {
            UserProbe::Usdt { pattern, arg, by } => format!(
                "--usdt {pattern}{}{}",
                arg.map(|n| format!("@{n}")).unwrap_or_default(),
                by.map(|b| b.to_string()).unwrap_or_default()
            ),
            UserProbe::Func {
                pattern,
                timed: false,
            } => format!("--func {pattern}"),
            UserProbe::Func {
                pattern,
                timed: true,
            } => format!("--func {pattern} --func-time"),
            UserProbe::Alloc {
                name, free: true, ..
            } => format!("--free-func {name}"),
            UserProbe::Alloc {
                name,
                size_arg: Some(n),
                ..
            } => format!("--alloc-func {name}@{n}"),
            UserProbe::Alloc { name, .. } => format!("--alloc-func {name}"),
            UserProbe::InterpCalls { language } => format!("--interp-calls {language}"),
        }
    }
}

/// The probes named by `$s`: a target spec, a matrix's `[probes]` or the
/// flags, each of which has the fields of [`Named`].
#[macro_export]
macro_rules! named_probes {
    ($s:expr) => {
        $crate::probe::user::Named {
            usdt: &$s.usdt,
            func: &$s.func,
            func_time: $s.func_time,
            alloc_func: &$s.alloc_func,
            free_func: &$s.free_func,
            interp_calls: &$s.interp_calls,
        }
    };
}

/// The probes a target spec, a matrix's `[probes]` or the flags name, as
/// written: `usdt`, `func` (`func_time`: timed) and the application
/// allocators `alloc_func`, `free_func`, and the languages whose calls are
/// counted, `interp_calls`.
#[derive(Clone, Copy, Debug, Default)]
pub struct Named<'a> {
    pub usdt: &'a [String],
    pub func: &'a [String],
    pub func_time: bool,
    pub alloc_func: &'a [String],
    pub free_func: &'a [String],
    pub interp_calls: &'a [String],
}

impl Named<'_> {
    /// Whether it declares an application allocator (counted by the alloc
    /// family, which must be on).
    pub fn declares_allocators(&self) -> bool {
        !self.alloc_func.is_empty() || !self.free_func.is_empty()
    }
}

/// How a site's probe fires.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SiteAt {
    /// On a USDT marker's `nop` (its code is the call site).
    Marker,
    /// At a function's entry, moved past instructions that leave the stack
    /// alone (its caller is the call site).
    FuncEntry,
    /// On a Go function's stack check (its caller is the call site).
    StackCheck,
    /// On an interpreter's handler of a call's first instruction (the
    /// interpreted function it enters is the site).
    InterpCall,
}

impl SiteAt {
    /// The BPF program that counts there (user.bpf.c).
    pub fn program(self) -> &'static str {
        match self {
            SiteAt::Marker => "rig_user_usdt",
            SiteAt::FuncEntry => "rig_user_func",
            SiteAt::StackCheck => "rig_user_go",
            SiteAt::InterpCall => "rig_user_interp",
        }
    }
}

/// One place a user probe is attached; its index in the probe set's table
/// is the attach cookie.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct UserSite {
    /// The probe it counts for: `usdt:PROVIDER:NAME` or `func:NAME`.
    pub probe: String,
    /// The argument summed (`--usdt …@N`), numbered from 0.
    pub arg: Option<u8>,
    /// The string argument its calls are also counted by (`--usdt …#S`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub by: Option<ByArg>,
    /// The module as in maps.
    pub module: String,
    /// Where the probe goes (before placement moves a function's).
    pub file_offset: u64,
    pub at: SiteAt,
    /// The marker's semaphore, as a file offset: the kernel raises it while
    /// the probe is in.
    pub semaphore: Option<u64>,
    /// The time inside each call is added (`--func-time`): a return probe
    /// at the same place.
    pub timed: bool,
    /// An IFUNC (glibc's `memcpy`): `file_offset` is its resolver's, and the
    /// probe goes on the implementation the process's resolver chose.
    pub ifunc: bool,
    /// Where the summed argument is, for the BPF program.
    #[serde(skip)]
    pub arg_abi: UserArg,
    /// Where the string counted by is, for the BPF program.
    #[serde(skip)]
    pub by_abi: UserByArg,
    /// Why the marker does not fire as its name says, when its runtime
    /// knows (`runtime::marker_caveat`): the user family is incomplete.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub caveat: Option<String>,
    /// Probed in every process running its file, filtered to the tree in
    /// the kernel (`probe::attach`'s user probes in a tree's executable):
    /// a process the tree forks is counted from its first instruction.
    #[serde(default)]
    pub everywhere: bool,
}

/// What matched a process's map, and what did not.
#[derive(Debug, Default)]
pub struct Resolution {
    pub sites: Vec<UserSite>,
    /// Specs that matched nothing here, with the nearest names.
    pub unmatched: Vec<(UserProbe, Vec<String>)>,
    /// What could not be read (a module's notes) or was left out (an
    /// IFUNC whose implementation the caller resolves).
    pub notes: Vec<String>,
}

/// A spec that cannot be counted as written.
#[derive(Debug, thiserror::Error)]
pub enum UserProbeError {
    #[error("{spec} matches nothing in pid {pid}{}", nearest(.closest))]
    NoMatch {
        spec: String,
        pid: u32,
        closest: Vec<String>,
    },
    #[error("{spec} matches {count} {what} in pid {pid}, more than {MAX_SITES}: narrow the pattern (`rig probes --pid {pid} PATTERN` lists them)")]
    TooMany {
        spec: String,
        pid: u32,
        count: usize,
        what: &'static str,
    },
    #[error("{spec}: {why}")]
    Argument { spec: String, why: String },
}

fn nearest(near: &[String]) -> String {
    match near {
        [] => " (`rig probes --pid PID PATTERN` lists what a process offers)".to_string(),
        n => format!("; closest: `{}`", n.join("`, `")),
    }
}

/// The sites of `probes` in the executable modules of `maps`.
pub fn resolve(
    pid: u32,
    maps: &ProcMaps,
    probes: &[UserProbe],
) -> Result<Resolution, UserProbeError> {
    let mut out = Resolution::default();
    let mut matched = vec![0usize; probes.len()];
    for o in maps.objects().into_iter().filter(|o| o.executable) {
        let open = maps.readable_path(&o.path);
        let Ok(facts) = ElfFacts::shared(&open) else {
            continue;
        };
        let kind = ModuleKind::of_file(&o.path, &open).ok();
        let mut markers: Option<Vec<Marker>> = None;
        let mut functions: Option<Vec<(String, String)>> = None;
        for (i, p) in probes.iter().enumerate() {
            match p {
                UserProbe::Usdt { pattern, arg, by } => {
                    let ms =
                        markers.get_or_insert_with(|| match crate::elf::usdt::markers(&open) {
                            Ok(m) => m.0.clone(),
                            Err(e) => {
                                out.notes
                                    .push(format!("{}: USDT notes unreadable: {e:#}", o.path));
                                Vec::new()
                            }
                        });
                    for m in ms.iter().filter(|m| marker_matches(pattern, &o.path, m)) {
                        matched[i] += 1;
                        let mut site = marker_site(p, &o.path, &facts, m, *arg, *by)?;
                        site.caveat = kind.and_then(|kind| {
                            let module = crate::runtime::Module {
                                kind,
                                facts: &facts,
                            };
                            crate::runtime::marker_caveat(&module, &open, (&m.provider, &m.name))
                        });
                        out.sites.push(site);
                    }
                }
                UserProbe::Alloc { .. } => {}
                UserProbe::InterpCalls { language } => {
                    let Some(kind) = kind else { continue };
                    let m = crate::runtime::Module {
                        kind,
                        facts: &facts,
                    };
                    match crate::runtime::interp_calls(&m, &open) {
                        Some(Ok(c)) if c.language == language => {
                            matched[i] += 1;
                            out.sites.extend(
                                c.file_offsets
                                    .iter()
                                    .map(|&at| interp_call_site(&c, &o.path, at)),
                            );
                        }
                        Some(Err(why)) => {
                            return Err(UserProbeError::Argument {
                                spec: p.spec(),
                                why: format!("{} in pid {pid}: {why}", o.path),
                            })
                        }
                        _ => {}
                    }
                }
                UserProbe::Func { pattern, timed } => {
                    let Some(kind) = kind else { continue };
                    let fs = functions.get_or_insert_with(|| {
                        crate::runtime::function_names(&open, kind, &facts)
                            .into_iter()
                            .map(|raw| (display_name(&raw), raw))
                            .collect()
                    });
                    for (shown, raw) in fs.iter() {
                        if !function_matches(pattern, &o.path, shown) {
                            continue;
                        }
                        matched[i] += 1;
                        if matched[i] > MAX_SITES {
                            continue;
                        }
                        if *timed {
                            let m = crate::runtime::Module {
                                kind,
                                facts: &facts,
                            };
                            if let Some(why) = crate::runtime::no_return_probes(&m) {
                                return Err(UserProbeError::Argument {
                                    spec: p.spec(),
                                    why: format!(
                                        "{shown} in {} cannot be timed: no return probe goes in \
                                         its code ({why}); count its calls without --func-time",
                                        o.path
                                    ),
                                });
                            }
                        }
                        match crate::runtime::func_entry(&open, kind, raw) {
                            Ok(Some(e)) => out.sites.push(func_site(shown, &o.path, e, *timed)),
                            Ok(None) => {}
                            Err(e) => out.notes.push(format!("{shown} in {}: {e:#}", o.path)),
                        }
                    }
                }
            }
        }
    }
    for (i, p) in probes.iter().enumerate() {
        if !p.counted_by_user_family() {
            continue;
        }
        if matched[i] > MAX_SITES {
            return Err(UserProbeError::TooMany {
                spec: p.spec(),
                pid,
                count: matched[i],
                what: match p {
                    UserProbe::Usdt { .. } => "markers",
                    _ => "functions",
                },
            });
        }
        if matched[i] == 0 {
            out.unmatched.push((p.clone(), spellings_near(maps, p)));
        }
    }
    // Aliases (`malloc`, `__libc_malloc`) are one function: one probe.
    // One marker sums one argument: two specs asking two of the same
    // marker are refused, not merged into one silently.
    type Args = (Option<u8>, Option<ByArg>);
    let mut seen: std::collections::BTreeMap<(String, u64), Args> = Default::default();
    let mut sites = Vec::new();
    for s in out.sites {
        match seen.get(&(s.module.clone(), s.file_offset)) {
            Some(args) if *args != (s.arg, s.by) && s.at == SiteAt::Marker => {
                return Err(UserProbeError::Argument {
                    spec: format!("--usdt {}", s.probe.trim_start_matches("usdt:")),
                    why: "named twice with different arguments to sum or count by; rig sums \
                          one argument and counts by one string per marker"
                        .into(),
                })
            }
            Some(_) => {
                // A function named by a timed and an untimed spec is timed.
                if let Some(first) = sites.iter_mut().find(|f: &&mut UserSite| {
                    f.module == s.module && f.file_offset == s.file_offset
                }) {
                    first.timed |= s.timed;
                    first.arg_abi.flags |= s.arg_abi.flags;
                }
            }
            None => {
                seen.insert((s.module.clone(), s.file_offset), (s.arg, s.by));
                sites.push(s);
            }
        }
    }
    out.sites = sites;
    Ok(out)
}

/// The raw names of the functions of the module mapped as `path` (read
/// at `open`), as its runtime names them (`runtime::function_names`).
pub fn function_names(path: &str, open: &std::path::Path, facts: &ElfFacts) -> Vec<String> {
    match ModuleKind::of_file(path, open) {
        Ok(kind) => crate::runtime::function_names(open, kind, facts),
        Err(_) => Vec::new(),
    }
}

/// The language whose calls `--interp-calls` counts in the module mapped as
/// `path` (read at `open`), or why rig cannot count them there; `None`: no
/// interpreter.
pub fn interp_calls(
    path: &str,
    open: &std::path::Path,
    facts: &ElfFacts,
) -> Option<Result<&'static str, String>> {
    let kind = ModuleKind::of_file(path, open).ok()?;
    let m = crate::runtime::Module { kind, facts };
    crate::runtime::interp_calls(&m, open).map(|c| c.map(|c| c.language))
}

/// The error for a spec that matched nothing in `pid`.
pub fn no_match(pid: u32, probe: &UserProbe, closest: Vec<String>) -> UserProbeError {
    UserProbeError::NoMatch {
        spec: probe.spec(),
        pid,
        closest,
    }
}

fn func_site(shown: &str, module: &str, e: FuncEntry, timed: bool) -> UserSite {
    let at = match &e {
        FuncEntry::Placed(_) => SiteAt::FuncEntry,
        FuncEntry::StackCheck(_) => SiteAt::StackCheck,
    };
    UserSite {
        probe: format!("func:{shown}"),
        arg: None,
        by: None,
        module: module.to_string(),
        file_offset: e.symbol().file_offset,
        at,
        semaphore: None,
        timed,
        ifunc: e.symbol().is_ifunc,
        arg_abi: UserArg {
            flags: if timed { user_arg::TIMED } else { 0 },
            ..UserArg::default()
        },
        by_abi: UserByArg::default(),
        caveat: None,
        everywhere: false,
    }
}

/// A site of `--interp-calls`: one of the interpreter's call handlers, the
/// opcodes a call starts with for the kernel side in its `value`.
fn interp_call_site(c: &crate::runtime::InterpCalls, module: &str, file_offset: u64) -> UserSite {
    UserSite {
        probe: format!("{}:calls", c.language),
        arg: None,
        by: None,
        module: module.to_string(),
        file_offset,
        at: SiteAt::InterpCall,
        semaphore: None,
        timed: false,
        ifunc: false,
        arg_abi: UserArg {
            value: c.check as i64,
            ..UserArg::default()
        },
        by_abi: UserByArg::default(),
        caveat: None,
        everywhere: false,
    }
}

/// The names nearest to `p` in the modules of `maps`.
pub fn spellings_near(maps: &ProcMaps, p: &UserProbe) -> Vec<String> {
    let mut spellings = Vec::new();
    for o in maps.objects().into_iter().filter(|o| o.executable) {
        let open = maps.readable_path(&o.path);
        let base = basename(&o.path);
        match p {
            UserProbe::Usdt { .. } => {
                for m in crate::elf::usdt::markers(&open)
                    .map(|m| m.0.clone())
                    .unwrap_or_default()
                {
                    spellings.push(format!("{}:{}", m.provider, m.name));
                    spellings.push(format!("{base}:{}:{}", m.provider, m.name));
                }
            }
            UserProbe::InterpCalls { .. } => {}
            UserProbe::Func { .. } | UserProbe::Alloc { .. } => {
                let Ok(facts) = ElfFacts::shared(&open) else {
                    continue;
                };
                for raw in function_names(&o.path, &open, &facts) {
                    let n = display_name(&raw);
                    spellings.push(format!("{base}!{n}"));
                    spellings.push(n);
                }
            }
        }
    }
    let pattern = match p {
        UserProbe::Usdt { pattern, .. } | UserProbe::Func { pattern, .. } => pattern,
        UserProbe::Alloc { name, .. } => name,
        UserProbe::InterpCalls { .. } => return Vec::new(),
    };
    closest(pattern, &spellings)
}

#[cfg(test)]
mod tests;
