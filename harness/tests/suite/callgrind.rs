//! The callgrind instruction window (no root needed; slow: valgrind).
//! Expected numbers: fixtures/calib/COSTS.md, "GET /spin".

use std::path::Path;

use rig::launch::spec::TargetSpec;
use rig::probe::callgrind::{self, InstrWindow};

const N: u64 = 200;

fn calib_spec() -> TargetSpec {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../config/targets/calib.toml");
    TargetSpec::load(p).expect("calib spec loads")
}

fn window(path: &str) -> InstrWindow {
    rig::window::instructions::measure_callgrind(&calib_spec(), path, N, 50)
        .expect("callgrind window")
}

fn self_ir(w: &InstrWindow, name: &str) -> f64 {
    w.functions
        .iter()
        .filter(|f| f.name == name)
        .map(|f| f.self_ir)
        .sum()
}

/// calib_spin's loop, from `objdump -d` of calib_server (gcc -O2):
/// 5 instructions before the loop (mov, test, jle, xor, 2-byte nop), 6 per
/// iteration (mov, add, add, mov, cmp, jne), 1 ret.
const SPIN_FIXED: f64 = 6.0;
const SPIN_PER_ITER: f64 = 6.0;
const SPIN_ITERS: f64 = 1000.0; // g_spin_iters

#[test]
fn callgrind_noop_is_repeatable() {
    let a = window("/noop");
    let b = window("/noop");
    assert_eq!(a.backend, "callgrind");
    assert!(a.note.contains("not time"));
    let spread = (a.ir_per_request - b.ir_per_request).abs() / a.ir_per_request;
    eprintln!(
        "/noop Ir/request: {} and {} (spread {:.5}%)",
        a.ir_per_request,
        b.ir_per_request,
        spread * 100.0
    );
    assert!(a.ir_per_request > 0.0);
    assert!(spread < 0.001, "two /noop windows within 0.1%: {spread}");
}

#[test]
fn callgrind_spin_costs_what_the_disassembly_says() {
    let noop = window("/noop");
    let spin = window("/spin");
    let expect = SPIN_ITERS * SPIN_PER_ITER + SPIN_FIXED;
    let got = self_ir(&spin, "calib_spin");
    eprintln!(
        "/spin {} Ir/req, /noop {} Ir/req, difference {}, calib_spin self {got}",
        spin.ir_per_request,
        noop.ir_per_request,
        spin.ir_per_request - noop.ir_per_request
    );
    assert_eq!(got, expect, "calib_spin self Ir per request");
    let calls: f64 = spin
        .functions
        .iter()
        .filter(|f| f.name == "calib_spin")
        .map(|f| f.calls)
        .sum();
    assert_eq!(calls, 1.0, "one calib_spin call per request");
    assert_eq!(self_ir(&noop, "calib_spin"), 0.0);
    // Everything else is equal, except calib_serve_conn: routing /spin
    // takes one more inlined `has_prefix` comparison ("GET /noop " fails
    // before "GET /spin " matches) plus the call (47 Ir, COSTS.md).
    let diff = spin.ir_per_request - noop.ir_per_request;
    let routing = self_ir(&spin, "calib_serve_conn") - self_ir(&noop, "calib_serve_conn");
    eprintln!("routing difference in calib_serve_conn: {routing}");
    assert_eq!(
        diff,
        expect + routing,
        "/spin - /noop = calib_spin + routing"
    );
    assert!(
        (0.0..100.0).contains(&routing),
        "routing difference {routing}"
    );
    for f in &noop.functions {
        if f.name != "calib_serve_conn" {
            assert_eq!(self_ir(&spin, &f.name), f.self_ir, "{} unchanged", f.name);
        }
    }
}

const SNIPPET: &str = "\
# callgrind format
version: 1
positions: line
events: Ir
summary: 0

ob=(1) /usr/lib/libc.so.6
fl=(1) malloc.c
fn=(1) malloc
10 100
fn=(2) malloc@plt
0 3
cob=(1)
cfi=(1)
cfn=(1)
calls=1 10
0 100

ob=(2) /srv/app
fl=(2) app.c
fn=(3) walk'2
5 40
cfn=(3) walk'2
calls=2 5
5 80
fn=(4) walk
5 7
cfn=(3)
calls=1 5
5 120
cob=(1)
cfi=(1)
cfn=(2)
calls=4 0
6 412
fn=(3)
5 1

totals: 151
";

#[test]
fn callgrind_parse_compressed_names_contexts_and_plt() {
    let p = callgrind::parse(SNIPPET);
    assert_eq!(p.total_ir, 151);
    let get = |n: &str| p.functions.iter().find(|f| f.name == n).cloned();
    let malloc = get("malloc").expect("malloc");
    assert_eq!((malloc.self_ir, malloc.calls), (100.0, 1.0));
    assert_eq!(malloc.object, "/usr/lib/libc.so.6");
    let plt = get("malloc@plt").expect("malloc@plt kept as named");
    assert_eq!((plt.self_ir, plt.calls), (3.0, 4.0));
    assert_eq!(plt.object, "/usr/lib/libc.so.6");
    // walk and walk'2 are one function: self 40 + 7 + 1, calls 2 + 1.
    let walk = get("walk").expect("walk");
    assert_eq!((walk.self_ir, walk.calls), (48.0, 3.0));
    assert_eq!(walk.object, "/srv/app");
    assert!(p.functions.iter().all(|f| !f.name.contains('\'')));
    assert_eq!(p.functions.len(), 3);
    // Without totals: the sum of self costs.
    let no_totals = SNIPPET.replace("totals: 151\n", "");
    assert_eq!(callgrind::parse(&no_totals).total_ir, 151);
}
