use super::*;
use std::collections::HashMap;

/// No branch target anywhere.
fn none() -> BranchTargets {
    BranchTargets::default()
}

fn decode_at(code: &[u8], base: u64, at: u64) -> Instruction {
    let mut d = Decoder::with_ip(64, &code[(at - base) as usize..], at, DecoderOptions::NONE);
    d.decode()
}

#[test]
fn keeps_a_plain_entry_without_a_branch_in_reach() {
    // mov %rdi,%rax ; cmp $0x40,%rdx ; then ends
    let p = place(
        &[0x48, 0x89, 0xf8, 0x48, 0x83, 0xfa, 0x40],
        0x1000,
        6,
        Some(&none()),
    )
    .unwrap();
    assert_eq!(p.file_offset, 0x1000);
    assert_eq!(p.why, Why::Entry);
    assert!(p.skipped.is_empty());
}

#[test]
fn stays_at_an_entry_the_kernel_emulates() {
    // push %r12 ; push %rbp (glibc 2.36 malloc)
    let p = place(&[0x41, 0x54, 0x55], 0x98930, 1, Some(&none())).unwrap();
    assert_eq!((p.file_offset, p.why), (0x98930, Why::Entry));
    assert_eq!(p.instruction, "push %r12");
}

#[test]
fn moves_to_the_first_conditional_jump_past_instructions_that_write_no_argument() {
    // glibc 2.36 free: test %rdi,%rdi ; je +0xc8
    let code = [0x48, 0x85, 0xff, 0x0f, 0x84, 0xbf, 0, 0, 0];
    let p = place(&code, 0x98ef0, 1, Some(&none())).unwrap();
    assert_eq!(p.file_offset, 0x98ef3);
    assert_eq!(p.why, Why::Emulated);
    assert_eq!(p.skipped, vec!["test %rdi,%rdi".to_string()]);
    assert!(p.instruction.starts_with("je "), "{}", p.instruction);
}

#[test]
fn refuses_to_move_without_the_librarys_branch_targets() {
    let code = [0x48, 0x85, 0xff, 0x0f, 0x84, 0xbf, 0, 0, 0];
    let p = place(&code, 0x98ef0, 1, None).unwrap();
    assert_eq!((p.file_offset, p.why), (0x98ef0, Why::Entry));
}

#[test]
fn a_branch_target_inside_the_skipped_prefix_or_on_the_jump_refuses_the_move() {
    // mov %rdi,%rax ; cmp $0x40,%rdx ; jb (memmove; mempcpy jumps to +3)
    let code = [0x48, 0x89, 0xf8, 0x48, 0x83, 0xfa, 0x40, 0x72, 0x37];
    let ok = place(&code, 0x100, 3, Some(&none())).unwrap();
    assert_eq!((ok.file_offset, ok.why), (0x107, Why::Emulated));
    for target in [0x103, 0x107] {
        let t = BranchTargets::from_offsets(vec![target]);
        let p = place(&code, 0x100, 3, Some(&t)).unwrap();
        assert_eq!(
            (p.file_offset, p.why),
            (0x100, Why::Entry),
            "target {target:#x}"
        );
    }
    // A target at the entry itself, or past the jump, is no reason to stay.
    let t = BranchTargets::from_offsets(vec![0x100, 0x108, 0x50]);
    assert_eq!(place(&code, 0x100, 3, Some(&t)).unwrap().file_offset, 0x107);
}

/// glibc 2.36 `__mempcpy_avx512_unaligned_erms` at 0xc0 and
/// `__memmove_avx512_unaligned_erms` at 0x100: mempcpy is `mov %rdi,%rax;
/// add %rdx,%rax; jmp memmove+3`, memmove `mov %rdi,%rax; cmp $0x40,%rdx;
/// jb`.
const MEMPCPY: [u8; 8] = [0x48, 0x89, 0xf8, 0x48, 0x01, 0xd0, 0xeb, 0x3b];
const MEMMOVE: [u8; 9] = [0x48, 0x89, 0xf8, 0x48, 0x83, 0xfa, 0x40, 0x72, 0x37];

