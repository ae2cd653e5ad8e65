//! Rows for functions without unwind tables, from their machine code.
//!
//! In: one function's bytes and entry address. Out: the rows the BPF walk
//! reads for the instructions whose stack height is known on every path
//! from the entry; every other instruction gets no row (a stack taken there
//! ends, marked incomplete), never a guessed one.
//!
//! The walk starts at the entry, where the return address is at rsp
//! (CFA = rsp + 8), and follows the function's control flow: pushes, pops,
//! `add`/`sub rsp, imm` and `lea rsp, [rsp + imm]` move the height, a call
//! leaves it as it was, a return or a jump out of the function ends a path,
//! and a branch inside it carries the height to its target, as does a
//! jump table laid out as GCC does, bounded by its compare (`jump_table`).
//! Two paths that reach one instruction with different heights, any other
//! indirect jump, or a change to rsp it cannot follow (`and rsp`,
//! `mov rsp, reg`, `sub rsp, reg`...) end the walk on that path. The caller's rbp is
//! followed too: once `push rbp` saves it, the rows say where; once `mov
//! rbp, rsp` makes it a frame pointer, rsp changes it cannot follow, and
//! paths that join at different heights, keep a row from it (CFA = rbp +
//! 16 + what was pushed before it) until `leave` or `lea rsp, [rbp - n]`
//! gives the height back. An
//! instruction that writes rbp before saving it ends the path, so a row
//! that says "rbp unchanged" is right.

use std::collections::HashMap;

use iced_x86::{
    Code, Decoder, DecoderOptions, FlowControl, Instruction, InstructionInfoFactory, Mnemonic,
    OpAccess, OpKind, Register,
};
use rig_ebpf::abi::{unwind_cfa, UnwindRow};

/// What is known of the frame before one instruction runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Frame {
    /// Bytes pushed below the return address: rsp = CFA - 8 - depth.
    /// `None`: not followed since the frame pointer was set (the CFA comes
    /// from rbp).
    depth: Option<i64>,
    /// The depth just after `push rbp` saved the caller's rbp (it is at
    /// CFA - 8 - depth), until `pop rbp` or `leave` restores it.
    saved_bp: Option<i64>,
    /// The depth at which `mov rbp, rsp` set rbp: rbp = CFA - 8 - this.
    frame_bp: Option<i64>,
}

/// Deeper than any real frame, small enough for the row's fields.
const MAX_DEPTH: i64 = 1 << 20;

impl Frame {
    const ENTRY: Frame = Frame {
        depth: Some(0),
        saved_bp: None,
        frame_bp: None,
    };

    /// The frame at an instruction two paths reach with `self` and
    /// `other`: the same one, or, under one frame pointer over one saved
    /// rbp, that frame with its depth unknown (the CFA comes from rbp on
    /// both). `None`: no rule is right on both.
    fn join(self, other: Frame) -> Option<Frame> {
        if self == other {
            return Some(self);
        }
        (self.frame_bp.is_some()
            && self.frame_bp == other.frame_bp
            && self.saved_bp == other.saved_bp)
            .then_some(Frame {
                depth: None,
                ..self
            })
    }

    fn row(&self, pc: u64) -> Option<UnwindRow> {
        let (cfa, off) = match (self.depth, self.frame_bp) {
            (Some(d), _) => (unwind_cfa::RSP, d + 8),
            (None, Some(f)) => (unwind_cfa::RBP, f + 8),
            (None, None) => return None,
        };
        let rbp_off = match self.saved_bp {
            Some(s) => i16::try_from(-(s + 8)).ok()?,
            None => 0,
        };
        Some(UnwindRow {
            pc,
            cfa,
            cfa_off: i32::try_from(off).ok()?,
            rbp_off,
            ..Default::default()
        })
    }
}

fn is_sp(r: Register) -> bool {
    matches!(
        r,
        Register::RSP | Register::ESP | Register::SP | Register::SPL
    )
}

fn is_bp(r: Register) -> bool {
    matches!(
        r,
        Register::RBP | Register::EBP | Register::BP | Register::BPL
    )
}

