//! pymalloc inlined into its callers by a link-time optimized CPython
//! (Debian's): where the copies are, so the alloc family can name what it
//! does not count and measure how often those paths ran.

use std::path::Path;

use crate::elf::ElfFacts;

/// pymalloc's allocation and free paths a module has inlined into callers
/// that never call its exported API: each copy's hook test, and the
/// conditional branch that follows it (link-time addresses).
#[derive(Debug, Default, PartialEq)]
pub(in crate::runtime) struct InlinedPymalloc {
    pub allocs: Vec<InlinedPath>,
    pub frees: Vec<InlinedPath>,
}

/// One inlined copy of pymalloc's hook test.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(in crate::runtime) struct InlinedPath {
    /// The test's first instruction.
    pub test: u64,
    /// The conditional branch right after the test, when only the test
    /// leads to it (no direct branch in the file lands on it): a uprobe
    /// there fires once per run of the path, and the kernel emulates a
    /// branch (about 1 us per hit) where it would single-step the test.
    pub branch: Option<u64>,
}

/// pymalloc's inlined copies in the module at `path`. An LTO build makes
/// `PyObject_Malloc` test the hook (`_PyObject.malloc`) against pymalloc's
/// own `_PyObject_Malloc` and run it in place when they match, and copies
/// that test into every caller: the exported function's own test names
/// the implementation's address, and every other instruction that tests
/// against that address is an inlined copy. A build that calls through the
/// hook (no test in the exported function) has none.
pub(in crate::runtime) fn inlined_pymalloc(
    path: &Path,
    facts: &ElfFacts,
) -> anyhow::Result<InlinedPymalloc> {
    let data = std::fs::read(path)?;
    let obj = object::File::parse(&*data)?;
    let text = super::calls::text_of(&obj);
    let body = |name: &str| -> Option<(u64, u64, &[u8])> {
        let sym = facts.lookup_symbol(name)?;
        let &(addr, bytes) = text
            .iter()
            .find(|(a, b)| *a <= sym.vaddr && sym.vaddr + sym.size <= a + b.len() as u64)?;
        let from = (sym.vaddr - addr) as usize;
        Some((
            sym.vaddr,
            sym.vaddr + sym.size,
            &bytes[from..from + sym.size as usize],
        ))
    };
    let in_text = |a: u64| text.iter().any(|(s, b)| *s <= a && a < s + b.len() as u64);
    let sites: Vec<HookTest> = text
        .iter()
        .flat_map(|&(addr, bytes)| hook_test_sites(bytes, addr))
        .collect();
    let landings = super::calls::branch_landings(&text, (0, u64::MAX));
    // The exported entry points' own tests are calls rig counts.
    let own: Vec<(u64, u64)> = [
        "PyObject_Malloc",
        "PyObject_Calloc",
        "PyObject_Realloc",
        "PyObject_Free",
    ]
    .iter()
    .filter_map(|n| body(n).map(|(s, e, _)| (s, e)))
    .collect();
    let mut out = InlinedPymalloc::default();
    for (exported, free) in [
        ("PyObject_Malloc", false),
        ("PyObject_Calloc", false),
        ("PyObject_Realloc", false),
        ("PyObject_Free", true),
    ] {
        let paths = if free {
            &mut out.frees
        } else {
            &mut out.allocs
        };
        let Some((start, end, code)) = body(exported) else {
            continue;
        };
        let Some(target) =
            hook_test_target(code, start, |a| in_text(a) && !(start..end).contains(&a))
        else {
            continue;
        };
        paths.extend(
            (sites.iter())
                .filter(|s| s.target == target)
                .filter(|s| !own.iter().any(|(a, e)| (*a..*e).contains(&s.at)))
                .map(|s| InlinedPath {
                    test: s.at,
                    branch: s.branch.filter(|b| !landings.contains(b)),
                }),
        );
    }
    Ok(out)
}

/// One hook test: its first instruction, the address it tests a register
/// against, and the conditional branch right after its `cmp`, if one is.
#[derive(Debug, PartialEq)]
struct HookTest {
    at: u64,
    target: u64,
    branch: Option<u64>,
}

/// The code address the first hook test in `code` (at `ip`) compares
/// against: `cmp $ADDR, %reg` (a build linked at a fixed address), or
/// `lea ADDR(%rip), %reg` followed by a `cmp` (position-independent),
/// where `is_code(ADDR)`.
fn hook_test_target(code: &[u8], ip: u64, is_code: impl Fn(u64) -> bool) -> Option<u64> {
    hook_test_sites(code, ip)
        .into_iter()
        .find_map(|t| is_code(t.target).then_some(t.target))
}

