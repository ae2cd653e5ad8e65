//! Shared set-up for the integration tests.
//!
//! Privileged tests start with `root_or_skip!()`: without root they skip
//! only when `CI` is unset (and say so, naming the test); in CI they fail
//! instead.

/// The name of the test function this expands in.
macro_rules! test_name {
    () => {{
        fn here() {}
        let path = std::any::type_name_of_val(&here);
        let path = path.strip_suffix("::here").unwrap_or(path);
        path.rsplit("::").next().unwrap_or(path)
    }};
}

/// Return from the test unless it may run: root, or not root and `CI`
/// unset (skipped, said). See [`root_or_skip`].
macro_rules! root_or_skip {
    () => {
        if !crate::suite::root_or_skip(test_name!()) {
            return;
        }
    };
}

mod ab;
mod allocators;
mod attach_calib;
mod attach_edges;
mod audit;
mod bad_input;
mod callgrind;
mod cleanup;
mod command;
mod compare;
mod cost;
mod cxx;
mod debian_servers;
mod drive;
mod errors;
mod flame;
mod foreign;
mod fuzz;
mod gate;
mod go_matrix;
mod golang;
mod html;
mod http3;
mod integrity;
mod launch;
mod live;
mod liveheap;
mod load;
mod managed;
mod mappings;
mod memslope;
mod misbehaving_targets;
mod nesting;
mod output_paths;
mod reach;
mod readme;
mod recovery;
mod redis;
mod render;
mod run;
mod scratch;
mod shipped;
mod signals;
mod soak;
mod stacks;
mod stall;
mod symbols;
mod tree;
mod trial_server;
mod user_fixture;
mod user_probes;
mod users;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use rig::probe::Family;
use rig::report::Attribution;
use rig::session::{self, AttachSettings, Child, Drive};

/// Tests that load probes hold this shared; tests that check that no probe
/// of rig's is left hold it exclusively, so they see only their own.
static PROBES: RwLock<()> = RwLock::new(());

pub fn probes_shared() -> RwLockReadGuard<'static, ()> {
    PROBES.read().unwrap_or_else(|e| e.into_inner())
}

pub fn probes_exclusive() -> RwLockWriteGuard<'static, ()> {
    PROBES.write().unwrap_or_else(|e| e.into_inner())
}