/// The frame after `ins` runs from `f`; `None` where it cannot be followed.
fn step(ins: &Instruction, info: &mut InstructionInfoFactory, f: Frame) -> Option<Frame> {
    let mut f = f;
    let reg0 =
        (ins.op_count() > 0 && ins.op0_kind() == OpKind::Register).then(|| ins.op0_register());
    let reg1 =
        (ins.op_count() > 1 && ins.op1_kind() == OpKind::Register).then(|| ins.op1_register());
    let writes = |info: &mut InstructionInfoFactory, which: fn(Register) -> bool| {
        info.info(ins).used_registers().iter().any(|u| {
            which(u.register())
                && matches!(
                    u.access(),
                    OpAccess::Write
                        | OpAccess::CondWrite
                        | OpAccess::ReadWrite
                        | OpAccess::ReadCondWrite
                )
        })
    };
    let flow = ins.flow_control();
    match ins.mnemonic() {
        Mnemonic::Push | Mnemonic::Pushfq | Mnemonic::Pop | Mnemonic::Popfq => {
            let pop = matches!(ins.mnemonic(), Mnemonic::Pop | Mnemonic::Popfq);
            if pop && reg0.is_some_and(is_sp) {
                return None;
            }
            if pop && reg0.is_some_and(is_bp) {
                f.depth?;
                if reg0 == Some(Register::RBP) && f.saved_bp == f.depth {
                    // The caller's rbp, back from where it was saved.
                    f.saved_bp = None;
                } else {
                    // Any other value (GCC pops pushed arguments into a
                    // saved register): the caller's rbp stays in its slot.
                    f.saved_bp?;
                }
                f.frame_bp = None;
            }
            if !pop && reg0 == Some(Register::RBP) && f.saved_bp.is_none() {
                f.saved_bp = Some(f.depth? + 8);
            }
            // Above a frame pointer the depth may stay unknown.
            f.depth = f
                .depth
                .map(|d| d - i64::from(ins.stack_pointer_increment()));
        }
        Mnemonic::Leave => {
            let fp = f.frame_bp?;
            if f.saved_bp != Some(fp) {
                return None;
            }
            f = Frame {
                depth: Some(fp - 8),
                saved_bp: None,
                frame_bp: None,
            };
        }
        _ if matches!(flow, FlowControl::Call | FlowControl::IndirectCall)
            && ins.stack_pointer_increment() == -8 =>
        {
            // The callee pops what the call pushed, unless it is the next
            // instruction (`call 1f; 1: pop reg` reads the pc).
            let reads_pc = ins.is_call_near() && ins.near_branch_target() == ins.next_ip();
            let pushed = if reads_pc { 8 } else { 0 };
            f.depth = f.depth.map(|d| d + pushed);
        }
        _ if matches!(flow, FlowControl::Return) => {}
        _ if ins.stack_pointer_increment() != 0 => return None,
        _ if reg0 == Some(Register::RBP)
            && reg1 == Some(Register::RSP)
            && ins.mnemonic() == Mnemonic::Mov =>
        {
            // Only a frame pointer over the saved caller's rbp.
            f.saved_bp?;
            f.frame_bp = Some(f.depth?);
        }
        _ if writes(info, is_sp) => {
            if writes(info, is_bp) {
                // `xchg rsp, rbp`: neither gives the CFA any more.
                return None;
            }
            f.depth = sp_after(ins, reg0, f);
            if f.depth.is_none() && f.frame_bp.is_none() {
                return None;
            }
        }
        _ if writes(info, is_bp) => {
            // The caller's rbp is saved, so its rule stays right; rbp
            // itself no longer gives the CFA.
            f.saved_bp?;
            f.frame_bp = None;
            f.depth?;
        }
        _ => {}
    }
    if let Some(d) = f.depth {
        if !(0..MAX_DEPTH).contains(&d) || f.saved_bp.is_some_and(|s| d < s) {
            return None;
        }
    }
    Some(f)
}