/// Every hook test in `code` (at `ip`): a `cmp` with an immediate, or a
/// rip-relative `lea` whose register a `cmp` within the next two
/// instructions reads. Decoded as a stream (an interpreter's text is
/// megabytes): only the tests are kept.
fn hook_test_sites(code: &[u8], ip: u64) -> Vec<HookTest> {
    use iced_x86::{Decoder, DecoderOptions, FlowControl, Instruction, Mnemonic, OpKind};
    let mut decoder = Decoder::with_ip(64, code, ip, DecoderOptions::NONE);
    let mut ins = Instruction::default();
    // A `lea` waiting for its `cmp`: (its address, register, target,
    // instructions left).
    let mut pending: Option<(u64, iced_x86::Register, u64, u8)> = None;
    // The test just found, waiting for the instruction after its `cmp`.
    let mut after_cmp = false;
    let mut out: Vec<HookTest> = Vec::new();
    while decoder.can_decode() {
        decoder.decode_out(&mut ins);
        if std::mem::take(&mut after_cmp) && ins.flow_control() == FlowControl::ConditionalBranch {
            if let Some(last) = out.last_mut() {
                last.branch = Some(ins.ip());
            }
        }
        let is_cmp = ins.mnemonic() == Mnemonic::Cmp;
        let mut test = |at: u64, target: u64| {
            out.push(HookTest {
                at,
                target,
                branch: None,
            });
            after_cmp = true;
        };
        if let Some((at, reg, target, left)) = pending.take() {
            let reads = |k: u32| {
                ins.op_kind(k) == OpKind::Register && ins.op_register(k).full_register() == reg
            };
            if is_cmp && (0..ins.op_count()).any(reads) {
                test(at, target);
            } else if left > 1 {
                pending = Some((at, reg, target, left - 1));
            }
        }
        if is_cmp && ins.op_count() == 2 && ins.op1_kind() == OpKind::Immediate32to64 {
            test(ins.ip(), ins.immediate32to64() as u64);
        } else if ins.mnemonic() == Mnemonic::Lea && ins.is_ip_rel_memory_operand() {
            let reg = ins.op0_register().full_register();
            pending = Some((ins.ip(), reg, ins.ip_rel_memory_address(), 2));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `mov 0x10(%rip),%rax; cmp $0x4fb450,%rax; jne +0` at 0x1000.
    const FIXED: &[u8] = &[
        0x48, 0x8b, 0x05, 0x10, 0x00, 0x00, 0x00, // mov
        0x48, 0x3d, 0x50, 0xb4, 0x4f, 0x00, // cmp rax, imm32
        0x75, 0x00, // jne
    ];

    /// `lea 0x200(%rip),%rdx; mov 0x10(%rip),%rax; cmp %rdx,%rax; jne +0`
    /// at 0x1000 (the hook loaded between the two, as gcc schedules it),
    /// then a `lea` of the same address whose `cmp` is the third
    /// instruction after it: no hook test.
    const PIE: &[u8] = &[
        0x48, 0x8d, 0x15, 0x00, 0x02, 0x00, 0x00, // lea rdx, [rip+0x200] -> 0x1207
        0x48, 0x8b, 0x05, 0x10, 0x00, 0x00, 0x00, // mov rax, [rip+0x10]
        0x48, 0x39, 0xd0, // cmp rax, rdx
        0x75, 0x00, // jne
        0x48, 0x8d, 0x0d, 0xed, 0x01, 0x00, 0x00, // lea rcx, [rip+0x1ed] -> 0x1207
        0x90, 0x90, // nops
        0x48, 0x39, 0xc8, // cmp rax, rcx: the third instruction after it
    ];

    #[test]
    fn a_hook_test_is_found_in_both_address_forms_and_only_there_with_its_branch() {
        let code = |_| true;
        let test = |at, target, branch| HookTest { at, target, branch };
        assert_eq!(hook_test_target(FIXED, 0x1000, code), Some(0x4f_b450));
        assert_eq!(
            hook_test_sites(FIXED, 0x1000),
            vec![test(0x1007, 0x4f_b450, Some(0x100d))]
        );
        assert_eq!(hook_test_target(PIE, 0x1000, code), Some(0x1207));
        assert_eq!(
            hook_test_sites(PIE, 0x1000),
            vec![test(0x1000, 0x1207, Some(0x1011))],
            "the far cmp is not one"
        );
        assert_eq!(hook_test_target(FIXED, 0x1000, |a| a != 0x4f_b450), None);
        // A test not followed by a conditional branch has none to probe.
        assert_eq!(
            hook_test_sites(&FIXED[..13], 0x1000),
            vec![test(0x1007, 0x4f_b450, None)]
        );
    }

    /// Debian's python3.11 (linked at a fixed address): its inlined paths,
    /// nearly all with a branch to probe.
    #[test]
    fn debians_python_has_inlined_paths_with_branches_to_probe() {
        let path = Path::new("/usr/bin/python3.11");
        if !path.exists() {
            eprintln!("skipped: no /usr/bin/python3.11 here");
            return;
        }
        let facts = ElfFacts::load(path).unwrap();
        let found = inlined_pymalloc(path, &facts).unwrap();
        assert!(
            found.allocs.len() > 100 && found.frees.len() > 20,
            "{found:?}"
        );
        for paths in [&found.allocs, &found.frees] {
            let probed = paths.iter().filter(|p| p.branch.is_some()).count();
            assert!(
                probed * 10 >= paths.len() * 9,
                "{probed} of {}",
                paths.len()
            );
            for p in paths {
                if let Some(b) = p.branch {
                    assert!(p.test < b && b - p.test < 24, "{p:?}");
                }
            }
        }
    }
}
