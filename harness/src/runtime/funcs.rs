//! Functions a user names (`--func`): which functions a module's code
//! holds, and where a probe counting a function's calls goes, as each
//! runtime answers (`Runtime::function_names`, `Runtime::func_entry`).

use std::path::Path;

use anyhow::Result;

use super::{runtimes, Module, ModuleKind};
use crate::elf::{ElfFacts, SymbolInfo};

/// Where a probe on a function's calls goes.
#[derive(Clone, Debug, PartialEq)]
pub enum FuncEntry {
    /// At its entry, or moved past its first instructions where they leave
    /// the stack pointer and memory alone (`probe::placement`): the return
    /// address is then the word at the stack pointer. An IFUNC symbol
    /// (`is_ifunc`) names its resolver; the caller finds what it chose.
    Placed(SymbolInfo),
    /// At the prologue's stack check branch (Go): the return address is at
    /// the stack pointer, and a taken branch grows the goroutine's stack
    /// and starts the function again, so that pass is not counted.
    StackCheck(SymbolInfo),
}

impl FuncEntry {
    pub fn symbol(&self) -> &SymbolInfo {
        match self {
            FuncEntry::Placed(s) | FuncEntry::StackCheck(s) => s,
        }
    }
}

/// The raw names of the functions of the module at `open` (of `kind`):
/// its runtime's own table where it keeps one, else the ELF symbol tables.
pub fn function_names(open: &Path, kind: ModuleKind, facts: &ElfFacts) -> Vec<String> {
    let m = Module { kind, facts };
    if let Some(names) = runtimes(&m).find_map(|r| r.function_names(open)) {
        return names;
    }
    facts
        .function_names()
        .into_iter()
        .map(str::to_string)
        .collect()
}

/// Where a probe counting the calls of `symbol` (a raw name from
/// [`function_names`]) goes in the module at `open`.
pub fn func_entry(open: &Path, kind: ModuleKind, symbol: &str) -> Result<Option<FuncEntry>> {
    asked(
        open,
        kind,
        |r| r.func_entry(open, symbol),
        |facts| facts.lookup_function(symbol).map(FuncEntry::Placed),
    )
}

/// Where to probe `symbol` in the module at `open` (of `kind`): where its
/// runtime says, else its ELF symbol.
pub fn entry_point(open: &Path, kind: ModuleKind, symbol: &str) -> Result<Option<SymbolInfo>> {
    asked(
        open,
        kind,
        |r| r.entry_point(open, symbol),
        |facts| facts.lookup_symbol(symbol),
    )
}

/// What the first runtime of the module at `open` that answers `ask` says,
/// else what its ELF file says (`file`).
fn asked<T>(
    open: &Path,
    kind: ModuleKind,
    ask: impl Fn(&dyn super::Runtime) -> Option<Result<Option<T>>>,
    file: impl FnOnce(&ElfFacts) -> Option<T>,
) -> Result<Option<T>> {
    let facts = ElfFacts::shared(open)?;
    let m = Module {
        kind,
        facts: &facts,
    };
    if let Some(found) = runtimes(&m).find_map(ask) {
        return found;
    }
    Ok(file(&facts))
}