/// The depth after an instruction that writes rsp, where it can be known.
fn sp_after(ins: &Instruction, reg0: Option<Register>, f: Frame) -> Option<i64> {
    if reg0 != Some(Register::RSP) {
        return None;
    }
    match ins.code() {
        Code::Add_rm64_imm8 | Code::Add_rm64_imm32 if ins.op0_kind() == OpKind::Register => {
            Some(f.depth? - ins.immediate(1) as i64)
        }
        Code::Sub_rm64_imm8 | Code::Sub_rm64_imm32 if ins.op0_kind() == OpKind::Register => {
            Some(f.depth? + ins.immediate(1) as i64)
        }
        Code::Lea_r64_m if ins.memory_index() == Register::None => {
            let disp = ins.memory_displacement64() as i64;
            match ins.memory_base() {
                Register::RSP => Some(f.depth? - disp),
                Register::RBP => Some(f.frame_bp? - disp),
                _ => None,
            }
        }
        Code::Mov_r64_rm64 | Code::Mov_rm64_r64
            if ins.op1_kind() == OpKind::Register && ins.op1_register() == Register::RBP =>
        {
            f.frame_bp
        }
        _ => None,
    }
}

/// Rows for the function whose code is `code`, entered at `start` (its
/// first byte). `poison`: addresses no row may cover (the byte before a
/// signal return trampoline, which the walk looks up for a return address
/// that points at the trampoline).
pub fn height_rows(
    code: &[u8],
    start: u64,
    poison: &[u64],
    read: &dyn Fn(u64, usize) -> Option<Vec<u8>>,
) -> Vec<UnwindRow> {
    let end = start + code.len() as u64;
    let mut decoder = Decoder::with_ip(64, code, start, DecoderOptions::NONE);
    let mut info = InstructionInfoFactory::new();
    // The frame before each reached instruction, and its end; `None`: two
    // paths disagree, or no path could follow it.
    let mut seen: HashMap<u64, (Option<Frame>, u64)> = HashMap::new();
    // The instruction each reached one follows in a straight line
    // (`u64::MAX`: two do).
    let mut after_of: HashMap<u64, u64> = HashMap::new();
    // Indirect jumps reached with a frame, and the targets of those read
    // as jump tables.
    let mut jumps: Vec<(u64, Frame)> = Vec::new();
    let mut tables: HashMap<u64, Vec<u64>> = HashMap::new();
    let mut work = vec![(start, Frame::ENTRY)];
    loop {
        let Some((pc, frame)) = work.pop() else {
            // Jump tables are read once the code before them is known.
            for (jmp, frame) in std::mem::take(&mut jumps) {
                if seen.get(&jmp).map(|s| s.0) != Some(Some(frame)) {
                    continue;
                }
                let targets = tables.entry(jmp).or_insert_with(|| {
                    jump_table(jmp, &after_of, &mut decoder, start, end, read).unwrap_or_default()
                });
                work.extend(targets.iter().map(|&t| (t, frame)));
            }
            if work.is_empty() {
                break;
            }
            continue;
        };
        if let Some(&(known, _)) = seen.get(&pc) {
            let Some(known) = known else {
                continue;
            };
            match known.join(frame) {
                Some(j) if j == known => {}
                // Under one frame pointer the paths agree on the CFA: this
                // instruction and what it reaches are redone from rbp.
                Some(j) => {
                    seen.remove(&pc);
                    work.push((pc, j));
                }
                // A join with another height: this instruction and what
                // it reaches get no row.
                None => {
                    seen.insert(pc, (None, pc));
                    poison_from(&mut seen, &tables, pc, &mut decoder, start, end);
                }
            }
            continue;
        }
        if decoder.set_position((pc - start) as usize).is_err() {
            continue;
        }
        decoder.set_ip(pc);
        let ins = decoder.decode();
        if ins.is_invalid() || ins.next_ip() > end {
            continue;
        }
        let after = step(&ins, &mut info, frame);
        seen.insert(pc, (Some(frame), ins.next_ip()));
        let Some(after) = after else {
            continue;
        };
        let inside = |t: u64| (start..end).contains(&t);
        let flow = ins.flow_control();
        if matches!(flow, FlowControl::Next | FlowControl::ConditionalBranch) {
            after_of
                .entry(ins.next_ip())
                .and_modify(|p| *p = u64::MAX)
                .or_insert(pc);
        }
        match flow {
            FlowControl::Next
            | FlowControl::Call
            | FlowControl::IndirectCall
            | FlowControl::Interrupt => {
                work.push((ins.next_ip(), after));
            }
            FlowControl::ConditionalBranch => {
                work.push((ins.next_ip(), after));
                if inside(ins.near_branch_target()) {
                    work.push((ins.near_branch_target(), after));
                }
            }
            FlowControl::UnconditionalBranch
                if ins.is_jmp_short_or_near() && inside(ins.near_branch_target()) =>
            {
                work.push((ins.near_branch_target(), after));
            }
            FlowControl::IndirectBranch => jumps.push((pc, after)),
            // Returns, traps: the path ends.
            _ => {}
        }
    }
    let mut pcs: Vec<(u64, Frame, u64)> = seen
        .into_iter()
        .filter_map(|(pc, (f, next))| Some((pc, f?, next)))
        .collect();
    pcs.sort_unstable_by_key(|p| p.0);
    let mut out = Vec::new();
    for (pc, frame, next) in pcs {
        if poison.iter().any(|&p| (pc..next).contains(&p)) {
            continue;
        }
        if let Some(row) = frame.row(pc) {
            out.push(row);
            out.push(UnwindRow {
                pc: next,
                cfa: unwind_cfa::NONE,
                ..Default::default()
            });
        }
    }
    out
}

