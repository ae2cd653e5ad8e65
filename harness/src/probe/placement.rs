//! Where a uprobe may safely, and cheaply, sit.
//!
//! In: a library and the file offset of a function's entry, and how many
//! argument registers the BPF program at the probe reads. Out: a
//! [`Placement`], the offset to attach at and what was skipped to get there.
//!
//! A uprobe hit costs what the kernel does with the instruction it replaced:
//! it emulates a few kinds (direct jumps, calls and conditional jumps, `push`
//! of a register, the standard nops) and single-steps every other one out of
//! line, several times dearer per hit (`rig probe-cost` measures a host's
//! cost per hit). glibc's
//! `free`, its memmove implementations and `pthread_mutex_lock` start with an
//! instruction that is single-stepped and reach, a few instructions later, a
//! conditional jump every call passes. So rig walks the entry block and puts
//! the probe on the first instruction the kernel emulates when that changes
//! nothing the probe sees or counts:
//!
//! - every instruction before it falls through, so every call through the
//!   entry executes the probed instruction exactly once;
//! - no direct jump, call or RIP-relative address anywhere in the library's
//!   code lands after the entry and up to the probed instruction, so no call
//!   that skipped the entry reaches the probe. An indirect jump through a
//!   table of computed offsets could still land there; rig assumes none
//!   does, as compilers put switch and computed-goto targets after the code
//!   that dispatches to them, never inside a function's first few
//!   instructions. One kind of landing is allowed: the jump that ends a
//!   *sibling* entry the caller names because it wants that entry's calls
//!   counted with this function's ([`Join`]). glibc's `mempcpy`
//!   implementation is `mov %rdi,%rax; add %rdx,%rax; jmp memmove+3`: it
//!   is a copy with memmove's arguments, and its calls skip memmove's entry
//!   instruction, so an entry probe misses them while a probe on memmove's
//!   `jb` at +7 counts both. A sibling qualifies when its entry reaches the
//!   jump by instructions that fall through and write nothing the probe
//!   reads (the same test as below), and the jump lands on an instruction
//!   boundary of the skipped prefix; the probe then sees the sibling call's
//!   arguments and return address;
//! - the skipped instructions write no memory, not `rsp` nor `rbp`, and none
//!   of the argument registers the program reads: the arguments, the return
//!   address at `*rsp` (read for the immediate caller) and the unwinder's
//!   start (pc, sp and bp from the registers at the hit; its rules are per pc,
//!   and until a push the CFA is `rsp`+8 at every one) are those of the
//!   entry. A uretprobe attached through the same placement hijacks the
//!   return address at `*rsp` when hit, which is right only while `rsp` has
//!   not moved since the entry; this rule is what keeps it right;
//! - at most [`MAX_SKIP`] instructions are skipped.
//!
//! Otherwise the probe stays at the entry, with one exception kept from
//! before: single-stepping an AVX-512 instruction loses its result on this
//! kernel. With a probe on glibc's `__memset_avx512_unaligned_erms`, whose
//! first instruction is `vpbroadcastb %esi,%zmm16`, memset wrote stale bytes
//! — 43957 of 112164 verified memsets were wrong (fixtures test
//! `probing_copy_routines_never_changes_what_they_compute`). So rig never
//! puts a probe on a vector instruction: failing the rule above, it moves the
//! probe past a leading run of vector instructions that write no general
//! register, no memory and do not branch.

use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

use iced_x86::{
    Decoder, DecoderOptions, EncodingKind, FlowControl, Formatter, GasFormatter, Instruction,
    InstructionInfoFactory, Mnemonic, OpAccess, Register,
};

/// A probe position: the offset to attach at, the instruction there and
/// what was skipped to get there (as assembly), empty when it is the entry.
#[derive(Clone, Debug, PartialEq)]
pub struct Placement {
    pub file_offset: u64,
    pub instruction: String,
    pub skipped: Vec<String>,
    pub why: Why,
    /// The sibling entries (file offsets) whose calls jump into the skipped
    /// prefix and so are counted by this probe too; empty at the entry.
    pub joined: Vec<u64>,
}

impl Placement {
    /// At the entry itself, where nothing may move the probe (a routine
    /// whose body jumps back into its first instructions).
    pub fn entry(file_offset: u64) -> Placement {
        Placement {
            file_offset,
            instruction: String::new(),
            skipped: Vec::new(),
            why: Why::Entry,
            joined: Vec::new(),
        }
    }
}

