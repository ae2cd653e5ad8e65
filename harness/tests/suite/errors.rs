//! Bad input gets a clear message and a documented exit code.

use std::os::unix::process::CommandExt;
use std::process::Command;

use super::audit::run_audited;
use super::{calib, is_root, rig_bin};
use rig::exit;

fn rig(args: &[&str]) -> (i32, String) {
    let out = Command::new(rig_bin()).args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn refuses_an_unknown_probe_family_with_the_list_of_known_ones() {
    let (code, err) = rig(&["attach", "--pid", "1", "--probes", "alloc,mallocs"]);
    assert_eq!(code, exit::USAGE, "{err}");
    assert!(err.contains("unknown probe family `mallocs`"), "{err}");
    assert!(
        err.contains("syscalls, alloc, copy, locks, faults, sched"),
        "{err}"
    );
}

#[test]
fn refuses_a_pid_that_does_not_exist() {
    root_or_skip!();
    // pid_max is at most 2^22: this pid cannot exist.
    let (code, err) = rig(&["attach", "--pid", "4194305", "--duration", "1s"]);
    assert_eq!(code, exit::NO_PROCESS, "{err}");
    assert!(
        err.contains("rig: error: no process with pid 4194305"),
        "{err}"
    );
}

/// Not root: exit 3, saying so; and the refused rig leaves nothing (the
/// leftover audit of suite/audit.rs: no process, cgroup, run directory or
/// BPF program of it).
#[test]
fn refuses_to_run_without_root() {
    // rig starts no target here: a tag nothing carries, no output directory.
    let tag = format!("no-root-{}", std::process::id());
    let no_out = std::env::temp_dir().join(format!("rig-errors-no-out-{}", std::process::id()));
    if !is_root() {
        // Already unprivileged: rig must refuse us directly.
        let (code, _, err) = run_audited(
            "no-root",
            &tag,
            &no_out,
            Command::new(rig_bin()).args(["attach", "--pid", "1", "--duration", "1s"]),
        );
        assert_eq!(code, exit::PERMISSION, "{err}");
        assert!(err.contains("needs root"), "{err}");
        return;
    }
    let target = calib(&[]);
    let (code, _, err) = run_audited(
        "no-root",
        &tag,
        &no_out,
        Command::new(rig_bin())
            .args([
                "attach",
                "--pid",
                &target.pid().to_string(),
                "--duration",
                "1s",
            ])
            .uid(65534)
            .gid(65534),
    );
    assert_eq!(code, exit::PERMISSION, "{err}");
    assert!(
        err.contains("needs root") && err.contains("euid is 65534"),
        "{err}"
    );
}

#[test]
fn refuses_pids_it_cannot_trace_itself_or_kernel_threads() {
    root_or_skip!();
    // pid 2 is kthreadd: no user memory.
    let (code, err) = rig(&["attach", "--pid", "2", "--duration", "1s"]);
    assert_eq!(code, exit::PERMISSION, "{err}");
    assert!(err.contains("kernel thread"), "{err}");
}

#[test]
fn copy_and_alloc_probes_find_a_static_executables_own_c_library() {
    root_or_skip!();
    // A static binary maps no libc.so: its C library is in the executable.
    let dir = std::env::temp_dir().join(format!("rig-static-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("s.c");
    std::fs::write(
        &src,
        "#include <unistd.h>\nint main(void){ for(;;) pause(); }\n",
    )
    .unwrap();
    let exe = dir.join("s");
    let ok = Command::new("gcc")
        .args(["-static", "-O1", "-o"])
        .arg(&exe)
        .arg(&src)
        .status()
        .unwrap();
    assert!(ok.success(), "gcc -static works (libc6-dev ships libc.a)");
    let mut child = Command::new(&exe).spawn().unwrap();
    let attach = |probes: &str| {
        rig(&[
            "attach",
            "--pid",
            &child.id().to_string(),
            "--probes",
            probes,
            "--duration",
            "1s",
        ])
    };
    // The copy probes sit on the IFUNC implementations the executable's
    // own IRELATIVE relocations resolved.
    let (code, err) = attach("copy");
    // The allocator, though, is found where it is: in the executable.
    let (alloc_code, alloc_err) = attach("alloc");
    child.kill().unwrap();
    child.wait().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    // The C library linked into the executable is found there.
    assert_eq!(code, exit::OK, "the static memcpy is probed: {err}");
    assert_eq!(
        alloc_code,
        exit::OK,
        "a static malloc is probed: {alloc_err}"
    );
}

/// A static musl program that never calls memmove or memset: the linker
/// left them out, so they can never be called. The copy family probes the
/// memcpy that is there, names the two absent ones, and counts exactly:
/// 1000 memcpy calls of 100 B, made after the window opens.
#[test]
fn copies_absent_from_a_static_executable_are_named_and_the_rest_counted_exactly() {
    root_or_skip!();
    let dir = std::env::temp_dir().join(format!("rig-static-musl-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("m.c");
    // No stdio (its buffers would copy); the size is read through a
    // volatile so the compiler calls memcpy rather than inlining it.
    std::fs::write(
        &src,
        r#"#include <signal.h>
#include <string.h>
#include <unistd.h>
static volatile sig_atomic_t go;
static void on_usr1(int s) { (void)s; go = 1; }
static char a[100], b[100];
int main(void) {
    volatile size_t n = sizeof a;
    signal(SIGUSR1, on_usr1);
    for (;;) {
        pause();
        if (go) {
            for (int i = 0; i < 1000; i++) memcpy(i & 1 ? a : b, i & 1 ? b : a, n);
            go = 0;
            write(1, "done\n", 5);
        }
    }
}
"#,
    )
    .unwrap();
    let exe = dir.join("m");
    let ok = Command::new("musl-gcc")
        .args(["-static", "-O1", "-fno-builtin", "-o"])
        .arg(&exe)
        .arg(&src)
        .status()
        .expect("musl-gcc (Debian's musl-tools) is installed");
    assert!(ok.success(), "musl-gcc -static builds the program");
    let symbols = Command::new("nm").arg(&exe).output().unwrap();
    let symbols = String::from_utf8_lossy(&symbols.stdout);
    let has = |f: &str| symbols.lines().any(|l| l.ends_with(&format!(" {f}")));
    assert!(has("memcpy") && !has("memmove"), "{symbols}");
    /// The program, killed however the test ends (a failed assertion
    /// too): a test leaves nothing running.
    struct Program(std::process::Child);
    impl Drop for Program {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut program = Program(
        Command::new(&exe)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let child = &mut program.0;
    let json = dir.join("a.json");
    let mut rig = Command::new(rig_bin())
        .args([
            "attach",
            "--pid",
            &child.id().to_string(),
            "--probes",
            "copy",
        ])
        .args(["--duration", "2s", "--json"])
        .arg(&json)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = std::io::BufReader::new(rig.stderr.take().unwrap());
    let mut seen = String::new();
    loop {
        let mut line = String::new();
        let n = std::io::BufRead::read_line(&mut stderr, &mut line).unwrap();
        assert!(n > 0, "rig ended before opening its window: {seen}");
        seen.push_str(&line);
        if line.contains("window open") {
            break;
        }
    }
    // SAFETY: a signal to the child this test started.
    unsafe { libc::kill(child.id() as i32, libc::SIGUSR1) };
    let mut done = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut done,
    )
    .unwrap();
    assert_eq!(done, "done\n");
    std::io::Read::read_to_string(&mut stderr, &mut seen).unwrap();
    let code = rig.wait().unwrap().code();
    // Nor is malloc linked in: the alloc family says so.
    let alloc_json = dir.join("alloc.json");
    let alloc = Command::new(rig_bin())
        .args([
            "attach",
            "--pid",
            &program.0.id().to_string(),
            "--probes",
            "alloc",
        ])
        .args(["--duration", "1s", "--json"])
        .arg(&alloc_json)
        .output()
        .unwrap();
    drop(program);
    let a: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let alloc_notes: serde_json::Value =
        serde_json::from_slice::<serde_json::Value>(&std::fs::read(&alloc_json).unwrap()).unwrap()
            ["notes"]
            .clone();
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(alloc.status.code(), Some(exit::OK), "{alloc:?}");
    assert!(
        alloc_notes
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n["family"] == "alloc"
                && n["what"] == "malloc"
                && n["note"]
                    .as_str()
                    .unwrap()
                    .starts_with("absent: not linked into m")),
        "{alloc_notes:#}"
    );
    assert_eq!(code, Some(exit::OK), "{seen}");
    let rows = a["copy"].as_array().unwrap();
    let sum = |k: &str| -> i64 { rows.iter().filter_map(|r| r[k].as_i64()).sum() };
    assert_eq!(
        (sum("calls"), sum("bytes")),
        (1000, 100_000),
        "{:#}",
        a["copy"]
    );
    // The absent ones are named in the attach notes.
    let notes = a["notes"].as_array().unwrap();
    for absent in ["memmove", "memset"] {
        assert!(
            notes.iter().any(|n| n["family"] == "copy"
                && n["what"] == absent
                && n["note"] == "absent: not linked into m, never called, not probed"),
            "{absent}: {notes:#?}"
        );
    }
}

#[test]
fn refuses_to_drive_load_anywhere_but_loopback() {
    let (code, err) = rig(&["attach", "--pid", "1", "--drive", "http://192.0.2.1:80/"]);
    assert_eq!(code, exit::ERROR, "{err}");
    assert!(err.contains("not loopback"), "{err}");
}

#[test]
fn refuses_to_drive_load_at_a_port_another_process_holds() {
    root_or_skip!();
    let a = calib(&[]);
    let b = calib(&[]);
    // Probing a while driving b's port would measure the wrong process.
    let url = format!("http://127.0.0.1:{}/calib", b.port);
    let (code, err) = rig(&[
        "attach",
        "--pid",
        &a.pid().to_string(),
        "--drive",
        &url,
        "--requests",
        "10",
    ]);
    assert_eq!(code, exit::ERROR, "{err}");
    assert!(
        err.contains(&format!("is held by pid {}", b.pid())) && err.contains("not by --pid"),
        "{err}"
    );
}

#[test]
fn refuses_overlapping_server_and_client_cpus() {
    let out = std::env::temp_dir().join(format!("rig-cpus-{}", std::process::id()));
    let target = concat!(env!("CARGO_MANIFEST_DIR"), "/../config/targets/calib.toml");
    let (code, err) = rig(&[
        "run",
        "--target",
        target,
        "--out",
        out.to_str().unwrap(),
        "--server-cpu",
        "0",
        "--client-cpus",
        "0,1",
    ]);
    // A bad flag value, refused before anything starts.
    assert_eq!(code, exit::USAGE, "{err}");
    assert!(
        err.contains("--client-cpus 0,1 overlaps --server-cpu 0 on CPU 0; give disjoint CPU sets"),
        "{err}"
    );
    assert!(!out.exists(), "nothing was written");
}

#[test]
fn check_config_explains_errors_with_their_line() {
    let dir = std::env::temp_dir().join(format!("rig-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.toml");
    std::fs::write(&bad, "name = \"x\"\nargv = []\nready = { tcp = true }\n").unwrap();
    let (code, err) = rig(&["check-config", bad.to_str().unwrap()]);
    assert_eq!(code, exit::USAGE, "{err}");
    assert!(err.contains("bad.toml:2:"), "{err}");
    let matrix = dir.join("m.toml");
    std::fs::write(&matrix, "[[suite]]\nname = \"h\"\nkind = \"htp\"\n").unwrap();
    let (code, err) = rig(&["check-config", matrix.to_str().unwrap()]);
    assert_eq!(code, exit::USAGE, "{err}");
    assert!(err.contains("m.toml:3:"), "{err}");
    let good = concat!(env!("CARGO_MANIFEST_DIR"), "/../config/matrix.toml");
    let out = Command::new(rig_bin())
        .args(["check-config", good])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
