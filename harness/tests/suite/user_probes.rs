//! Probes a user names: what `rig probes` lists of a running process,
//! against binutils' reading of the same files.

use std::process::{Command, Stdio};

use super::rig_bin;

/// Debian's python3.11 (the machine's python3) carries CPython's USDT
/// markers, semaphore-guarded. `rig probes --pid P 'python:*'` lists each
/// marker readelf lists, with its semaphore and arguments; a function
/// pattern lists libc's functions by module; a pattern matching nothing
/// says so.
#[test]
fn rig_probes_lists_a_running_pythons_markers_as_readelf_reads_them() {
    let python = "/usr/bin/python3.11";
    let mut child = Command::new(python)
        .args(["-c", "import sys; sys.stdin.read()"])
        .stdin(Stdio::piped())
        .spawn()
        .expect("Debian 12's python3.11");
    let pid = child.id().to_string();
    // Until the interpreter has mapped libc: its first read of stdin.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .unwrap_or_default()
        .contains("libc.so.6")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "python never mapped libc"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let probes = |pattern: &str| {
        let out = Command::new(rig_bin())
            .args(["probes", "--pid", &pid, pattern])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let listed = probes("python:*");
    let notes = Command::new("readelf")
        .args(["-n", python])
        .output()
        .unwrap();
    let notes = String::from_utf8_lossy(&notes.stdout);
    // Each note as readelf prints it: Name, Location/Semaphore, Arguments.
    let field = |key: &str| -> Vec<String> {
        notes
            .lines()
            .filter_map(|l| l.split(key).nth(1))
            .map(|v| v.trim().to_string())
            .collect()
    };
    let (names, semaphores, args) = (field("Name: "), field("Semaphore: "), field("Arguments:"));
    assert!(names.len() >= 8, "{notes}");
    assert_eq!(
        (names.len(), args.len()),
        (semaphores.len(), semaphores.len())
    );
    let usdt: Vec<&str> = listed.lines().filter(|l| l.starts_with("usdt ")).collect();
    assert_eq!(usdt.len(), names.len(), "{listed}");
    for ((name, sema), args) in names.iter().zip(&semaphores).zip(&args) {
        let line = usdt
            .iter()
            .find(|l| l.starts_with(&format!("usdt python:{name} ")))
            .unwrap_or_else(|| panic!("python:{name} not listed:\n{listed}"));
        let sema = u64::from_str_radix(sema.trim_start_matches("0x"), 16).unwrap();
        assert!(line.contains(python), "{line}");
        assert!(line.contains(&format!("semaphore {sema:#x}")), "{line}");
        assert!(line.ends_with(&format!("args: {args}")), "{line}");
    }

    let funcs = probes("libc.so.6!malloc");
    assert!(
        funcs
            .lines()
            .any(|l| l.starts_with("func ") && l.ends_with("libc.so.6!malloc")),
        "{funcs}"
    );
    assert!(funcs.contains("1 function(s) match it"), "{funcs}");
    let none = probes("nosuch:marker*");
    assert!(
        none.contains("0 USDT marker(s)") && none.contains("0 function(s) match it"),
        "{none}"
    );
    let _ = child.kill();
    let _ = child.wait();
}
