//! Where results go: an output path is checked before any work (read-only
//! mounts, existing files, symlinks), planted directories and symlinks never
//! redirect a write rig makes as root, a full disk or a closed stdout ends
//! cleanly with every written file valid, paths with spaces and non-ASCII
//! work, and a cut last line of results is dropped the same way by every
//! reader and said.

use super::audit::{audit, wait_until, Case, Target, Watcher};
use super::scratch::{finish, launch_dirs_of, rig, Scratch};
use super::trial_server::{matrix, spec_with, tag, trial_run, trial_spec, Server};
use super::{calib, probes_shared, rig_bin};
use rig::exit;
use rig::launch::spec::TargetSpec;
use rig::launch::start::LaunchOptions;
use serde_json::Value;
use std::io::Read;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The tmpfs of one test, unmounted when dropped.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(at: PathBuf, size: &str) -> Tmpfs {
        std::fs::create_dir_all(&at).unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "rig-chaos"])
            .arg(&at)
            .status()
            .unwrap();
        assert!(ok.success(), "mount tmpfs at {}", at.display());
        Tmpfs(at)
    }

    /// Fill it until the kernel says ENOSPC.
    fn fill(&self) {
        use std::io::Write;
        let mut f = std::fs::File::create(self.0.join("filler")).unwrap();
        let block = vec![0u8; 64 * 1024];
        loop {
            if let Err(e) = f.write_all(&block) {
                assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "{e}");
                break;
            }
        }
        // Small writes until not even a byte fits.
        while f.write_all(&[0u8; 512]).is_ok() {}
        let _ = f.sync_all();
    }
}

/// `--out` on a disk that fills before the first case and one that fills
/// mid-run: rig exits 1 naming the cause, no target left, and each file
/// it had written is still whole JSON (an append that did not fit is
/// taken back, a report that did not fit leaves the previous one).
#[test]
fn a_full_disk_under_out_fails_cleanly_and_keeps_written_files_valid() {
    root_or_skip!();
    for when in ["before", "mid-run"] {
        let c = Case::new(&format!("disk-full-{when}"));
        let fs = Tmpfs::mount(c.s.0.join("mnt"), "1m");
        let out = fs.0.join("out");
        if when == "before" {
            fs.fill();
        }
        let spec = c.spec(Target::Plain);
        let m = c.s.write(
            "m.toml",
            "[defaults]\nwarmup_ms = 50\nduration_ms = 400\n\
             [[suite]]\nname = \"a\"\nkind = \"http\"\nprotocols = [\"h1\"]\n\
             paths = [\"/calib\"]\ntopologies = [\"1\", \"2\", \"3\", \"4\", \"5\", \"6\"]\n",
        );
        let rig = c.rig(&[
            "run",
            "--target",
            spec.to_str().unwrap(),
            "--matrix",
            m.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--passes",
            "clean",
        ]);
        let rig_pid = rig.id();
        let w = Watcher::start(rig_pid, &c.tag);
        if when == "mid-run" {
            // After the first case and its report are on disk.
            assert!(wait_until(Duration::from_secs(60), || {
                out.join("report.json").exists()
            }));
            fs.fill();
        }
        let (code, stdout, stderr) = finish(rig);
        let seen = w.finish();
        eprintln!("disk full {when}: exit {code}: {}", stderr.trim_end());
        audit(&format!("disk-full-{when}"), rig_pid, &c.tag, &seen, &out);
        assert_eq!(code, exit::ERROR, "{stdout}\n{stderr}");
        assert!(stderr.contains("No space left on device"), "{stderr}");
        if when == "mid-run" {
            let lines = std::fs::read_to_string(out.join("cases.jsonl")).unwrap();
            assert!(lines.lines().count() >= 1, "the first case is kept");
            assert!(out.join("report.json").exists());
        }
    }
}