#[test]
fn a_wanted_siblings_jump_into_the_skipped_prefix_lets_the_probe_move() {
    let join = join_of(&MEMPCPY, 0xc0, 3).unwrap();
    assert_eq!(
        join,
        Join {
            entry: 0xc0,
            jump_from: 0xc6,
            lands: 0x103
        }
    );
    let t = BranchTargets::from_edges(vec![(0x103, 0xc6)]);
    let p = place_joining(&MEMMOVE, 0x100, 3, Some(&t), &[join]).unwrap();
    assert_eq!((p.file_offset, p.why), (0x107, Why::Emulated));
    assert_eq!(p.joined, vec![0xc0]);
    // Not named as wanted: the landing keeps the probe at the entry.
    let p = place_joining(&MEMMOVE, 0x100, 3, Some(&t), &[]).unwrap();
    assert_eq!((p.file_offset, p.why), (0x100, Why::Entry));
    assert!(p.joined.is_empty());
    // Another jump to the same place, from elsewhere, keeps it there too.
    let t2 = BranchTargets::from_edges(vec![(0x103, 0xc6), (0x103, 0x400)]);
    let p = place_joining(&MEMMOVE, 0x100, 3, Some(&t2), &[join]).unwrap();
    assert_eq!((p.file_offset, p.why), (0x100, Why::Entry));
    // A wanted jump that lands inside an instruction is no join.
    let odd = Join {
        lands: 0x104,
        ..join
    };
    let t3 = BranchTargets::from_edges(vec![(0x104, 0xc6)]);
    let p = place_joining(&MEMMOVE, 0x100, 3, Some(&t3), &[odd]).unwrap();
    assert_eq!((p.file_offset, p.why), (0x100, Why::Entry));
}

#[test]
fn a_sibling_that_changes_what_the_probe_reads_before_its_jump_is_no_join() {
    // add %rdx,%rdi ; jmp: the copy's destination would not be the call's.
    assert_eq!(join_of(&[0x48, 0x01, 0xd7, 0xeb, 0x3b], 0xc0, 3), None);
    // ...but a program reading no argument does not care.
    assert!(join_of(&[0x48, 0x01, 0xd7, 0xeb, 0x3b], 0xc0, 0).is_some());
    // push %rbx ; jmp: moves rsp, so *rsp is no longer the return address.
    assert_eq!(join_of(&[0x53, 0xeb, 0x3b], 0xc0, 3), None);
    // A conditional jump first: not every call reaches the jump.
    assert_eq!(join_of(&[0x74, 0x02, 0xeb, 0x3b], 0xc0, 3), None);
}

#[test]
fn an_instruction_writing_an_argument_the_program_reads_refuses_the_move() {
    let jz = [0x74, 0x10];
    for (write, what) in [
        (&[0x48, 0x89, 0xc7][..], "mov %rax,%rdi"),
        (&[0x89, 0xc6][..], "mov %eax,%esi"),
        (&[0xb2, 0x01][..], "mov $1,%dl"),
        (&[0x41, 0x89, 0xc1][..], "mov %eax,%r9d"),
    ] {
        let code = [write, &jz[..]].concat();
        let p = place(&code, 0x200, 6, Some(&none())).unwrap();
        assert_eq!((p.file_offset, p.why), (0x200, Why::Entry), "{what}");
    }
    // dl is the third argument: a program reading only the first two may
    // move past it (pthread_mutex_lock writes edx before its jne).
    let code = [&[0xb2, 0x01][..], &jz[..]].concat();
    assert_eq!(
        place(&code, 0x200, 2, Some(&none())).unwrap().file_offset,
        0x202
    );
    assert_eq!(
        place(&code, 0x200, 3, Some(&none())).unwrap().file_offset,
        0x200
    );
}

#[test]
fn a_push_or_a_stack_adjustment_before_the_branch_refuses_the_move() {
    // mov (%rdi),%eax ; then push %rbx, or sub $0x10,%rsp, or mov %rax,%rbp ; jz
    for (middle, what) in [
        (&[0x53][..], "push %rbx"),
        (&[0x48, 0x83, 0xec, 0x10][..], "sub $0x10,%rsp"),
        (&[0x48, 0x89, 0xc5][..], "mov %rax,%rbp"),
        (&[0x48, 0x8d, 0x64, 0x24, 0xf8][..], "lea -8(%rsp),%rsp"),
    ] {
        // Starts with a non-emulated instruction, so the push is not first.
        let code = [&[0x8b, 0x07][..], middle, &[0x74, 0x10][..]].concat();
        let p = place(&code, 0x300, 1, Some(&none())).unwrap();
        if what == "push %rbx" {
            // The push itself is emulated: it is the probe point, not skipped.
            assert_eq!((p.file_offset, p.why), (0x302, Why::Emulated), "{what}");
            assert_eq!(p.instruction, "push %rbx");
        } else {
            assert_eq!((p.file_offset, p.why), (0x300, Why::Entry), "{what}");
        }
    }
}

