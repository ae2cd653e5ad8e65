//! Probes must never change what the target computes. A uprobe single-steps
//! the instruction it replaces; on this kernel that loses the result of an
//! AVX-512 instruction, and glibc's memset implementation starts with one
//! (`vpbroadcastb %esi,%zmm16`). rig moves such probes; this test proves the
//! copies stay right AND are all counted.

use rig::probe::{Family, ProbeSet, WindowEnd};
use rig::report::Attribution;
use rig::symbolize::Symbolizer;

use super::{probes_shared, Driven};

const SRC: &str = r#"
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>
static unsigned char src[70000], dst[70000];
/* One round: memset + memcpy + memmove + mempcpy of many lengths, every
 * result checked (mempcpy's return value too). */
__attribute__((noinline)) long round_trip(int salt) {
    long bad = 0;
    for (size_t len = 1; len < 66000; len = len * 3 / 2 + 1) {
        int c = (int)((len + salt) % 251) + 1;
        memset(dst, c, len);
        for (size_t i = 0; i < len; i++) if (dst[i] != (unsigned char)c) { bad++; break; }
        for (size_t i = 0; i < len; i++) src[i] = (unsigned char)(i * 7 + salt);
        memcpy(dst, src, len);
        if (memcmp(dst, src, len) != 0) bad++;
        memmove(dst + 1, dst, len);
        if (memcmp(dst + 1, src, len) != 0) bad++;
        unsigned char *end = mempcpy(dst, src, len);
        if (end != dst + len || memcmp(dst, src, len) != 0) bad++;
    }
    return bad;
}
int main(void) {
    char line[16];
    int salt = 0;
    puts("READY"); fflush(stdout);
    while (fgets(line, sizeof line, stdin)) { printf("%ld\n", round_trip(salt++)); fflush(stdout); }
}
"#;

/// Lengths per round: 1, 2, 4, 7, 11, ... below 66000.
fn lengths() -> u64 {
    let (mut n, mut len) = (0, 1u64);
    while len < 66000 {
        n += 1;
        len = len * 3 / 2 + 1;
    }
    n
}

#[test]
fn probing_copy_routines_never_changes_what_they_compute() {
    root_or_skip!();
    let _g = probes_shared();
    let mut prog = Driven::build(
        "gcc",
        &[
            "-O2",
            "-g",
            "-fno-builtin",
            "-fno-tree-loop-distribute-patterns",
        ],
        "t.c",
        SRC,
    );
    let pid = prog.pid();
    let mut rounds = |n: u64| -> u64 { (0..n).map(|_| prog.ask().parse::<u64>().unwrap()).sum() };
    assert_eq!(rounds(3), 0, "correct without probes");
    let probes = ProbeSet::attach(pid, &[Family::Copy]).unwrap();
    rounds(2);
    const N: u64 = 20;
    let start = probes.start_window().unwrap();
    let bad = rounds(N);
    let w = probes.end_window(start, WindowEnd::Completed).unwrap();
    drop(probes);
    let a = Attribution::build(&w, Some(N), None, &mut Symbolizer::new());

    assert_eq!(
        bad, 0,
        "every memset/memcpy/memmove/mempcpy result was right under probes"
    );
    let calls = |api: &str| -> u64 {
        a.copy
            .iter()
            .filter(|r| {
                r.site.function.as_deref() == Some("round_trip")
                    && r.kind.split('/').any(|k| k == api)
            })
            .map(|r| r.calls)
            .sum()
    };
    // memset once per length; memcpy, memmove and mempcpy share one
    // implementation (mempcpy's jumps into it), one call each per length.
    assert_eq!(calls("memset"), lengths() * N, "{:#?}", a.copy);
    assert_eq!(calls("memcpy"), 3 * lengths() * N, "{:#?}", a.copy);
    assert_eq!(calls("mempcpy"), 3 * lengths() * N, "{:#?}", a.copy);
    // memset's implementation starts with a vector instruction, so its probe
    // moved (past it to an emulated jump, or just past the vector run), and
    // the report says so and why.
    let memset_note = a.notes.iter().find(|n| n.what.contains("memset")).unwrap();
    assert!(
        memset_note.note.contains("placed at entry+")
            && (memset_note.note.contains("the kernel emulates it")
                || memset_note
                    .note
                    .contains("single-stepping vector instructions")),
        "{memset_note:?}"
    );
}