/// A sibling entry point that ends in a direct jump into a function's
/// first instructions, found by [`join_of`]: its calls reach the probe of
/// that function when the probe is past the landing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Join {
    /// The sibling's entry.
    pub entry: u64,
    /// Where its jump instruction is.
    pub jump_from: u64,
    /// Where the jump lands.
    pub lands: u64,
}

/// Why the probe sits where it does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Why {
    /// At the entry: emulated there, or no later instruction qualifies.
    Entry,
    /// Past leading vector instructions, which must not be single-stepped.
    PastVectors,
    /// On the first instruction the kernel emulates, past ones it would
    /// single-step.
    Emulated,
}

/// At most this many instructions are skipped to reach an emulated one.
pub const MAX_SKIP: usize = 6;

/// At most this many leading vector instructions are skipped.
const MAX_VECTOR_SKIP: usize = 4;

/// The x86-64 argument registers, in order.
const ARGS: [Register; 6] = [
    Register::RDI,
    Register::RSI,
    Register::RDX,
    Register::RCX,
    Register::R8,
    Register::R9,
];

fn is_vector(ins: &Instruction) -> bool {
    if ins.encoding() != EncodingKind::Legacy {
        return true; // VEX, EVEX, XOP, 3DNow!, MVEX
    }
    (0..ins.op_count()).any(|i| {
        let r = ins.op_register(i);
        r.is_xmm() || r.is_ymm() || r.is_zmm() || r.is_k() || r.is_mm()
    })
}

fn writes(access: OpAccess) -> bool {
    matches!(
        access,
        OpAccess::Write | OpAccess::ReadWrite | OpAccess::CondWrite | OpAccess::ReadCondWrite
    )
}

/// True when `ins` falls through and writes no memory and none of
/// `protected` (compared as full 64-bit registers: `dl` and `edx` are
/// `rdx`).
fn skippable(ins: &Instruction, info: &mut InstructionInfoFactory, protected: &[Register]) -> bool {
    if ins.flow_control() != FlowControl::Next {
        return false;
    }
    // Falls through, but does more than compute: enters the kernel, traps,
    // serializes or starts a transaction.
    if matches!(
        ins.mnemonic(),
        Mnemonic::Syscall
            | Mnemonic::Sysenter
            | Mnemonic::Cpuid
            | Mnemonic::Xbegin
            | Mnemonic::Xend
            | Mnemonic::Xabort
            | Mnemonic::Hlt
    ) {
        return false;
    }
    let i = info.info(ins);
    let writes_mem = i.used_memory().iter().any(|m| writes(m.access()));
    let writes_protected = i
        .used_registers()
        .iter()
        .any(|u| writes(u.access()) && protected.contains(&u.register().full_register()));
    !writes_mem && !writes_protected
}

/// The `x86_nops` table of the kernel (P6 nops, one to eight bytes), which
/// its uprobes emulate as a jump to the next instruction.
const NOPS: [&[u8]; 8] = [
    &[0x90],
    &[0x66, 0x90],
    &[0x0f, 0x1f, 0x00],
    &[0x0f, 0x1f, 0x40, 0x00],
    &[0x0f, 0x1f, 0x44, 0x00, 0x00],
    &[0x66, 0x0f, 0x1f, 0x44, 0x00, 0x00],
    &[0x0f, 0x1f, 0x80, 0x00, 0x00, 0x00, 0x00],
    &[0x0f, 0x1f, 0x84, 0x00, 0x00, 0x00, 0x00, 0x00],
];

/// Whether the x86-64 kernel emulates the instruction `bytes` at a uprobe
/// instead of single-stepping it, per `arch_uprobe_analyze_insn` in
/// arch/x86/kernel/uprobes.c:
///
/// - any ES/CS/SS/DS segment or LOCK prefix makes `uprobe_init_insn` refuse
///   the probe outright (so: not a place to probe);
/// - `branch_setup_xol_ops`: the kernel's nops; `jmp rel8` (eb), `jmp rel32`
///   (e9), `call rel32` (e8), `jcc rel8` (70–7f) and `jcc rel32` (0f 80–8f),
///   but a branch with an operand-size (66) prefix is refused;
/// - `push_setup_xol_ops`: `push reg` (50–57) of one byte, or of two with
///   the single REX prefix 41 (`push %r8`..`%r15`); any other form (REX.W,
///   a 66 prefix) is single-stepped.
///
/// Kernels differ in which nops they emulate (6.18's `insn_is_nop` takes
/// more than the table); the table is what all emulating ones take.
pub fn kernel_emulates(bytes: &[u8]) -> bool {
    let mut i = 0;
    let mut has_66 = false;
    while let Some(&b) = bytes.get(i) {
        match b {
            0x26 | 0x2e | 0x36 | 0x3e | 0xf0 => return false,
            0x66 => has_66 = true,
            0x64 | 0x65 | 0x67 | 0xf2 | 0xf3 => {}
            _ => break,
        }
        i += 1;
    }
    if NOPS.contains(&bytes) {
        return true;
    }
    let rex = bytes.get(i).copied().filter(|b| b & 0xf0 == 0x40);
    let op = &bytes[(i + rex.is_some() as usize).min(bytes.len())..];
    let branch = matches!(
        op,
        [0xeb | 0xe9 | 0xe8, ..] | [0x70..=0x7f, ..] | [0x0f, 0x80..=0x8f, ..]
    );
    if branch {
        return !has_66;
    }
    matches!(bytes, [0x50..=0x57] | [0x41, 0x50..=0x57])
}

