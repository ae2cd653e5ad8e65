//! The Go matrix: the goserver fixture (fixtures/go/goserver, costs in
//! fixtures/go/COSTS.md) built by every Go this machine can get, the ways
//! users build it, each measured as `golang::go_server_measured_exactly`
//! measures the fixture: exact allocations and bytes at `main.goAllocs`,
//! GC cycles, exact copies and clears at `main.goCopies`, exact contended
//! `sync.Mutex` and RWMutex waits and runtime locks where `GET /work`
//! makes them, every stack whole (the write under
//! `net/http.(*conn).serve` to `runtime.goexit`); the builds with cgo,
//! threads made through cgo's C
//! with whole stacks; and, for the default build of each version, every
//! stack equal to gdb's backtrace at the same points.
//!
//! Versions: Debian 12's own Go (1.19, scripts/deps.sh installs it) and
//! what scripts/gos.sh fetches into `target/go/` (bookworm-backports' 1.21
//! to 1.23, trixie's 1.24, sid's 1.26 and 1.27; `make test` runs it
//! first). Builds: the default (cgo on, as `go build` makes it where a C
//! compiler is installed), `-buildmode=pie`, `CGO_ENABLED=0`, and
//! `CGO_ENABLED=0 -ldflags=-s -w` (stripped). A Go that is not there fails its test in
//! CI, naming it; outside CI it is skipped, saying so (`super::required`).
//!
//! The builds go to `target/go-matrix/`. `make test` runs this module alone,
//! before the rest of the suite: its builds take both cores for minutes,
//! and some of the suite's tests watch the machine's timing (a CPU-sample
//! count against the scheduler's time exceeded its 5% bound once with
//! these builds beside it).

use std::path::{Path, PathBuf};
use std::process::Command;

use super::golang::{
    cgo_thread_starts_are_whole, go_copies_and_locks_measured_exactly, go_server_measured_exactly,
    go_stacks_equal_gdb,
};
use super::repo;

#[derive(Clone, Copy, Debug)]
enum Build {
    Default,
    Pie,
    NoCgo,
    Stripped,
}

impl Build {
    const ALL: [Build; 4] = [Build::Default, Build::Pie, Build::NoCgo, Build::Stripped];

    fn name(self) -> &'static str {
        match self {
            Build::Default => "default",
            Build::Pie => "pie",
            Build::NoCgo => "nocgo",
            Build::Stripped => "stripped",
        }
    }

    fn args(self) -> &'static [&'static str] {
        match self {
            Build::Default | Build::NoCgo => &[],
            Build::Pie => &["-buildmode=pie"],
            // As the users build a stripped server: a static Go
            // program (cgo off), no symbols, no DWARF.
            Build::Stripped => &["-ldflags=-s -w"],
        }
    }
}

/// Go `version`'s GOROOT (its `go` is `bin/go` there), through the
/// suite's one rule for what a test needs from the machine.
fn goroot(test: &str, version: &str) -> Option<PathBuf> {
    let (root, how) = if version == "1.19" {
        (
            PathBuf::from("/usr/lib/go-1.19"),
            "apt-get install golang-go (scripts/deps.sh)".to_string(),
        )
    } else {
        (
            repo()
                .join("target/go")
                .join(version)
                .join(format!("usr/lib/go-{version}")),
            format!("fetch it with `scripts/gos.sh {version}` (make test does)"),
        )
    };
    let found = root.join("bin/go").is_file().then_some(root);
    super::required(test, &format!("Go {version}"), found, &how)
}

/// Go `version`'s build `b` of the goserver fixture.
fn build(go: &Path, goroot: &Path, version: &str, b: Build) -> PathBuf {
    let dir = repo().join("target/go-matrix");
    let out = dir.join(version).join(b.name()).join("goserver");
    let src = rig_fixtures::goserver_source().parent().unwrap();
    let output = Command::new(go)
        .current_dir(src)
        .args(["build"])
        .args(b.args())
        .arg("-o")
        .arg(&out)
        .arg(".")
        .env("GOROOT", goroot)
        .env("GOCACHE", dir.join("cache"))
        .env("GOPATH", dir.join("gopath"))
        .env("GOFLAGS", "-mod=mod")
        .env("GOPROXY", "off")
        .env("GOTOOLCHAIN", "local")
        .env(
            "CGO_ENABLED",
            if matches!(b, Build::NoCgo | Build::Stripped) {
                "0"
            } else {
                "1"
            },
        )
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", go.display()));
    assert!(
        output.status.success(),
        "Go {version} {}: go build failed:\n{}",
        b.name(),
        String::from_utf8_lossy(&output.stderr)
    );
    out
}

/// The version `go version` prints of `binary` (`go1.23.5`).
fn built_by(go: &Path, goroot: &Path, binary: &Path) -> String {
    let out = Command::new(go)
        .args(["version"])
        .arg(binary)
        .env("GOROOT", goroot)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .nth(1)
        .unwrap_or_default()
        .to_string()
}

fn matrix(version: &str) {
    let test = format!("go_matrix::go_{}", version.replace('.', "_"));
    if !super::root_or_skip(&test) {
        return;
    }
    let Some(goroot) = goroot(&test, version) else {
        return;
    };
    let go = goroot.join("bin/go");
    for b in Build::ALL {
        let binary = build(&go, &goroot, version, b);
        let by = built_by(&go, &goroot, &binary);
        assert!(
            by.starts_with(&format!("go{version}")),
            "{} was built by {by}",
            binary.display()
        );
        println!("== Go matrix: {by} {}", b.name());
        go_server_measured_exactly(&binary);
        go_copies_and_locks_measured_exactly(&binary);
        if matches!(b, Build::Default | Build::Pie) {
            cgo_thread_starts_are_whole(&binary);
        }
    }
    let default = repo()
        .join("target/go-matrix")
        .join(version)
        .join(Build::Default.name())
        .join("goserver");
    go_stacks_equal_gdb(&default);
}

#[test]
fn go_1_19() {
    matrix("1.19");
}

#[test]
fn go_1_21() {
    matrix("1.21");
}

#[test]
fn go_1_22() {
    matrix("1.22");
}

#[test]
fn go_1_23() {
    matrix("1.23");
}

#[test]
fn go_1_24() {
    matrix("1.24");
}

#[test]
fn go_1_26() {
    matrix("1.26");
}

#[test]
fn go_1_27() {
    matrix("1.27");
}