pub fn is_root() -> bool {
    // SAFETY: no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// True when the test may run; false (after saying so) when it must skip.
pub fn root_or_skip(test: &str) -> bool {
    if is_root() {
        return true;
    }
    if std::env::var_os("CI").is_some() {
        panic!("{test}: needs root, and CI is set: privileged tests never skip in CI");
    }
    eprintln!("SKIPPED {test}: needs root (CI unset, so skipping is allowed)");
    false
}

/// What a test needs from the machine (`found`: a tool or file, `None`
/// when missing): the one rule for all of them. Present, it is returned;
/// missing, the test skips saying how to install it (`install`), except in
/// CI, where it fails: `scripts/deps.sh` installs everything a test needs.
pub fn required(test: &str, what: &str, found: Option<PathBuf>, install: &str) -> Option<PathBuf> {
    if found.is_some() {
        return found;
    }
    if std::env::var_os("CI").is_some() {
        panic!("{test}: {what} is missing, and CI is set: {install}");
    }
    eprintln!("SKIPPED {test}: {what} is missing (CI unset, so skipping is allowed); {install}");
    None
}

/// `tool` on PATH, or in one of `also`.
pub fn on_path(tool: &str, also: &[&str]) -> Option<PathBuf> {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .chain(also.iter().map(PathBuf::from))
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
}

/// A file the test needs, by its path.
pub fn file(path: &str) -> Option<PathBuf> {
    Some(PathBuf::from(path)).filter(|p| p.is_file())
}

/// The calibration server's allocation sites from the fixture's own truth
/// (`rig_fixtures::calib::SITES`): (function, marker, kind as rig names
/// it, calls/req, bytes/req).
pub fn calib_alloc_sites() -> Vec<(&'static str, &'static str, &'static str, u64, u64)> {
    use rig_fixtures::calib::{Kind, SITES};
    SITES
        .iter()
        .filter(|s| {
            matches!(
                s.kind,
                Kind::Malloc
                    | Kind::Calloc
                    | Kind::Realloc
                    | Kind::PosixMemalign
                    | Kind::Memalign
                    | Kind::Free
            )
        })
        .map(|s| {
            (
                s.function,
                s.marker,
                s.kind
                    .libc_symbol()
                    .expect("an allocation kind has its symbol"),
                u64::from(s.count),
                s.bytes,
            )
        })
        .collect()
}

/// The calibration server, started fresh for one test.
pub fn calib(args: &[&str]) -> Child {
    let mut cmd = Command::new(rig_fixtures::calib_server());
    cmd.args(["--port", "0"]).args(args);
    Child::spawn_ready(cmd).expect("calibration server starts")
}

pub fn drive(port: u16, path: &str, requests: u64, connections: usize) -> Drive {
    Drive::h1(
        &format!("http://127.0.0.1:{port}{path}"),
        connections,
        200,
        requests,
    )
    .unwrap()
}

/// A fixed-count attribution session against `target`.
pub fn attribute(
    target: &Child,
    families: &[Family],
    requests: u64,
    connections: usize,
) -> Attribution {
    attribute_path(target, families, "/calib", requests, connections)
}

/// [`attribute`], driving `path` instead of `/calib`.
pub fn attribute_path(
    target: &Child,
    families: &[Family],
    path: &str,
    requests: u64,
    connections: usize,
) -> Attribution {
    let a = attribute_path_as_is(target, families, path, requests, connections);
    assert!(a.complete, "no events lost: {:?}", a.losses);
    a
}

/// [`attribute_path`] of a window that may be incomplete (the test says
/// what it must miss).
pub fn attribute_path_as_is(
    target: &Child,
    families: &[Family],
    path: &str,
    requests: u64,
    connections: usize,
) -> Attribution {
    let s = AttachSettings {
        pid: target.pid(),
        families: families.to_vec(),
        duration: std::time::Duration::ZERO,
        per: None,
        drive: Some(drive(target.port, path, requests, connections)),
        command: Vec::new(),
        tree: None,
        wrappers: Vec::new(),
        live_heap: false,
        user_probes: Vec::new(),
    };
    let stop = std::sync::atomic::AtomicBool::new(false);
    let a = session::run_attach(&s, &stop).expect("attribution session");
    let load = a.window.load.as_ref().unwrap();
    assert_eq!(
        load.succeeded, requests,
        "every request succeeded: {:?}",
        load.errors
    );
    a
}

/// `calib_server.c:LINE` of a `SITE:` marker.
pub fn at(marker: &str) -> String {
    format!("calib_server.c:{}", rig_fixtures::site_line(marker))
}

/// The repository's root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// A target spec of `config/targets/`, as a command-line argument.
pub fn spec(name: &str) -> String {
    repo()
        .join("config/targets")
        .join(name)
        .display()
        .to_string()
}

/// The rig binary built for these tests, or the one `RIG_TEST_BIN` names:
/// the tests that run rig's command line can then be run against another
/// build (an older commit's, to show that a test fails there).
pub fn rig_bin() -> &'static str {
    static BIN: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    BIN.get_or_init(|| {
        std::env::var("RIG_TEST_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_rig").to_string())
    })
}

/// What [`run_matrix`] ran: exit code, stdout then stderr, the cases of
/// cases.jsonl (none when rig wrote none).
pub struct MatrixRun {
    pub code: i32,
    pub text: String,
    pub cases: Vec<serde_json::Value>,
}