#[test]
fn a_memory_write_before_the_branch_refuses_the_move() {
    // mov %eax,0x10(%rdi) ; jz
    let code = [0x89, 0x47, 0x10, 0x74, 0x10];
    let p = place(&code, 0x400, 1, Some(&none())).unwrap();
    assert_eq!((p.file_offset, p.why), (0x400, Why::Entry));
}

#[test]
fn a_prefixed_or_unsupported_branch_form_is_not_chosen() {
    // test %eax,%eax, then: a CS-hinted jz (the kernel refuses to probe
    // it), a DS-hinted jnz, a 66-prefixed jz and a lock-free `jrcxz`
    // (emulated by no kernel): none is a probe point, and none falls
    // through, so the probe stays at the entry.
    for (branch, what) in [
        (&[0x2e, 0x74, 0x10][..], "cs jz"),
        (&[0x3e, 0x75, 0x10][..], "ds jnz"),
        (&[0x66, 0x74, 0x10][..], "data16 jz"),
        (&[0xe3, 0x10][..], "jrcxz"),
        (&[0xe2, 0x10][..], "loop"),
    ] {
        let code = [&[0x85, 0xc0][..], branch].concat();
        let p = place(&code, 0x500, 6, Some(&none())).unwrap();
        assert_eq!((p.file_offset, p.why), (0x500, Why::Entry), "{what}");
    }
    for (bytes, emulated) in [
        (&[0x74, 0x10][..], true),
        (&[0x0f, 0x85, 1, 0, 0, 0][..], true),
        (&[0xe8, 1, 0, 0, 0][..], true),
        (&[0xe9, 1, 0, 0, 0][..], true),
        (&[0xf2, 0xe9, 1, 0, 0, 0][..], true), // bnd jmp
        (&[0x66, 0xe8, 1, 0][..], false),      // callw
        (&[0x2e, 0x74, 0x10][..], false),
        (&[0x55][..], true),
        (&[0x41, 0x57][..], true),
        (&[0x48, 0x55][..], false), // rex.W push: single-stepped
        (&[0x66, 0x55][..], false),
        (&[0x90][..], true),
        (&[0x0f, 0x1f, 0x44, 0, 0][..], true),
        (&[0xf3, 0x90][..], false),             // pause
        (&[0xf3, 0x0f, 0x1e, 0xfa][..], false), // endbr64
        (&[0xff, 0xe0][..], false),             // jmp *%rax
        (&[0xc3][..], false),
    ] {
        assert_eq!(kernel_emulates(bytes), emulated, "{bytes:02x?}");
    }
}

#[test]
fn moves_at_most_max_skip_instructions() {
    // MAX_SKIP + 1 x `mov %eax,%r10d`, then jz: too far.
    let mut code: Vec<u8> = std::iter::repeat_n([0x41, 0x89, 0xc2], MAX_SKIP + 1)
        .flatten()
        .collect();
    code.extend([0x74, 0x10]);
    let p = place(&code, 0x600, 6, Some(&none())).unwrap();
    assert_eq!(p.file_offset, 0x600);
    let p = place(&code[3..], 0x603, 6, Some(&none())).unwrap();
    assert_eq!(p.file_offset, 0x603 + 3 * MAX_SKIP as u64);
    assert_eq!(p.skipped.len(), MAX_SKIP);
}

