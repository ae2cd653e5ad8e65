//! USDT markers (SystemTap SDT, `<sys/sdt.h>`) of an ELF file, as the
//! `.note.stapsdt` notes describe them: provider, name, the marker's
//! address, its semaphore and its argument specifications.
//!
//! Each note (type 3, owner `stapsdt`) holds three addresses — the
//! marker's `nop`, the link-time address of the `.stapsdt.base` section,
//! the semaphore (0 for none) — then `provider\0name\0arguments\0`. A
//! file whose sections moved after linking (prelink) says so through
//! `.stapsdt.base`: the marker moved by the same distance as that section.
//! The semaphore is a 16-bit counter in `.probes`; the kernel raises it
//! while a uprobe is attached with its file offset as the reference
//! counter (`ref_ctr_offset`), and a guarded marker fires only then.
//!
//! Arguments are GNU assembler operands with a size: `-4@%eax` (a signed
//! 4-byte value in a register), `8@-16(%rbp)` (in memory), `8@(%rdi)`,
//! `-4@$5` (a constant), and `8@NBuffers(%rip)` / `4@52+CheckpointStats(%rip)`
//! (a global, as PostgreSQL's markers read theirs).

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result};
use object::elf;
use object::read::elf::{ElfFile64, FileHeader as _, ProgramHeader as _, SectionHeader as _};
use object::Endianness;
use serde::Serialize;

/// One marker of a file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Marker {
    pub provider: String,
    pub name: String,
    /// Link-time address of the marker's instruction (after the
    /// `.stapsdt.base` adjustment).
    pub vaddr: u64,
    /// Its file offset: where a uprobe goes.
    pub file_offset: u64,
    /// The semaphore, when the marker has one.
    pub semaphore: Option<Semaphore>,
    /// The arguments as the note spells them.
    pub args_text: String,
    /// The arguments parsed, or why they could not be.
    pub args: std::result::Result<Vec<Arg>, String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Semaphore {
    /// Link-time address.
    pub vaddr: u64,
    /// Its file offset, the kernel's reference counter offset; `None` when
    /// no loaded segment holds it in the file (then rig cannot raise it,
    /// and says so rather than wait for a marker that never fires).
    pub file_offset: Option<u64>,
}

/// One argument: its width in bytes, its signedness, where it is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Arg {
    pub size: u8,
    pub signed: bool,
    pub loc: Loc,
}

/// Where an argument's value is when the marker fires.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum Loc {
    /// A constant the compiler knew.
    Const(i64),
    /// In a register (its 64-bit name; a narrower name reads the low bytes).
    Reg(Reg),
    /// In memory at `base + disp` (+ the address of `symbol` for a global,
    /// always rip-relative then).
    Mem {
        base: Reg,
        disp: i64,
        symbol: Option<String>,
    },
}

/// The x86-64 general registers, by their 64-bit names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Reg {
    Rax,
    Rbx,
    Rcx,
    Rdx,
    Rsi,
    Rdi,
    Rbp,
    Rsp,
    R8,
    R9,
    R10,
    R11,
    R12,
    R13,
    R14,
    R15,
    Rip,
}

impl Reg {
    /// The register's offset in the kernel's x86-64 `struct pt_regs`
    /// (what a BPF program reads it from).
    pub fn pt_regs_offset(self) -> u16 {
        match self {
            Reg::R15 => 0,
            Reg::R14 => 8,
            Reg::R13 => 16,
            Reg::R12 => 24,
            Reg::Rbp => 32,
            Reg::Rbx => 40,
            Reg::R11 => 48,
            Reg::R10 => 56,
            Reg::R9 => 64,
            Reg::R8 => 72,
            Reg::Rax => 80,
            Reg::Rcx => 88,
            Reg::Rdx => 96,
            Reg::Rsi => 104,
            Reg::Rdi => 112,
            Reg::Rip => 128,
            Reg::Rsp => 152,
        }
    }