#[test]
fn a_planted_launch_directory_with_a_symlink_cannot_redirect_a_rendered_file() {
    root_or_skip!();
    let s = Scratch::new("planted");
    let victim = s.write("victim", "precious\n");
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o600)).unwrap();
    s.write("x.conf.in", "listen {port}\n");
    let spec = TargetSpec::from_text(
        &s.0.join("planted.toml"),
        "name = 'planted'\nargv = ['{calib_server}', '--port', '{port}']\nport = 'argv'\n\
         ready = { stdout = 'READY' }\n[[files]]\ntemplate = 'x.conf.in'\npath = 'x.conf'\n",
    )
    .unwrap();
    // Another user (nobody) makes every launch directory name this process
    // could use next, each with a link to the root-only file.
    let me = std::process::id();
    let mut planted = Vec::new();
    for n in 0..1500 {
        let d = std::env::temp_dir().join(format!("rig-launch-{me}-{n}"));
        if std::fs::create_dir(&d).is_ok() {
            std::os::unix::fs::symlink(&victim, d.join("x.conf")).unwrap();
            std::os::unix::fs::lchown(d.join("x.conf"), Some(65534), Some(65534)).unwrap();
            std::os::unix::fs::chown(&d, Some(65534), Some(65534)).unwrap();
            planted.push(d);
        }
    }
    let launched = rig::launch::launch(&spec, &LaunchOptions::default());
    let port = launched.as_ref().map(|l| l.port).map_err(|e| e.to_string());
    let fresh: Vec<PathBuf> = launch_dirs_of(me)
        .into_iter()
        .filter(|d| !planted.contains(d))
        .filter(|d| {
            std::fs::read_to_string(d.join("x.conf"))
                .is_ok_and(|t| port.as_ref().is_ok_and(|p| t == format!("listen {p}\n")))
        })
        .collect();
    let modes: Vec<(u32, u32)> = fresh
        .iter()
        .map(|d| {
            let m = std::fs::symlink_metadata(d).unwrap();
            (m.mode() & 0o7777, m.uid())
        })
        .collect();
    drop(launched);
    let victim_now = std::fs::read_to_string(&victim).unwrap();
    for d in &planted {
        let _ = std::fs::remove_dir_all(d);
    }
    assert_eq!(
        victim_now, "precious\n",
        "rig wrote through a symlink planted in a predictable launch directory"
    );
    port.expect("the target launches in a fresh directory");
    assert_eq!(fresh.len(), 1, "one fresh private run dir: {fresh:?}");
    assert_eq!(modes, vec![(0o700, 0)], "mode 0700, owned by root");
}

#[test]
fn attach_json_onto_an_existing_file_or_a_symlink_is_refused_before_the_window() {
    root_or_skip!();
    let s = Scratch::new("json");
    let victim = s.write("root-only", "precious\n");
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o600)).unwrap();
    let link = s.0.join("link.json");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    let dangling = s.0.join("dangling.json");
    std::os::unix::fs::symlink(s.0.join("made-through-link"), &dangling).unwrap();
    let target = calib(&[]);
    for (path, why) in [
        (&victim, "already exists"),
        (&link, "is a symlink"),
        (&dangling, "is a symlink"),
    ] {
        let t0 = Instant::now();
        let out = Command::new(rig_bin())
            .args(["attach", "--pid", &target.pid().to_string()])
            .args(["--probes", "syscalls", "--duration", "3s", "--json"])
            .arg(path)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        eprintln!(
            "--json {}: refused after {:?}",
            path.display(),
            t0.elapsed()
        );
        assert_eq!(out.status.code(), Some(exit::USAGE), "{err}");
        assert!(err.contains(why), "{err}");
        assert!(
            !err.contains("window open"),
            "refused before the window: {err}"
        );
    }
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
    assert!(!s.0.join("made-through-link").exists());
}

