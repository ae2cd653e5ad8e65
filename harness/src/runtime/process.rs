//! What the runtimes say of one process as a whole: which of its mappings
//! is the C library, which frames are wrapper code, why a stack ends where
//! it ends, how the code its JIT wrote keeps frames and is named, and the
//! markers its runtimes fire for what the families count.

use std::collections::HashMap;
use std::sync::Mutex;

use super::{
    is_shared_c_library_name, is_wrapper_code, no_row_reason, runtimes, Interp, InterpName,
    JitFrames, Mapped, MarkerCounts, Module, ModuleKind, Runtime, ALL,
};
use crate::elf::ElfFacts;
use crate::process::maps::ProcMaps;

/// Calls `f` with each executable module of the process whose map is
/// `maps`, as the runtimes read it (a module rig cannot open is left out).
pub fn each_module(maps: &ProcMaps, mut f: impl FnMut(&Module<'_>, &Mapped<'_>)) {
    for o in maps.objects().into_iter().filter(|o| o.executable) {
        let open = maps.readable_path(&o.path);
        let (Ok(kind), Ok(facts)) = (ModuleKind::of_file(&o.path, &open), ElfFacts::shared(&open))
        else {
            continue;
        };
        let m = Module {
            kind,
            facts: &facts,
        };
        let at = Mapped {
            pid: maps.pid,
            maps,
            path: &o.path,
            open: &open,
        };
        f(&m, &at);
    }
}

/// A process's map as the answers below are kept under: a map with
/// other mappings (a library loaded since: the JVM's `java` launcher
/// loads libjvm.so after it starts) is asked again.
type MapKey = (u32, usize);

fn key(maps: &ProcMaps) -> MapKey {
    (maps.pid, maps.mappings.len())
}

/// The runtimes whose code the process whose map is `maps` holds, by
/// their answers for each of its modules; found once per map.
fn of_process(maps: &ProcMaps) -> Vec<&'static dyn Runtime> {
    static FOUND: Mutex<Option<HashMap<MapKey, Vec<&'static dyn Runtime>>>> = Mutex::new(None);
    let mut found = FOUND.lock().unwrap_or_else(|e| e.into_inner());
    let found = found.get_or_insert_with(HashMap::new);
    if let Some(rs) = found.get(&key(maps)) {
        return rs.clone();
    }
    let mut rs: Vec<&'static dyn Runtime> = Vec::new();
    each_module(maps, |m, _| {
        for r in runtimes(m) {
            if !rs.iter().any(|have| have.name() == r.name()) {
                rs.push(r);
            }
        }
    });
    found.insert(key(maps), rs.clone());
    rs
}

/// How the code a JIT wrote in the process whose map is `maps` keeps its
/// frames (see [`super::Runtime::jit_frames`]); `None` when no runtime of
/// it says. Asked once per map (a runtime's flags are fixed when it
/// starts).
pub fn jit_frames(maps: &ProcMaps) -> Option<JitFrames> {
    static ASKED: Mutex<Option<HashMap<MapKey, Option<JitFrames>>>> = Mutex::new(None);
    let mut asked = ASKED.lock().unwrap_or_else(|e| e.into_inner());
    let asked = asked.get_or_insert_with(HashMap::new);
    if let Some(said) = asked.get(&key(maps)) {
        return said.clone();
    }
    let mut said = None;
    each_module(maps, |m, at| {
        if said.is_none() {
            said = runtimes(m).find_map(|r| r.jit_frames(m, at));
        }
    });
    asked.insert(key(maps), said.clone());
    said
}

/// Where the interpreter of the process whose map is `maps` keeps its
/// threads' frames, or why rig cannot walk them (see
/// [`super::Runtime::interp_frames`]); `None`: it runs no interpreter.
pub fn interp_frames(maps: &ProcMaps) -> Option<Result<Interp, String>> {
    let mut said = None;
    each_module(maps, |m, at| {
        if said.is_none() {
            said = runtimes(m).find_map(|r| r.interp_frames(m, at));
        }
    });
    said
}

/// The interpreter of the process whose map is `maps`, and the names of
/// its frames `words` as it holds them now (see
/// [`super::Runtime::interp_names`]).
pub fn interp_names(maps: &ProcMaps, words: &[u64]) -> Option<(Interp, Vec<InterpName>)> {
    let mut said = None;
    each_module(maps, |m, at| {
        if said.is_none() {
            said = runtimes(m).find_map(|r| {
                let interp = r.interp_frames(m, at)?.ok()?;
                Some((interp, r.interp_names(m, at, words)?))
            });
        }
    });
    said
}

/// Has each runtime of the process whose map is `maps` that names its JIT
/// code on request do so now (a JVM writes its perf map when `jcmd` asks):
/// what each did, or why it could not.
pub fn write_jit_names(maps: &ProcMaps) -> Vec<Result<String, String>> {
    let mut out = Vec::new();
    each_module(maps, |m, at| {
        out.extend(runtimes(m).filter_map(|r| r.write_jit_names(m, at)));
    });
    out
}

/// The object sizes the runtimes of the process whose map is `maps` give
/// now (see [`Runtime::object_sizes`]).
pub fn object_sizes(maps: &ProcMaps) -> Vec<super::ObjectSizes> {
    let mut out = Vec::new();
    each_module(maps, |m, at| {
        out.extend(runtimes(m).filter_map(|r| r.object_sizes(m, at)));
    });
    out
}