    /// A register by any of its names (`rax`, `eax`, `ax`, `al`, `r8d`,
    /// `r8w`, `r8b`, `sil`...), without the `%`.
    pub fn parse(name: &str) -> Option<Reg> {
        const LEGACY: [(Reg, [&str; 4]); 8] = [
            (Reg::Rax, ["rax", "eax", "ax", "al"]),
            (Reg::Rbx, ["rbx", "ebx", "bx", "bl"]),
            (Reg::Rcx, ["rcx", "ecx", "cx", "cl"]),
            (Reg::Rdx, ["rdx", "edx", "dx", "dl"]),
            (Reg::Rsi, ["rsi", "esi", "si", "sil"]),
            (Reg::Rdi, ["rdi", "edi", "di", "dil"]),
            (Reg::Rbp, ["rbp", "ebp", "bp", "bpl"]),
            (Reg::Rsp, ["rsp", "esp", "sp", "spl"]),
        ];
        const NUMBERED: [Reg; 8] = [
            Reg::R8,
            Reg::R9,
            Reg::R10,
            Reg::R11,
            Reg::R12,
            Reg::R13,
            Reg::R14,
            Reg::R15,
        ];
        if name == "rip" {
            return Some(Reg::Rip);
        }
        if let Some((r, _)) = LEGACY.iter().find(|(_, names)| names.contains(&name)) {
            return Some(*r);
        }
        let n = name.strip_prefix('r')?;
        let digits = n.trim_end_matches(['d', 'w', 'b']);
        if n.len() - digits.len() > 1 {
            return None;
        }
        let i: usize = digits.parse().ok()?;
        (8..=15).contains(&i).then(|| NUMBERED[i - 8])
    }
}

/// Parse one argument specification (`-4@%eax`, `8@-16(%rbp)`...).
pub fn parse_arg(spec: &str) -> std::result::Result<Arg, String> {
    let bad = |why: &str| Err(format!("argument `{spec}`: {why}"));
    let Some((size, loc)) = spec.split_once('@') else {
        return bad("no `SIZE@`");
    };
    let (signed, digits) = match size.strip_prefix('-') {
        Some(d) => (true, d),
        None => (false, size),
    };
    let size: u8 = match digits.parse() {
        Ok(n @ (1 | 2 | 4 | 8)) => n,
        _ => return bad("the size is not 1, 2, 4 or 8 bytes"),
    };
    let loc = if let Some(c) = loc.strip_prefix('$') {
        match parse_int(c) {
            Some(v) => Loc::Const(v),
            None => return bad("a constant that is not a number"),
        }
    } else if let Some(r) = loc.strip_prefix('%') {
        match Reg::parse(r) {
            Some(r) => Loc::Reg(r),
            None => return bad("an unknown register"),
        }
    } else if let Some((disp, rest)) = loc.split_once('(') {
        let Some(inner) = rest.strip_suffix(')') else {
            return bad("no closing `)`");
        };
        if inner.contains(',') {
            return bad("an indexed address (base, index, scale) rig does not read");
        }
        let Some(base) = inner.strip_prefix('%').and_then(Reg::parse) else {
            return bad("an unknown base register");
        };
        let Some((disp, symbol)) = parse_disp(disp) else {
            return bad("a displacement rig cannot read");
        };
        if symbol.is_some() && base != Reg::Rip {
            return bad("a symbol addressed from a register other than %rip");
        }
        Loc::Mem { base, disp, symbol }
    } else {
        return bad("not a register, a constant or a memory operand");
    };
    Ok(Arg { size, signed, loc })
}

/// A displacement: empty, a number, a symbol, or a symbol and numbers
/// joined by `+`/`-` (`52+CheckpointStats`, `CheckpointStats+52`).
fn parse_disp(text: &str) -> Option<(i64, Option<String>)> {
    let mut disp = 0i64;
    let mut symbol: Option<String> = None;
    let mut sign = 1i64;
    let mut term = String::new();
    let mut flush = |term: &mut String, sign: i64| -> Option<()> {
        if term.is_empty() {
            return Some(());
        }
        match parse_int(term) {
            Some(v) => disp = disp.checked_add(sign.checked_mul(v)?)?,
            None if symbol.is_none() && sign == 1 => symbol = Some(term.clone()),
            None => return None,
        }
        term.clear();
        Some(())
    };
    for (i, c) in text.char_indices() {
        if (c == '+' || c == '-') && !(i == 0 && c == '-' && term.is_empty() && sign == 1) {
            flush(&mut term, sign)?;
            sign = if c == '-' { -1 } else { 1 };
        } else {
            term.push(c);
        }
    }
    flush(&mut term, sign)?;
    Some((disp, symbol))
}

/// A decimal or `0x` hexadecimal integer, optionally negative.
fn parse_int(text: &str) -> Option<i64> {
    let (neg, t) = match text.strip_prefix('-') {
        Some(t) => (true, t),
        None => (false, text),
    };
    let v = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(h) => i64::from_str_radix(h, 16).ok()?,
        None if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) => t.parse().ok()?,
        None => return None,
    };
    Some(if neg { -v } else { v })
}