/// Decide where to attach for a function whose entry is at `file_offset` of
/// `lib` (x86_64 code), for a program that reads the first `args` argument
/// registers.
pub fn safe_probe_offset(lib: &Path, file_offset: u64, args: usize) -> Result<Placement, String> {
    safe_probe_offset_joining(lib, file_offset, args, &[])
}

/// [`safe_probe_offset`], letting the probe move past the landings of the
/// jumps that end the sibling entries at `siblings` (file offsets in the
/// same library) when those calls are wanted too; [`Placement::joined`]
/// says which did.
pub fn safe_probe_offset_joining(
    lib: &Path,
    file_offset: u64,
    args: usize,
    siblings: &[u64],
) -> Result<Placement, String> {
    let f = std::fs::File::open(lib).map_err(|e| format!("{}: {e}", lib.display()))?;
    let read = |at: u64| -> Result<Vec<u8>, String> {
        let mut code = vec![0u8; 15 * (MAX_SKIP + 1)];
        let n = f
            .read_at(&mut code, at)
            .map_err(|e| format!("{}+{at:#x}: {e}", lib.display()))?;
        code.truncate(n);
        Ok(code)
    };
    let code = read(file_offset)?;
    let mut joins = Vec::new();
    for &s in siblings.iter().filter(|&&s| s != file_offset) {
        joins.extend(join_of(&read(s)?, s, args));
    }
    // Without the library's branch targets the probe cannot move safely.
    let targets = BranchTargets::shared(lib).ok();
    place_joining(&code[..], file_offset, args, targets.as_deref(), &joins)
}

/// The jump that ends the sibling entry whose code (`code`, at
/// `file_offset`) reaches it by instructions that fall through and write
/// no memory, `rsp`, `rbp` nor the first `args` argument registers; `None`
/// when it does anything else first.
pub fn join_of(code: &[u8], file_offset: u64, args: usize) -> Option<Join> {
    let protected = protected(args);
    let mut decoder = Decoder::with_ip(64, code, file_offset, DecoderOptions::NONE);
    let mut info = InstructionInfoFactory::new();
    for _ in 0..=MAX_SKIP {
        if !decoder.can_decode() {
            return None;
        }
        let ins = decoder.decode();
        if ins.is_invalid() {
            return None;
        }
        if ins.flow_control() == FlowControl::UnconditionalBranch && ins.near_branch_target() != 0 {
            return Some(Join {
                entry: file_offset,
                jump_from: ins.ip(),
                lands: ins.near_branch_target(),
            });
        }
        if !skippable(&ins, &mut info, &protected) {
            return None;
        }
    }
    None
}

fn protected(args: usize) -> Vec<Register> {
    let mut protected: Vec<Register> = ARGS[..args.min(ARGS.len())].to_vec();
    protected.extend([Register::RSP, Register::RBP]);
    protected
}

/// The decision on raw code bytes starting at `file_offset` (the entry);
/// `targets` are the library's branch targets, `None` when unknown.
pub fn place(
    code: &[u8],
    file_offset: u64,
    args: usize,
    targets: Option<&BranchTargets>,
) -> Result<Placement, String> {
    place_joining(code, file_offset, args, targets, &[])
}