/// `rig attach … | head -1`, `rig run … | head -1`, `rig check-config …
/// | head`: stdout closed before rig prints. rig exits as it would have
/// (no panic, no backtrace), still writes its files and stops what it
/// started.
#[test]
fn a_closed_stdout_ends_the_printing_not_the_command() {
    root_or_skip!();
    let _g = probes_shared();
    let s = Scratch::new("trial-pipe");
    let server = Server::start(&[]);
    let json = s.0.join("a.json");
    let t = tag("pipe");
    let target = trial_spec(&s, "t.toml", &[], &t);
    let m = matrix(&s, "m.toml", "", "");
    let out = s.0.join("out");
    let pid = server.pid().to_string();
    let url = server.url();
    let runs: [(&str, Vec<&str>); 3] = [
        (
            "attach",
            vec![
                "attach",
                "--pid",
                &pid,
                "--probes",
                "syscalls",
                "--drive",
                &url,
                "--requests",
                "200",
                "--json",
                json.to_str().unwrap(),
            ],
        ),
        (
            "run",
            vec![
                "run",
                "--target",
                target.to_str().unwrap(),
                "--matrix",
                m.to_str().unwrap(),
                "--out",
                out.to_str().unwrap(),
                "--probes",
                "syscalls",
            ],
        ),
        ("check-config", vec!["check-config", m.to_str().unwrap()]),
    ];
    for (name, args) in runs {
        let mut child = Command::new(rig_bin())
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // The reader goes away before rig writes a byte.
        drop(child.stdout.take());
        let w = Watcher::start(child.id(), &t);
        let rig_pid = child.id();
        let (code, _, err) = finish(child);
        let seen = w.finish();
        audit(name, rig_pid, &t, &seen, &out);
        assert_eq!(code, exit::OK, "{name}: {err}");
        assert!(!err.contains("panicked"), "{name}: {err}");
        assert!(!err.contains("Broken pipe"), "{name}: {err}");
    }
    let a: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(a["window"]["load"]["succeeded"], 200);
    let r: Value =
        serde_json::from_slice(&std::fs::read(out.join("report.json")).unwrap()).unwrap();
    assert_eq!(r["ok"], 1, "{r:#}");
    assert!(out.join("report.html").exists());
}

/// A read-only mount: `attach --json`, `attach --flame` and `run --out`
/// under it are refused before the window or the first case (the window
/// ran, then its result was lost).
#[test]
fn outputs_on_a_read_only_mount_are_refused_before_the_work() {
    root_or_skip!();
    let _g = probes_shared();
    let s = Scratch::new("trial-ro");
    let ro = s.0.join("ro");
    std::fs::create_dir_all(&ro).unwrap();
    let ok = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "ro,size=1m", "rig-trial-ro"])
        .arg(&ro)
        .status()
        .unwrap();
    assert!(ok.success(), "mount a read-only tmpfs");
    struct Unmount<'a>(&'a Path);
    impl Drop for Unmount<'_> {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(self.0).status();
        }
    }
    let _u = Unmount(&ro);
    let server = Server::start(&[]);
    let pid = server.pid().to_string();
    let url = server.url();
    let json = ro.join("a.json");
    let flame = ro.join("flame");
    let out = ro.join("out");
    let t = tag("ro");
    let target = trial_spec(&s, "t.toml", &[], &t);
    let m = matrix(&s, "m.toml", "", "");
    for (args, flag) in [
        (
            vec![
                "attach",
                "--pid",
                &pid,
                "--probes",
                "syscalls",
                "--drive",
                &url,
                "--json",
                json.to_str().unwrap(),
            ],
            "--json",
        ),
        (
            vec![
                "attach",
                "--pid",
                &pid,
                "--probes",
                "syscalls",
                "--drive",
                &url,
                "--flame",
                flame.to_str().unwrap(),
            ],
            "--flame",
        ),
        (
            vec![
                "run",
                "--target",
                target.to_str().unwrap(),
                "--matrix",
                m.to_str().unwrap(),
                "--out",
                out.to_str().unwrap(),
            ],
            "--out",
        ),
    ] {
        let (code, stdout, err) = rig(&args);
        assert_eq!(code, exit::USAGE, "{flag}: {stdout}\n{err}");
        assert!(err.contains("read-only file system"), "{flag}: {err}");
        assert!(err.contains(flag), "{flag}: {err}");
        assert!(
            !err.contains("window open"),
            "{flag}: refused before the window: {err}"
        );
        assert!(!err.contains("probes attached"), "{flag}: {err}");
    }
    assert!(super::audit::tagged(&t).is_empty(), "no target started");
}