/// Parse a note's whole argument string (arguments separated by blanks).
pub fn parse_args(text: &str) -> std::result::Result<Vec<Arg>, String> {
    text.split_whitespace().map(parse_arg).collect()
}

/// The link-time address of the global `name` a marker's argument reads
/// (`sym(%rip)`), from the file's symbol tables: refused when they do not
/// name it (a stripped file) or name two (two `static`s of one name in
/// different source files: which one the marker reads is not written down).
pub fn global_address(facts: &super::ElfFacts, name: &str) -> std::result::Result<u64, String> {
    let mut at: Vec<u64> = facts
        .named(name)
        .filter(|s| s.shndx != elf::SHN_UNDEF && s.vaddr != 0)
        .map(|s| s.vaddr)
        .collect();
    at.sort_unstable();
    at.dedup();
    match at[..] {
        [one] => Ok(one),
        [] => Err(format!(
            "the global `{name}`, which the file's symbol tables do not name (stripped?)"
        )),
        _ => Err(format!(
            "the global `{name}`, which names {} different variables in this file",
            at.len()
        )),
    }
}

/// The markers of the ELF file at `path`, parsed once per file per rig
/// process (the ELF module cache).
pub fn markers(path: &Path) -> Result<Arc<Markers>> {
    super::cached(path, |p| {
        let data = std::fs::read(p).with_context(|| format!("reading {}", p.display()))?;
        parse(&data)
            .map(Markers)
            .with_context(|| format!("reading the USDT notes of {}", p.display()))
    })
}

/// A file's markers, in note order.
#[derive(Debug, Default)]
pub struct Markers(pub Vec<Marker>);

const NT_STAPSDT: u32 = 3;

/// The markers in an ELF file's bytes (none when it has no
/// `.note.stapsdt`).
pub fn parse(data: &[u8]) -> Result<Vec<Marker>> {
    let file = ElfFile64::<Endianness>::parse(data)?;
    let e = file.endian();
    // The note's three addresses are read little-endian below.
    anyhow::ensure!(
        file.elf_header().e_machine(e) == elf::EM_X86_64,
        "only x86_64 ELF is supported"
    );
    let st = file.elf_section_table();
    let section = |name: &[u8]| {
        st.iter()
            .find(|sh| st.section_name(e, sh).ok() == Some(name))
    };
    let base_now = section(b".stapsdt.base").map(|sh| sh.sh_addr(e));
    let Some(notes_sh) = section(b".note.stapsdt") else {
        return Ok(Vec::new());
    };
    let loads: Vec<(u64, u64, u64)> = file
        .elf_program_headers()
        .iter()
        .filter(|ph| ph.p_type(e) == elf::PT_LOAD)
        .map(|ph| (ph.p_vaddr(e), ph.p_offset(e), ph.p_filesz(e)))
        .collect();
    let file_offset = |vaddr: u64| {
        loads
            .iter()
            .find(|&&(v, _, size)| v <= vaddr && vaddr < v + size)
            .map(|&(v, off, _)| vaddr - v + off)
    };
    let mut out = Vec::new();
    let Some(mut notes) = notes_sh.notes(e, data)? else {
        return Ok(out);
    };
    while let Some(note) = notes.next()? {
        if note.name() != b"stapsdt" || note.n_type(e) != NT_STAPSDT {
            continue;
        }
        let desc = note.desc();
        if desc.len() < 24 {
            continue;
        }
        let word = |i: usize| u64::from_le_bytes(desc[i * 8..i * 8 + 8].try_into().unwrap());
        let (pc, base_then, sema) = (word(0), word(1), word(2));
        let mut strings = desc[24..].split(|&b| b == 0);
        let mut next = || String::from_utf8_lossy(strings.next().unwrap_or_default()).into_owned();
        let (provider, name, args_text) = (next(), next(), next());
        // Moved after linking: by as much as `.stapsdt.base` moved.
        let vaddr = match base_now {
            Some(now) if base_then != 0 => pc.wrapping_add(now).wrapping_sub(base_then),
            _ => pc,
        };
        let Some(offset) = file_offset(vaddr) else {
            continue;
        };
        let semaphore = (sema != 0).then(|| Semaphore {
            vaddr: sema,
            file_offset: file_offset(sema),
        });
        out.push(Marker {
            provider,
            name,
            vaddr,
            file_offset: offset,
            semaphore,
            args: parse_args(&args_text),
            args_text,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