/// [`place`], where the jumps of `joins` may land in the skipped prefix.
pub fn place_joining(
    code: &[u8],
    file_offset: u64,
    args: usize,
    targets: Option<&BranchTargets>,
    joins: &[Join],
) -> Result<Placement, String> {
    let protected = protected(args);
    let mut boundaries = vec![file_offset];
    let mut decoder = Decoder::with_ip(64, code, file_offset, DecoderOptions::NONE);
    let mut info = InstructionInfoFactory::new();
    let mut skipped = Vec::new();
    for _ in 0..=MAX_SKIP {
        if !decoder.can_decode() {
            break;
        }
        let at = decoder.position();
        let ins = decoder.decode();
        if ins.is_invalid() {
            break;
        }
        let bytes = &code[at..at + ins.len()];
        if kernel_emulates(bytes) {
            if skipped.is_empty() {
                return Ok(Placement {
                    file_offset,
                    instruction: gas(&ins),
                    skipped,
                    why: Why::Entry,
                    joined: Vec::new(),
                });
            }
            let Some(t) = targets else { break };
            // Every landing in the prefix must be a wanted sibling's jump,
            // onto an instruction of the prefix or the probed one.
            boundaries.push(ins.ip());
            let mut joined = Vec::new();
            let all_joins = t.in_range(file_offset + 1, ins.ip()).all(|(to, from)| {
                let j = joins.iter().find(|j| j.jump_from == from && j.lands == to);
                if let Some(j) = j {
                    joined.push(j.entry);
                }
                j.is_some() && boundaries.contains(&to)
            });
            if !all_joins {
                break;
            }
            joined.sort_unstable();
            joined.dedup();
            return Ok(Placement {
                file_offset: ins.ip(),
                instruction: gas(&ins),
                skipped,
                why: Why::Emulated,
                joined,
            });
        }
        if !skippable(&ins, &mut info, &protected) {
            break;
        }
        skipped.push(gas(&ins));
        boundaries.push(ins.next_ip());
    }
    past_vectors(code, file_offset)
}

/// `ins` as objdump prints it (lowercase hex, no leading zeros).
fn gas(ins: &Instruction) -> String {
    let mut fmt = GasFormatter::new();
    fmt.options_mut().set_uppercase_hex(false);
    fmt.options_mut().set_branch_leading_zeros(false);
    let mut text = String::new();
    fmt.format(ins, &mut text);
    text
}

/// The entry, or past a leading run of vector instructions.
fn past_vectors(code: &[u8], file_offset: u64) -> Result<Placement, String> {
    let mut decoder = Decoder::with_ip(64, code, file_offset, DecoderOptions::NONE);
    let mut info = InstructionInfoFactory::new();
    let mut skipped = Vec::new();
    // Vector instructions may write any general register but none: all are
    // protected here, as before the emulated-instruction rule.
    let mut protected = ARGS.to_vec();
    protected.extend([Register::RSP, Register::RBP]);
    for _ in 0..=MAX_VECTOR_SKIP {
        if !decoder.can_decode() {
            break;
        }
        let ins = decoder.decode();
        if ins.is_invalid() {
            return Err(format!("undecodable instruction at +{:#x}", ins.ip()));
        }
        let text = gas(&ins);
        if !is_vector(&ins) {
            let why = if skipped.is_empty() {
                Why::Entry
            } else {
                Why::PastVectors
            };
            return Ok(Placement {
                file_offset: ins.ip(),
                instruction: text,
                skipped,
                why,
                joined: Vec::new(),
            });
        }
        let writes_gpr = info
            .info(&ins)
            .used_registers()
            .iter()
            .any(|u| u.register().is_gpr() && writes(u.access()));
        if writes_gpr || !skippable(&ins, &mut info, &protected) {
            return Err(format!(
                "the function starts with the vector instruction `{text}`, which cannot be probed \
                 safely (single-stepping it corrupts the target) nor skipped (it writes state the \
                 probe reads)"
            ));
        }
        skipped.push(text);
    }
    Err(format!(
        "more than {MAX_VECTOR_SKIP} leading vector instructions: no safe probe point"
    ))
}

/// Every file offset of a library that a direct jump or call, or a
/// RIP-relative address (a `lea` of a label, a jump target taken as data),
/// in its code points at, each with the offset of the instruction that
/// points there; sorted by target.
#[derive(Debug, Default)]
pub struct BranchTargets {
    /// (target, source)
    edges: Vec<(u64, u64)>,
}

/// The source of a target given without one (`from_offsets`): matches no
/// instruction.
const UNKNOWN_SOURCE: u64 = u64::MAX;

impl BranchTargets {
    /// Targets whose sources are unknown.
    pub fn from_offsets(offsets: Vec<u64>) -> BranchTargets {
        BranchTargets::from_edges(offsets.into_iter().map(|o| (o, UNKNOWN_SOURCE)).collect())
    }

    /// (target, source) pairs.
    pub fn from_edges(mut edges: Vec<(u64, u64)>) -> BranchTargets {
        edges.sort_unstable();
        edges.dedup();
        BranchTargets { edges }
    }

