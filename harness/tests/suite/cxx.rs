//! C++ operator new/delete are counted once each, at their real caller, and
//! the malloc/free they make inside libstdc++ are not counted twice.

use rig::probe::{Family, ProbeSet, WindowEnd};
use rig::report::Attribution;
use rig::symbolize::Symbolizer;

use super::{probes_shared, Driven};

const SRC: &str = r#"
#include <cstdio>
struct Obj { long a[6]; };               // 48 bytes
__attribute__((noinline)) void work() {
    Obj *o = new Obj;                    // operator new(48)
    int *arr = new int[10];              // operator new[](40)
    o->a[0] = arr[0] = 1;
    delete o;                            // operator delete (sized)
    delete[] arr;                        // operator delete[]
}
int main() {
    char line[16];
    std::puts("READY");
    std::fflush(stdout);
    while (std::fgets(line, sizeof line, stdin)) {
        work();
        std::fputs("ok\n", stdout);
        std::fflush(stdout);
    }
}
"#;

#[test]
fn counts_cxx_new_and_delete_once_at_their_callers() {
    root_or_skip!();
    let _g = probes_shared();
    // -O0: at -O2 g++ may elide a new/delete pair altogether.
    let mut prog = Driven::build(
        "g++",
        &["-O0", "-g", "-fno-omit-frame-pointer"],
        "n.cc",
        SRC,
    );
    let pid = prog.pid();
    let mut round = |n: u64| {
        for _ in 0..n {
            assert_eq!(prog.ask(), "ok");
        }
    };
    round(50); // warm-up: stdio buffers, lazy binding
    let probes = ProbeSet::attach(pid, &[Family::Alloc]).unwrap();
    round(50);
    const N: u64 = 1000;
    let start = probes.start_window().unwrap();
    round(N);
    let w = probes.end_window(start, WindowEnd::Completed).unwrap();
    drop(probes);
    let a = Attribution::build(&w, Some(N), None, &mut Symbolizer::new());

    let at_work = |kind: &str| -> (u64, u64) {
        a.alloc
            .iter()
            .filter(|r| r.kind == kind && r.site.function.as_deref() == Some("work()"))
            .fold((0, 0), |(c, b), r| (c + r.calls, b + r.bytes))
    };
    assert_eq!(at_work("operator new"), (N, 48 * N), "{:#?}", a.alloc);
    assert_eq!(at_work("operator new[]"), (N, 40 * N), "{:#?}", a.alloc);
    assert_eq!(at_work("operator delete").0, N, "{:#?}", a.alloc);
    assert_eq!(at_work("operator delete[]").0, N, "{:#?}", a.alloc);
    // The mallocs inside operator new are marked inner and not double counted.
    assert_eq!(a.alloc_totals.allocations, 2 * N, "{:#?}", a.alloc);
    assert_eq!(a.alloc_totals.bytes, 88 * N);
    assert_eq!(a.alloc_totals.frees, 2 * N, "{:#?}", a.alloc);
}