/// Where the code of module `m` that family `family` does not count can
/// have its runs counted (see [`Runtime::unseen_sites`]).
pub fn unseen_sites(m: &Module<'_>, at: &Mapped<'_>, family: &str) -> Vec<super::UnseenSites> {
    runtimes(m)
        .flat_map(|r| r.unseen_sites(m, at, family))
        .collect()
}

/// The markers the families `families` count without the user naming
/// them in the process whose map is `maps` (see
/// [`super::Runtime::implied_markers`]), each as a `--usdt` spec on its
/// module's path, with the family that implies it.
pub fn implied_markers(maps: &ProcMaps, families: &[&'static str]) -> Vec<(String, &'static str)> {
    let mut out: Vec<(String, &'static str)> = Vec::new();
    each_module(maps, |m, at| {
        for &f in families {
            for r in runtimes(m) {
                for spec in r.implied_markers(m, at, f) {
                    let spec = format!("{}:{spec}", at.path);
                    if !out.iter().any(|(s, _)| *s == spec) {
                        out.push((spec, f));
                    }
                }
            }
        }
    });
    out
}

/// The alloc layer of marker `(provider, name)`'s calls, where a runtime
/// says (see [`super::Runtime::marker_layer`]).
pub fn marker_layer(marker: (&str, &str)) -> Option<(&'static str, MarkerCounts)> {
    ALL.iter().find_map(|r| r.marker_layer(marker))
}

/// The name to show for a function the perf map of the process whose map
/// is `maps` names `name`, where its runtime gives it a clearer one (see
/// [`super::Runtime::jit_function`]).
pub fn jit_function(maps: &ProcMaps, name: &str) -> Option<String> {
    of_process(maps).iter().find_map(|r| r.jit_function(name))
}

/// Whether JIT function `name` of the process whose map is `maps` is its
/// runtime's own code (see [`super::Runtime::jit_own_code`]).
pub fn jit_own_code(maps: &ProcMaps, name: &str) -> bool {
    of_process(maps).iter().any(|r| r.jit_own_code(name))
}

/// Whether the frame at `module_offset` (a file offset) of the module
/// mapped as `path` in `maps`, in `function`, is a runtime's wrapper code
/// (the C library's), so a stack's user site lies past it; a return
/// address (`returned`) is one past its call, and the call is looked up.
pub fn is_wrapper_frame(
    maps: &ProcMaps,
    path: &str,
    module_offset: u64,
    function: Option<&str>,
    returned: bool,
) -> bool {
    let open = maps.readable_path(path);
    let (Ok(kind), Ok(facts)) = (ModuleKind::of_file(path, &open), ElfFacts::shared(&open)) else {
        return false;
    };
    let m = Module {
        kind,
        facts: &facts,
    };
    let at = module_offset.saturating_sub(u64::from(returned));
    facts
        .file_offset_to_vaddr(at)
        .is_some_and(|v| is_wrapper_code(&m, v, function))
}

/// Why a stack walk ended at the frame at `addr` of `maps`: its module's
/// table has no row there (`no_row`), or it has no table. Each runtime
/// says why for its code (JIT code has no tables; musl's has rows only
/// where its stack height is known).
pub fn stack_end_reason(maps: &ProcMaps, addr: Option<u64>, no_row: bool) -> String {
    let fallback = if no_row { "no row" } else { "no unwind table" }.to_string();
    let Some(mapping) = addr.and_then(|a| maps.find(a)) else {
        return fallback;
    };
    let Some(kind) = ModuleKind::of_mapping(maps, mapping) else {
        return fallback;
    };
    let facts = match mapping.path.as_deref() {
        Some(_) if kind != ModuleKind::Jit => {
            ElfFacts::shared(&maps.mapped_file(mapping)).unwrap_or_default()
        }
        _ => std::sync::Arc::new(ElfFacts::default()),
    };
    let m = Module {
        kind,
        facts: &facts,
    };
    match no_row_reason(&m) {
        // JIT code: its runtime says why its frames cannot be walked (a
        // JVM without -XX:+PreserveFramePointer).
        Some(why) if kind == ModuleKind::Jit => match jit_frames(maps) {
            Some(JitFrames::Without(because)) => format!("{why}: {because}"),
            _ => why.to_string(),
        },
        // A module with no table at all: only code without any (JIT) says
        // why.
        Some(why) if no_row => why.to_string(),
        _ => fallback,
    }
}

/// The module that holds the process's C library, as in maps, with its
/// kind: the one rule for "which mapping is the C library". The shared
/// C library when one is mapped (glibc's libc.so, musl's libc.so under any
/// of its names), else the executable when it carries its C library
/// linked in (`ModuleKind::StaticC`).
pub fn c_library(pid: u32, maps: &ProcMaps) -> Option<(String, ModuleKind)> {
    let shared = maps.objects().into_iter().find_map(|o| {
        if !is_shared_c_library_name(&o.path) {
            return None;
        }
        match ModuleKind::of_path(maps, &o.path)? {
            k @ ModuleKind::CLibrary { .. } => Some((o.path, k)),
            _ => None,
        }
    });
    if shared.is_some() {
        return shared;
    }
    let exe = maps.exe(pid)?;
    match ModuleKind::of_path(maps, &exe)? {
        k @ ModuleKind::StaticC { .. } => Some((exe, k)),
        _ => None,
    }
}