/// After a join found two heights at `from`: every instruction reached
/// from it on the fall-through and branch edges loses its row, since its
/// height may have come from either.
fn poison_from(
    seen: &mut HashMap<u64, (Option<Frame>, u64)>,
    tables: &HashMap<u64, Vec<u64>>,
    from: u64,
    decoder: &mut Decoder<'_>,
    start: u64,
    end: u64,
) {
    let mut work = vec![from];
    while let Some(pc) = work.pop() {
        if decoder.set_position((pc - start) as usize).is_err() {
            continue;
        }
        decoder.set_ip(pc);
        let ins = decoder.decode();
        if ins.is_invalid() {
            continue;
        }
        let mut next = Vec::new();
        match ins.flow_control() {
            FlowControl::Next
            | FlowControl::Call
            | FlowControl::IndirectCall
            | FlowControl::Interrupt => next.push(ins.next_ip()),
            FlowControl::ConditionalBranch => {
                next.push(ins.next_ip());
                next.push(ins.near_branch_target());
            }
            FlowControl::UnconditionalBranch if ins.is_jmp_short_or_near() => {
                next.push(ins.near_branch_target())
            }
            FlowControl::IndirectBranch => next.extend(tables.get(&pc).into_iter().flatten()),
            _ => {}
        }
        for n in next {
            if let Some((known, _)) = seen.get_mut(&n) {
                if known.take().is_some() {
                    work.push(n);
                }
            } else if (start..end).contains(&n) {
                // Not reached yet: it will be, from here, with no frame.
                seen.insert(n, (None, n));
                work.push(n);
            }
        }
    }
}