    /// Whether any target lies in `lo..=hi`.
    pub fn any_in(&self, lo: u64, hi: u64) -> bool {
        self.in_range(lo, hi).next().is_some()
    }

    /// The (target, source) pairs whose target lies in `lo..=hi`.
    pub fn in_range(&self, lo: u64, hi: u64) -> impl Iterator<Item = (u64, u64)> + '_ {
        let i = self.edges.partition_point(|&(o, _)| o < lo);
        self.edges[i..]
            .iter()
            .copied()
            .take_while(move |&(o, _)| o <= hi)
    }

    /// Decode every executable section of `lib` and collect its targets.
    /// Decoding restarts at each function start the symbol tables know
    /// (`.dynsym`, `.symtab`, and the separate debug file's `.symtab`, found
    /// by build-id) so that a desynchronized linear sweep (data or odd
    /// padding in code) cannot run past the next function.
    pub fn scan(lib: &Path) -> Result<BranchTargets, String> {
        use object::{Object, ObjectSection, ObjectSymbol, SectionKind, SymbolKind};
        let err = |e: &dyn std::fmt::Display| format!("{}: {e}", lib.display());
        let data = std::fs::read(lib).map_err(|e| err(&e))?;
        let file = object::File::parse(&*data).map_err(|e| err(&e))?;
        let mut starts: Vec<u64> = file
            .symbols()
            .chain(file.dynamic_symbols())
            .filter(|s| s.kind() == SymbolKind::Text && s.address() != 0)
            .map(|s| s.address())
            .collect();
        let debug = crate::process::maps::build_id_of_data(&data)
            .and_then(|id| crate::symbolize::debug_file_for_build_id(&id))
            .and_then(|p| std::fs::read(p).ok());
        if let Some(debug) = &debug {
            if let Ok(d) = object::File::parse(&**debug) {
                starts.extend(
                    d.symbols()
                        .filter(|s| s.kind() == SymbolKind::Text && s.address() != 0)
                        .map(|s| s.address()),
                );
            }
        }
        starts.sort_unstable();
        starts.dedup();
        let mut edges = Vec::new();
        for sec in file.sections().filter(|s| s.kind() == SectionKind::Text) {
            let (Some((_, size)), Ok(bytes)) = (sec.file_range(), sec.data()) else {
                continue;
            };
            let (addr, end) = (sec.address(), sec.address() + size);
            let to_offset = |vaddr: u64| -> Option<u64> {
                file.sections()
                    .filter(|s| s.kind() == SectionKind::Text)
                    .find_map(|s| {
                        let (o, n) = s.file_range()?;
                        let a = s.address();
                        (a <= vaddr && vaddr < a + n).then(|| vaddr - a + o)
                    })
            };
            let mut cuts: Vec<u64> = vec![addr];
            let i = starts.partition_point(|&s| s <= addr);
            cuts.extend(starts[i..].iter().copied().take_while(|&s| s < end));
            cuts.push(end);
            let mut ins = Instruction::default();
            for w in cuts.windows(2) {
                let (lo, hi) = ((w[0] - addr) as usize, (w[1] - addr) as usize);
                let mut decoder = Decoder::with_ip(64, &bytes[lo..hi], w[0], DecoderOptions::NONE);
                while decoder.can_decode() {
                    decoder.decode_out(&mut ins);
                    let target = match ins.flow_control() {
                        FlowControl::UnconditionalBranch
                        | FlowControl::ConditionalBranch
                        | FlowControl::Call
                        | FlowControl::XbeginXabortXend
                            if ins.near_branch_target() != 0 =>
                        {
                            Some(ins.near_branch_target())
                        }
                        _ if ins.is_ip_rel_memory_operand() => Some(ins.ip_rel_memory_address()),
                        _ => None,
                    };
                    if let Some(o) = target.and_then(to_offset) {
                        edges.push((o, to_offset(ins.ip()).unwrap_or(UNKNOWN_SOURCE)));
                    }
                }
            }
        }
        Ok(BranchTargets::from_edges(edges))
    }

    /// `scan`, once per file per rig process (the one module cache,
    /// `elf::cached`): every process of a tree maps the same libc.
    pub fn shared(lib: &Path) -> Result<Arc<BranchTargets>, String> {
        crate::elf::cached(lib, |p| BranchTargets::scan(p).map_err(anyhow::Error::msg))
            .map_err(|e| format!("{e:#}"))
    }
}

#[cfg(test)]
#[path = "placement_tests.rs"]
mod tests;
