//! Compiles the BPF programs in `bpf/` with clang (`-g -O2 -target bpf`; aya
//! refuses objects without BTF, which `-g` provides) against libbpf-dev's
//! headers, into OUT_DIR, where `src/lib.rs` embeds them. Each program is
//! built twice: `NAME.bpf.o` for kernels with `bpf_loop` and
//! `bpf_get_attach_cookie` (Linux 5.17 on), and `NAME.compat.bpf.o` with
//! `RIG_COMPAT` defined, for older ones (a bounded frame loop, cookies
//! looked up by address); the harness picks one per kernel.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Every program family; one object each.
const PROGRAMS: &[&str] = &[
    "syscalls", "alloc", "copy", "locks", "faults", "sched", "cpu", "user",
];
/// Headers the programs share (rebuild when any changes).
const HEADERS: &[&str] = &[
    "common.h",
    "common.bpf.h",
    "sizeclass.bpf.h",
    "syscalls.h",
    "alloc.h",
    "copy.h",
    "locks.h",
    "faults.h",
    "sched.h",
    "cpu.h",
    "user.h",
    "stack.h",
    "stack.bpf.h",
    "uretprobe.bpf.h",
];
/// The object variants: file suffix and extra clang flags.
const VARIANTS: &[(&str, &[&str])] = &[("", &[]), (".compat", &["-DRIG_COMPAT"])];

fn main() {
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR"));
    let src = Path::new("bpf");
    for h in HEADERS {
        println!("cargo:rerun-if-changed=bpf/{h}");
    }
    println!("cargo:rerun-if-env-changed=RIG_CLANG");
    let clang = find_clang();
    let multiarch = format!("/usr/include/{}-linux-gnu", env::consts::ARCH);
    for name in PROGRAMS {
        let c = src.join(format!("{name}.bpf.c"));
        println!("cargo:rerun-if-changed={}", c.display());
        for (suffix, flags) in VARIANTS {
            compile(
                &clang,
                &multiarch,
                &c,
                &out.join(format!("{name}{suffix}.bpf.o")),
                flags,
            );
        }
    }
}

fn compile(clang: &str, multiarch: &str, c: &Path, obj: &Path, flags: &[&str]) {
    let status = Command::new(clang)
        .args(["-g", "-O2", "-target", "bpf", "-Wall", "-Werror"])
        .args(flags)
        .arg("-D__TARGET_ARCH_x86")
        .arg(format!("-I{multiarch}"))
        .arg("-c")
        .arg(c)
        .arg("-o")
        .arg(obj)
        .status()
        .unwrap_or_else(|e| {
            panic!("running {clang}: {e}. Install clang and libbpf-dev (`make deps`)")
        });
    assert!(status.success(), "{clang} failed on {}", c.display());
}

fn find_clang() -> String {
    if let Ok(c) = env::var("RIG_CLANG") {
        return c;
    }
    for c in ["clang", "clang-19", "clang-16", "clang-14"] {
        if Command::new(c).arg("--version").output().is_ok() {
            return c.to_string();
        }
    }
    panic!("no clang found: install clang and libbpf-dev (`make deps`), or set RIG_CLANG");
}