/// The targets of the indirect jump at `jmp` when it reads a jump table
/// as GCC lays one out, bounded by the compare that guards it, every
/// target inside the function; `None` for any other indirect jump.
///
/// Position-independent: `cmp $N, %r; ja default; lea T(%rip), %b;
/// [movzx/mov %r, %i;] movslq (%b,%i,4), %d; add %b, %d; jmp *%d` (the
/// `lea` and the zero-extension in either order), entries `T + rel32`.
/// Absolute: `cmp $N, %r; ja default; [movzx/mov %r, %i;] jmp
/// *T(,%i,8)`, entries of 8 bytes. The instructions must follow each
/// other in a straight line, as the walk reached them.
fn jump_table(
    jmp: u64,
    after_of: &HashMap<u64, u64>,
    decoder: &mut Decoder<'_>,
    start: u64,
    end: u64,
    read: &dyn Fn(u64, usize) -> Option<Vec<u8>>,
) -> Option<Vec<u64>> {
    // The instructions up to `jmp` in a straight line, nearest first.
    let mut chain: Vec<Instruction> = Vec::new();
    let mut pc = jmp;
    for _ in 0..7 {
        decoder
            .set_position(usize::try_from(pc - start).ok()?)
            .ok()?;
        decoder.set_ip(pc);
        chain.push(decoder.decode());
        match after_of.get(&pc) {
            Some(&p) if p != u64::MAX => pc = p,
            _ => break,
        }
    }
    let full = |r: Register| r.full_register();
    // `rest`: what precedes the table's load and address, nearest first.
    let (table, index, entry, mut rest) = if chain[0].op0_kind() == OpKind::Register {
        let d = full(chain[0].op0_register());
        let (add, load) = (chain.get(1)?, chain.get(2)?);
        let base = load.memory_base();
        if !matches!(add.code(), Code::Add_r64_rm64 | Code::Add_rm64_r64)
            || add.op0_kind() != OpKind::Register
            || add.op1_kind() != OpKind::Register
            || full(add.op0_register()) != d
            || full(add.op1_register()) != base
            || load.code() != Code::Movsxd_r64_rm32
            || full(load.op0_register()) != d
            || load.memory_index_scale() != 4
            || load.memory_displacement64() != 0
            || base == d
        {
            return None;
        }
        let mut rest = chain[3..].to_vec();
        // The table's address, just before the load or one further.
        let lea = (0..2.min(rest.len())).find(|&i| {
            rest[i].code() == Code::Lea_r64_m
                && rest[i].memory_base() == Register::RIP
                && rest[i].op0_register() == base
        })?;
        let table = rest.remove(lea).memory_displacement64();
        (table, load.memory_index(), 4, rest)
    } else if chain[0].op0_kind() == OpKind::Memory
        && chain[0].memory_base() == Register::None
        && chain[0].memory_index_scale() == 8
    {
        let table = chain[0].memory_displacement64();
        (table, chain[0].memory_index(), 8, chain[1..].to_vec())
    } else {
        return None;
    };
    // An optional zero-extension into the index, then the guard.
    let mut bounded = full(index);
    if let Some(z) = rest.first() {
        let zext = matches!(
            z.code(),
            Code::Movzx_r32_rm8 | Code::Movzx_r32_rm16 | Code::Mov_r32_rm32 | Code::Mov_rm32_r32
        ) && z.op0_kind() == OpKind::Register
            && z.op1_kind() == OpKind::Register
            && full(z.op0_register()) == bounded;
        if zext {
            bounded = full(z.op1_register());
            rest.remove(0);
        }
    }
    let (ja, cmp) = (rest.first()?, rest.get(1)?);
    let extra = match ja.mnemonic() {
        Mnemonic::Ja => 1,
        Mnemonic::Jae => 0,
        _ => return None,
    };
    if cmp.mnemonic() != Mnemonic::Cmp
        || cmp.op0_kind() != OpKind::Register
        || full(cmp.op0_register()) != bounded
        || !matches!(
            cmp.op1_kind(),
            OpKind::Immediate8
                | OpKind::Immediate8to32
                | OpKind::Immediate8to64
                | OpKind::Immediate32
                | OpKind::Immediate32to64
        )
    {
        return None;
    }
    let count = usize::try_from(cmp.immediate(1)).ok()?.checked_add(extra)?;
    if count == 0 || count > 4096 {
        return None;
    }
    let bytes = read(table, count * entry)?;
    let targets: Vec<u64> = bytes
        .chunks_exact(entry)
        .map(|e| match entry {
            4 => table.wrapping_add(i32::from_le_bytes(e.try_into().unwrap()) as i64 as u64),
            _ => u64::from_le_bytes(e.try_into().unwrap()),
        })
        .collect();
    (targets.len() == count && targets.iter().all(|t| (start..end).contains(t))).then_some(targets)
}