/// A spec, its program, the matrix and `--out` under paths with spaces and
/// non-ASCII names, and an argv element with both: the run measures, the
/// manifest keeps every path whole, the argument reaches the target whole.
#[test]
fn paths_and_argv_with_spaces_and_non_ascii_run_end_to_end() {
    root_or_skip!();
    let s = Scratch::new("trial-names");
    let dir = s.0.join("a dir ü ñ");
    std::fs::create_dir_all(&dir).unwrap();
    let program = dir.join("sërver 1");
    std::fs::copy(rig_fixtures::trial_server(), &program).unwrap();
    let t = tag("names");
    let name = "a name ü \"quoted\"";
    let target = spec_with(&s, "t ü.toml", &program, &["--name", name], &t);
    std::fs::rename(&target, dir.join("t ü.toml")).unwrap();
    let target = dir.join("t ü.toml");
    let m = matrix(&s, "m ü.toml", "", "");
    let r = trial_run(&s, "out ü ñ", &[&target], &m, &["--passes", "clean"], &t);
    assert_eq!(r.code, exit::OK, "{}", r.text());
    assert_eq!(r.cases[0]["status"], "ok");
    let out = s.0.join("out ü ñ");
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(out.join("manifest.json")).unwrap()).unwrap();
    let argv = manifest["argv"].to_string();
    assert!(
        argv.contains("m ü.toml") && argv.contains("out ü ñ"),
        "{argv}"
    );
    let spec_argv = manifest["targets"][0]["spec"]["argv"].to_string();
    assert!(spec_argv.contains("sërver 1"), "{spec_argv}");
    let mut html = String::new();
    std::fs::File::open(out.join("report.html"))
        .unwrap()
        .read_to_string(&mut html)
        .unwrap();
    assert!(html.contains("<html"), "report.html written");
}

/// A cases.jsonl whose last line was cut short (a crash mid-write): `rig
/// report` and `rig flame` both drop that line, keep the cases before it,
/// and say which line they dropped. `rig flame` rejected the whole file;
/// `rig report` dropped the line without a word.
#[test]
fn report_and_flame_drop_a_cut_last_line_the_same_way_and_say_which() {
    root_or_skip!();
    let _g = probes_shared();
    let s = Scratch::new("trial-cut");
    let t = tag("cut");
    let target = trial_spec(&s, "t.toml", &[], &t);
    let m = matrix(&s, "m.toml", "", "topologies = [\"1\", \"2\"]");
    let r = trial_run(&s, "out", &[&target], &m, &["--probes", "syscalls"], &t);
    assert_eq!(r.code, exit::OK, "{}", r.text());
    let out = s.0.join("out");
    let jsonl = out.join("cases.jsonl");
    let text = std::fs::read_to_string(&jsonl).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2);
    let first = r.cases[0]["id"].as_str().unwrap().to_string();
    let cut = format!("{}\n{}", lines[0], &lines[1][..lines[1].len() / 2]);
    std::fs::write(&jsonl, cut).unwrap();
    let (code, stdout, err) = rig(&["report", out.to_str().unwrap()]);
    assert_eq!(code, exit::OK, "{stdout}\n{err}");
    let said = "cases.jsonl:2: the last line is cut short";
    assert!(err.contains(said), "report: {err}");
    let (code, stdout, err) = rig(&[
        "flame",
        jsonl.to_str().unwrap(),
        "--case",
        &first,
        "--family",
        "syscalls",
        "--format",
        "folded",
    ]);
    assert_eq!(code, exit::OK, "{err}");
    assert!(err.contains(said), "flame: {err}");
    assert!(!stdout.is_empty(), "the first case's graph");
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}
