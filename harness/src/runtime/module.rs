//! A mapped module as the runtimes are asked about it: its kind and ELF
//! facts, where a process maps it, and its code's bytes.

use std::path::Path;

use super::ModuleKind;
use crate::elf::ElfFacts;
use crate::process::maps::ProcMaps;

/// One module as the runtimes read it.
pub struct Module<'a> {
    pub kind: ModuleKind,
    pub facts: &'a ElfFacts,
}

/// Where a module is mapped: the process, its map, the module's path as in
/// that map, and a path that opens the file (its own /proc/PID/root or
/// map_files path).
pub struct Mapped<'a> {
    pub pid: u32,
    pub maps: &'a ProcMaps,
    pub path: &'a str,
    pub open: &'a Path,
}

impl Mapped<'_> {
    /// The byte at link-time address `vaddr` of the module, read from the
    /// live process (a runtime's flag, as it runs).
    pub fn read_u8(&self, facts: &ElfFacts, vaddr: u64) -> Option<u8> {
        let mut b = [0u8; 1];
        self.read(self.address(facts, vaddr)?, &mut b)?;
        Some(b[0])
    }

    /// Where link-time address `vaddr` of the module is in the process.
    pub fn address(&self, facts: &ElfFacts, vaddr: u64) -> Option<u64> {
        Some(crate::elf::load_base(self.maps, self.path, facts)?.wrapping_add(vaddr))
    }

    /// The process's memory at `addr`, `buf.len()` bytes of it.
    pub fn read(&self, addr: u64, buf: &mut [u8]) -> Option<()> {
        use std::os::unix::fs::FileExt;
        let mem = std::fs::File::open(format!("/proc/{}/mem", self.pid)).ok()?;
        mem.read_exact_at(buf, addr).ok()
    }
}

/// How the code a runtime's JIT writes keeps its frames, in one process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JitFrames {
    /// Every frame keeps rbp as its frame pointer: a stack walks through.
    FramePointers,
    /// Not: a stack ends at the first such frame, for this reason.
    Without(String),
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

/// Where an interpreter keeps each thread's frames in one process, for the
/// kernel side to walk at every event, and the native function whose
/// calls run them (where its frames are spliced into the native stack).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Interp {
    pub layout: rig_ebpf::abi::InterpProc,
    pub evaluator: &'static str,
    /// The language its frames are of, as their names say (`python`).
    pub language: &'static str,
}

/// Where an interpreter starts each call of an interpreted function, for
/// the probe that counts them by function (`--interp-calls LANGUAGE`): the
/// places in the module's file, and the instruction the kernel side finds
/// a call by there (`rig_user_interp`): in `check`, the opcodes of the
/// call's first instruction (bits 0-7 and 8-15), whose argument is 0 for a
/// call and not for a generator's resumption.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InterpCalls {
    /// One of [`CALL_LANGUAGES`].
    pub language: &'static str,
    pub file_offsets: Vec<u64>,
    pub check: u64,
}

/// Code of a family that rig does not count but can count the runs of
/// (see [`Runtime::unseen_sites`]): each hit of one of `file_offsets` is
/// one event of kind `label` (`"allocations"`, `"frees"`), with no size and
/// no caller. `paths` counts every such path found, those without a
/// place to probe included.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnseenSites {
    pub label: &'static str,
    pub file_offsets: Vec<u64>,
    pub paths: usize,
}

/// The sizes a runtime gives, at a window's end, of the objects marker
/// `marker` (`provider:name`) counts by type: type name → bytes, or why
/// none.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectSizes {
    pub marker: &'static str,
    pub sizes: Result<std::collections::BTreeMap<String, u64>, String>,
}

/// The languages whose calls a runtime counts (`InterpCalls::language`):
/// each is the probe `LANGUAGE:calls`.
pub const CALL_LANGUAGES: &[&str] = &["python"];

/// An interpreted frame as named at a window's end: its function, file and
/// first line, or why it has no name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InterpName {
    Function {
        function: String,
        file: String,
        line: u32,
    },
    Gone(String),
}

/// A runtime's contended lock acquisitions as two of its USDT markers
/// mark them (`provider`, `name`): the wait from `waits` to `acquired`,
/// by thread, counted by the locks family as operation `op`
/// (`rig_ebpf::abi::lock_op`); `counts` says what, for the notes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MarkerLock {
    pub waits: (&'static str, &'static str),
    pub acquired: (&'static str, &'static str),
    pub op: u32,
    pub counts: &'static str,
}

/// What each call of a runtime's marker counts in its alloc layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MarkerCounts {
    /// An object of its heap, whose size the marker does not give
    /// reliably: an allocation, not sized.
    Objects,
    /// A garbage collection.
    Collections,
}