#[test]
fn moves_past_a_leading_avx512_broadcast_when_no_emulated_branch_qualifies() {
    // glibc 2.36 __memset_avx512_unaligned_erms:
    // vpbroadcastb %esi,%zmm16 ; mov %rdi,%rax ; cmp $0x40,%rdx ; jb
    let code = [
        0x62, 0xe2, 0x7d, 0x48, 0x7a, 0xc6, 0x48, 0x89, 0xf8, 0x48, 0x83, 0xfa, 0x40, 0x72, 0x31,
    ];
    // wmemset jumps to the cmp: the jb is reachable without the entry.
    let t = BranchTargets::from_offsets(vec![0x16e049]);
    let p = place(&code, 0x16e040, 3, Some(&t)).unwrap();
    assert_eq!(p.file_offset, 0x16e046);
    assert_eq!(p.why, Why::PastVectors);
    assert_eq!(p.skipped, vec!["vpbroadcastb %esi,%zmm16".to_string()]);
    // Without such a jump the broadcast is skipped on the way to the jb.
    let p = place(&code, 0x16e040, 3, Some(&none())).unwrap();
    assert_eq!((p.file_offset, p.why), (0x16e04d, Why::Emulated));
}

#[test]
fn refuses_a_vector_instruction_that_writes_memory_or_a_gpr() {
    // vmovdqu64 %zmm16,(%rdi): writes memory.
    let e = place(&[0x62, 0xe1, 0xfe, 0x48, 0x7f, 0x07], 0, 6, Some(&none())).unwrap_err();
    assert!(e.contains("cannot be probed safely"), "{e}");
    // vmovd %xmm0,%eax: writes a general register.
    let e = place(&[0xc5, 0xf9, 0x7e, 0xc0], 0, 6, Some(&none())).unwrap_err();
    assert!(e.contains("vmovd"), "{e}");
}

#[test]
fn finds_direct_branch_targets_in_real_libc() {
    let (_child, maps) = crate::symbolize::elf_tests::spawn_sleep();
    let libc = maps.readable_path(
        &crate::runtime::c_library(maps.pid, &maps)
            .map(|c| c.0)
            .unwrap(),
    );
    let t = BranchTargets::shared(&libc).unwrap();
    let facts = crate::elf::ElfFacts::shared(&libc).unwrap();
    // Everything calls malloc; many functions call free.
    let malloc = facts.lookup_symbol("malloc").unwrap().file_offset;
    assert!(t.any_in(malloc, malloc));
    assert!(!t.any_in(malloc + 1, malloc + 1), "inside push %r12");
}

