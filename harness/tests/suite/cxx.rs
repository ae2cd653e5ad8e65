//! C++ operator new/delete are counted once each, at their real caller, and
//! the malloc/free they make inside libstdc++ are not counted twice.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use rig::probe::{Family, ProbeSet, WindowEnd};
use rig::report::Attribution;
use rig::symbolize::Symbolizer;

use super::{probes_shared, root_or_skip};

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
    if !root_or_skip("counts_cxx_new_and_delete_once_at_their_callers") {
        return;
    }
    let _g = probes_shared();
    let dir = std::env::temp_dir().join(format!("rig-cxx-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("n.cc"), SRC).unwrap();
    let exe = dir.join("n");
    let ok = Command::new("g++")
        .args(["-O0", "-g", "-fno-omit-frame-pointer", "-o"]) // -O2 may elide new/delete pairs
        .arg(&exe)
        .arg(dir.join("n.cc"))
        .status()
        .expect("g++ runs");
    assert!(ok.success());
    let mut child = Command::new(&exe)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    let mut output = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    output.read_line(&mut line).unwrap();
    assert_eq!(line, "READY\n");
    let mut round = |n: u64| {
        for _ in 0..n {
            input.write_all(b"go\n").unwrap();
            line.clear();
            output.read_line(&mut line).unwrap();
            assert_eq!(line, "ok\n");
        }
    };
    round(50); // warm-up: stdio buffers, lazy binding
    let probes = ProbeSet::attach(child.id(), &[Family::Alloc]).unwrap();
    round(50);
    const N: u64 = 1000;
    let start = probes.start_window().unwrap();
    round(N);
    let w = probes.end_window(start, WindowEnd::Completed).unwrap();
    drop(probes);
    let a = Attribution::build(&w, Some(N), None, &mut Symbolizer::new());
    child.kill().unwrap();
    child.wait().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();

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
