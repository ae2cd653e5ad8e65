//! A mapped module as the runtimes are asked about it: its kind and ELF
//! facts, where a process maps it, and its code's bytes.

use std::path::Path;

use super::ModuleKind;
use crate::elf::ElfFacts;

/// One module as the runtimes read it.
pub struct Module<'a> {
    pub kind: ModuleKind,
    pub facts: &'a ElfFacts,
}

/// Where a module is mapped: the process, and a path that opens the file
/// (its own /proc/PID/root or map_files path).
pub struct Mapped<'a> {
    pub pid: u32,
    pub open: &'a Path,
}

/// A module's code as unwind rows are made from it: the parsed object,
/// its bytes and its executable segments (file offset, size, virtual
/// address), each within the bytes.
pub struct Code<'a> {
    pub obj: &'a object::File<'a>,
    pub data: &'a [u8],
    pub segments: &'a [(u64, u64, u64)],
}

impl Code<'_> {
    /// The bytes of the code at virtual addresses `start..end`, when one
    /// segment holds them all.
    pub fn bytes(&self, start: u64, end: u64) -> Option<&[u8]> {
        let &(off, _, vaddr) = self
            .segments
            .iter()
            .find(|&&(_, size, vaddr)| vaddr <= start && end <= vaddr + size)?;
        let from = usize::try_from(off + (start - vaddr)).ok()?;
        let to = usize::try_from(off + (end - vaddr)).ok()?;
        self.data.get(from..to)
    }
}