/// The placements on this machine's libc: free, the copy routines glibc's
/// IFUNC resolvers pick on this CPU (read from a live child's GOT) and
/// pthread_mutex_lock move to a branch every call passes, unless a jump from
/// elsewhere lands in the skipped prefix; the allocators that start with a
/// push stay where they are.
// Long by design: the facts of one libc (branch targets, code, the live
// child's IFUNC picks) are read once and every entry point is checked
// against them in one table.
#[test]
fn places_probes_on_real_libc_on_instructions_the_kernel_emulates() {
    let (child, maps) = crate::symbolize::elf_tests::spawn_sleep();
    let libc_maps = crate::runtime::c_library(maps.pid, &maps)
        .map(|c| c.0)
        .unwrap();
    let libc = maps.readable_path(&libc_maps);
    let targets = BranchTargets::shared(&libc).unwrap();
    let code = std::fs::read(&libc).unwrap();
    let facts = crate::elf::ElfFacts::shared(&libc).unwrap();
    let mut entries: Vec<(String, u64, usize)> = Vec::new();
    for (name, args) in [
        ("free", 1),
        ("malloc", 1),
        ("calloc", 2),
        ("realloc", 2),
        ("pthread_mutex_lock", 1),
        ("pthread_mutex_trylock", 1),
        ("pthread_mutex_unlock", 1),
    ] {
        entries.push((
            name.into(),
            facts.lookup_symbol(name).unwrap().file_offset,
            args,
        ));
    }
    for api in ["memmove", "memcpy", "memset", "mempcpy"] {
        let r = crate::probe::ifunc::resolve_ifunc(child.0.id(), &maps, &libc_maps, api).unwrap();
        let name = format!("{api} = {}", r.impl_name.unwrap_or_default());
        entries.push((name, r.file_offset, 3));
    }
    let mut by_name = HashMap::new();
    for (name, entry, args) in &entries {
        let p = safe_probe_offset(&libc, *entry, *args).unwrap();
        eprintln!(
            "{name}: entry+{:#x} `{}` ({:?}) after {:?}",
            p.file_offset - entry,
            p.instruction,
            p.why,
            p.skipped
        );
        let at = decode_at(&code, 0, p.file_offset);
        assert!(!is_vector(&at), "{name}: never on a vector instruction");
        if p.why == Why::Emulated {
            // Everything skipped falls through, the probed instruction is
            // one the kernel emulates, and no jump lands in between.
            let mut ip = *entry;
            while ip < p.file_offset {
                let ins = decode_at(&code, 0, ip);
                assert_eq!(ins.flow_control(), FlowControl::Next, "{name} at {ip:#x}");
                ip = ins.next_ip();
            }
            assert_eq!(ip, p.file_offset);
            let len = at.len();
            let off = p.file_offset as usize;
            assert!(kernel_emulates(&code[off..off + len]), "{name}");
            assert!(!targets.any_in(entry + 1, p.file_offset), "{name}");
        }
        by_name.insert(name.split(' ').next().unwrap().to_string(), (p, *entry));
    }
    let branch = |api: &str| {
        let (p, entry) = &by_name[api];
        let at = decode_at(&code, 0, p.file_offset);
        assert_eq!(p.why, Why::Emulated, "{api}: {p:?}");
        assert_eq!(
            at.flow_control(),
            FlowControl::ConditionalBranch,
            "{api}: {p:?}"
        );
        p.file_offset - entry
    };
    // glibc 2.36 free: test %rdi,%rdi ; je.
    assert_eq!(branch("free"), 3);
    // pthread_mutex_lock: four loads and masks (of rax and rdx, not rdi),
    // then jne.
    assert_eq!(branch("pthread_mutex_lock"), 0xe);
    // pthread_mutex_unlock: mov $1,%esi (the program reads only rdi), then
    // the tail jump to __pthread_mutex_unlock_usercnt.
    let (unlock, unlock_entry) = &by_name["pthread_mutex_unlock"];
    assert_eq!(unlock.why, Why::Emulated, "{unlock:?}");
    assert_eq!(
        decode_at(&code, 0, unlock.file_offset).flow_control(),
        FlowControl::UnconditionalBranch
    );
    assert_eq!(unlock.file_offset - unlock_entry, 5);
    // The memset implementation, AVX2 or AVX-512, starts with a vector
    // instruction: the probe is never there.
    let (ms, ms_entry) = &by_name["memset"];
    assert!(is_vector(&decode_at(&code, 0, *ms_entry)));
    assert_ne!(ms.file_offset, *ms_entry, "{ms:?}");
    // malloc, calloc, realloc and trylock start with a push: emulated at
    // the entry.
    for api in ["malloc", "calloc", "realloc", "pthread_mutex_trylock"] {
        let (p, entry) = &by_name[api];
        assert_eq!((p.file_offset, p.why), (*entry, Why::Entry), "{api}");
        assert!(p.instruction.starts_with("push "), "{api}: {p:?}");
    }
    // memcpy and memmove share an implementation, and mempcpy's jumps into
    // it past its first instruction (`mov %rdi,%rax`): alone, the probe
    // stays at the entry, where mempcpy's calls do not pass.
    let (mm, mm_entry) = &by_name["memmove"];
    assert_eq!(by_name["memcpy"].1, *mm_entry);
    let first = decode_at(&code, 0, *mm_entry);
    assert!(targets.any_in(first.next_ip(), first.next_ip()));
    assert_eq!((mm.file_offset, mm.why), (*mm_entry, Why::Entry));
    // Named as a wanted sibling, mempcpy's implementation (which rig's copy
    // probes resolve the same way) lets the probe move to the `jb` every
    // memcpy, memmove and mempcpy call passes, and only mempcpy's jump
    // lands in between.
    let pcpy = by_name["mempcpy"].1;
    let joined = safe_probe_offset_joining(&libc, *mm_entry, 3, &[pcpy]).unwrap();
    assert_eq!(joined.why, Why::Emulated, "{joined:?}");
    assert_eq!(joined.joined, vec![pcpy]);
    assert_eq!(joined.file_offset - mm_entry, 7, "{joined:?}");
    assert!(joined.instruction.starts_with("jb "), "{joined:?}");
    let sources: Vec<(u64, u64)> = targets.in_range(mm_entry + 1, joined.file_offset).collect();
    assert!(!sources.is_empty());
    for (to, from) in sources {
        assert!(from > pcpy && from < pcpy + 16, "{from:#x} -> {to:#x}");
    }
}