/// `rig run --target TARGET --matrix M --out OUT ARGS…`, with `matrix`
/// written to M in a fresh directory named after `name`.
pub fn run_matrix(name: &str, target: &str, matrix: &str, args: &[&str]) -> MatrixRun {
    let d = tempfile::Builder::new()
        .prefix(&format!("rig-{name}-"))
        .tempdir()
        .unwrap();
    let m = d.path().join("m.toml");
    std::fs::write(&m, matrix).unwrap();
    let out = d.path().join("out");
    let o = Command::new(rig_bin())
        .arg("run")
        .arg("--target")
        .arg(target)
        .arg("--matrix")
        .arg(&m)
        .arg("--out")
        .arg(&out)
        .args(args)
        .output()
        .unwrap();
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    let cases = std::fs::read_to_string(out.join("cases.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    MatrixRun {
        code: o.status.code().unwrap_or(-1),
        text,
        cases,
    }
}

/// Names of loaded BPF programs that are rig's (`rig_` prefix).
pub fn rig_programs() -> Vec<String> {
    aya::programs::loaded_programs()
        .filter_map(Result::ok)
        .filter_map(|p| p.name_as_str().map(str::to_string))
        .filter(|n| n.starts_with("rig_"))
        .collect()
}

/// IDs of the BPF programs process `pid` holds (through program and link
/// fds: `prog_id:` in /proc/<pid>/fdinfo). Lets a test watch one rig
/// process's probes even when other rig processes run on the machine.
pub fn program_ids_of(pid: u32) -> Vec<u32> {
    let mut ids = Vec::new();
    let Ok(rd) = std::fs::read_dir(format!("/proc/{pid}/fdinfo")) else {
        return ids;
    };
    for e in rd.flatten() {
        let Ok(text) = std::fs::read_to_string(e.path()) else {
            continue;
        };
        for l in text.lines() {
            if let Some(v) = l.strip_prefix("prog_id:") {
                if let Ok(id) = v.trim().parse::<u32>() {
                    ids.push(id);
                }
            }
        }
    }
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// Which of `ids` are still loaded in the kernel.
pub fn still_loaded(ids: &[u32]) -> Vec<u32> {
    aya::programs::loaded_programs()
        .filter_map(Result::ok)
        .map(|p| p.id())
        .filter(|id| ids.contains(id))
        .collect()
}

/// A small program compiled for one test and driven line by line: it prints
/// `READY`, then answers each line on stdin with one line. Killed, reaped
/// and its directory removed on drop.
pub struct Driven {
    child: std::process::Child,
    input: std::process::ChildStdin,
    output: std::io::BufReader<std::process::ChildStdout>,
    dir: std::path::PathBuf,
}

impl Driven {
    /// Compile `src` (file name `file`, e.g. `t.c`) with `compiler` and `flags`.
    pub fn build(compiler: &str, flags: &[&str], file: &str, src: &str) -> Driven {
        use std::io::BufRead;
        let dir = std::env::temp_dir().join(format!("rig-driven-{}-{file}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(file), src).unwrap();
        let exe = dir.join("prog");
        let ok = Command::new(compiler)
            .args(flags)
            .arg("-o")
            .arg(&exe)
            .arg(dir.join(file))
            .status()
            .unwrap_or_else(|e| panic!("{compiler} runs: {e}"));
        assert!(ok.success(), "{compiler} compiled {file}");
        let mut child = Command::new(&exe)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let input = child.stdin.take().unwrap();
        let mut output = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        output.read_line(&mut line).unwrap();
        assert_eq!(line, "READY\n");
        Driven {
            child,
            input,
            output,
            dir,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Send one line, return its answer (trimmed).
    pub fn ask(&mut self) -> String {
        use std::io::{BufRead, Write};
        self.input.write_all(b"go\n").unwrap();
        let mut line = String::new();
        self.output.read_line(&mut line).unwrap();
        line.trim().to_string()
    }
}

impl Drop for Driven {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
