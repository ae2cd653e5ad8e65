//! The target stage on real processes: launch from a spec, readiness, the
//! port-holder proof, cgroup budgets and clean-up, and sampling.
//!
//! Tests that launch hold `LAUNCH` shared; the one that calls `cleanup_all`
//! (which kills every target of this process) holds it exclusively.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, RwLock};
use std::time::{Duration, Instant};

use rig::launch::port::{check_holder, HolderCheck};
use rig::launch::spec::TargetSpec;
use rig::launch::start::{group_members, LaunchError, LaunchOptions};
use rig::launch::{check_config, cleanup_all, launch, port_holders, reap_stale_cgroups};
use rig::sample::{CgroupSnapshot, ProcSnapshot, Sampler};
use rig_fixtures::calib;

static LAUNCH: RwLock<()> = RwLock::new(());

fn calib_spec() -> TargetSpec {
    TargetSpec::load(calib_toml()).expect("config/targets/calib.toml is valid")
}

fn calib_toml() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../config/targets/calib.toml")
}

/// A spec from text, as if it were `/tmp/<name>.toml`.
fn spec(name: &str, text: &str) -> TargetSpec {
    let path = std::env::temp_dir().join(format!("{name}.toml"));
    TargetSpec::from_text(&path, text).unwrap_or_else(|e| panic!("{e}"))
}

fn opts(label: &str) -> LaunchOptions {
    LaunchOptions {
        label: label.into(),
        ..LaunchOptions::default()
    }
}

fn sha256_hex(path: &Path) -> String {
    use sha2::Digest;
    let d = sha2::Sha256::digest(std::fs::read(path).unwrap());
    d.iter().map(|b| format!("{b:02x}")).collect()
}

fn get(port: u16, req: &[u8], expect_len: usize) -> Vec<u8> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(req).unwrap();
    let mut buf = vec![0u8; expect_len];
    s.read_exact(&mut buf).unwrap();
    buf
}

/// A spec file in /tmp, removed when dropped.
struct TempFile(PathBuf);

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn temp_file(name: &str, text: &str) -> TempFile {
    let p = std::env::temp_dir().join(format!("rig-test-{}-{name}", std::process::id()));
    std::fs::write(&p, text).unwrap();
    TempFile(p)
}

#[test]
fn launches_the_calibration_server_and_proves_it_holds_its_port() {
    root_or_skip!();
    let _g = LAUNCH.read().unwrap_or_else(|e| e.into_inner());
    let t = launch(&calib_spec(), &opts("calib")).unwrap_or_else(|e| panic!("{e}"));
    let pid = t.pid;
    assert_eq!(t.pgid, pid, "the target leads its own process group");

    // The listener is the launched pid's, by socket inode (a stale server
    // on the port would otherwise be measured).
    assert_eq!(t.proof.holders, vec![pid]);
    assert!(!t.proof.via_descendant);
    let holders = port_holders(t.port);
    assert!(!holders.is_empty());
    assert!(holders
        .iter()
        .all(|(p, inode)| *p == pid && t.proof.inodes.contains(inode)));

    // What runs is what was built (hash and build-id of the executable).
    let exe = rig_fixtures::calib_server();
    assert_eq!(t.exe.path, exe.display().to_string());
    assert_eq!(t.exe.sha256, sha256_hex(exe));
    assert_eq!(t.exe.size, std::fs::metadata(exe).unwrap().len());
    assert_eq!(
        t.exe.build_id,
        rig::process::maps::build_id(exe),
        "exe build-id"
    );
    assert!(t.exe.build_id.is_some());
    let libc = t
        .objects
        .iter()
        .find(|o| o.path.contains("libc.so"))
        .expect("libc is mapped");
    assert_eq!(libc.sha256.len(), 64);
    assert_eq!(libc.sha256, sha256_hex(Path::new(&libc.path)));
    assert!(libc.build_id.is_some(), "libc has a build-id");
    assert!(t.objects.iter().any(|o| o.path == t.exe.path));

    // It answers, and it is accounted.
    assert_eq!(
        get(t.port, calib::REQUEST_CALIB, calib::RESPONSE_CALIB.len()),
        calib::RESPONSE_CALIB
    );
    let cg = t.cgroup_handle().expect("a memory-accounting cgroup");
    assert_eq!(cg.procs(), vec![pid]);
    let snap = CgroupSnapshot::read(&cg).unwrap();
    assert!(snap.mem_peak_bytes.unwrap() > 0, "{snap:?}");
    assert_eq!(snap.mem_limit_bytes, None, "no limit asked");
    assert_eq!(snap.oom_kills, Some(0));

    // Sampling by pid.
    let p = ProcSnapshot::read(pid).unwrap();
    assert!(p.threads >= 3, "main + 2 workers: {p:?}");
    assert!(p.rss_kib > 0 && p.pss_kib > 0 && p.fds >= 4, "{p:?}");
    let sampler = Sampler::start(pid, Some(cg.clone()), Duration::from_millis(50));
    for _ in 0..20 {
        get(t.port, calib::REQUEST_CALIB, calib::RESPONSE_CALIB.len());
    }
    std::thread::sleep(Duration::from_millis(200));
    let samples = sampler.stop();
    assert!(samples.points.len() >= 3, "{samples:?}");
    assert_eq!(samples.ended, None);
    assert!(samples.max_rss_kib >= p.rss_kib.min(samples.points[0].rss_kib));
    assert!(samples.cg_peak_bytes.unwrap() > 0);
    let (first, last) = (samples.points[0], *samples.points.last().unwrap());
    assert!(last.cpu_ns > first.cpu_ns, "20 requests cost CPU");
    assert!(last.t_ms >= 200);
    let after = ProcSnapshot::read(pid).unwrap();
    assert!(
        after.since(&p).minflt >= 4 * 20,
        "calib_touch: 4 faults/request"
    );

    let port = t.port;
    let info = t.stop(Duration::from_secs(2));
    assert_eq!(info.signal, Some(libc::SIGTERM), "{}", info.describe());
    assert!(!info.killed_after_grace && !info.exited_on_its_own);
    assert_eq!(info.leftover, Vec::<u32>::new());
    assert!(info.cgroup_removed);
    for d in &cg.dirs {
        assert!(!d.exists(), "{} removed", d.display());
    }
    assert_eq!(group_members(pid), Vec::<u32>::new());
    assert!(!Path::new(&format!("/proc/{pid}")).exists(), "reaped");
    assert!(port_holders(port).is_empty(), "nobody listens any more");
}

#[test]
fn refuses_a_port_held_by_another_process() {
    root_or_skip!();
    let _g = LAUNCH.read().unwrap_or_else(|e| e.into_inner());
    let squatter = TcpListener::bind(("127.0.0.1", 0)).unwrap();
    let port = squatter.local_addr().unwrap().port();
    let me = std::process::id();
    let s = spec(
        "fixed",
        &format!(
            "name = 'fixed'\nargv = ['{{calib_server}}', '--port', '{{port}}']\n\
             port = {{ fixed = {port} }}\nready = {{ tcp = true }}\n"
        ),
    );
    match launch(&s, &opts("fixed")) {
        Err(e @ LaunchError::PortHeldByOther { .. }) => {
            let LaunchError::PortHeldByOther {
                holder_pid,
                target_pid,
                ..
            } = &e
            else {
                unreachable!()
            };
            assert_eq!(*holder_pid, me);
            assert_eq!(*target_pid, None);
            let msg = e.to_string();
            assert!(
                msg.starts_with(&format!("port {port} is held by pid {me} (")),
                "{msg}"
            );
            assert!(msg.contains("before rig started the target"), "{msg}");
        }
        other => panic!("expected PortHeldByOther, got {other:?}"),
    }

    // After start: the same proof names the squatter, not the started pid.
    let mut sleeper = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .unwrap();
    match check_holder(port, sleeper.id()) {
        HolderCheck::Other { pid, cmdline } => {
            assert_eq!(pid, me);
            assert!(!cmdline.is_empty());
        }
        other => panic!("{other:?}"),
    }
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    let e = LaunchError::PortHeldByOther {
        port: 43211,
        holder_pid: 7,
        holder_cmdline: "nginx".into(),
        target_pid: Some(9),
    };
    assert_eq!(
        e.to_string(),
        "port 43211 is held by pid 7 (nginx), not by the target rig started (pid 9); \
         stop that process or let rig pick the port (port = \"argv\")"
    );
    drop(squatter);
}

/// A picked port taken by someone else before the target binds it (two
/// rigs, or parallel tests, picking at once): the first launch loses and is
/// stopped, the second runs on a fresh port. The squatter here is made by
/// the target's own first run and reparented away from it (double fork), so
/// it is not the target's descendant, and it binds before the server does.
#[test]
fn a_lost_race_for_a_picked_port_is_launched_again_on_another_port() {
    root_or_skip!();
    let _g = LAUNCH.read().unwrap_or_else(|e| e.into_inner());
    let mark = std::env::temp_dir().join(format!("rig-portrace-{}", std::process::id()));
    let _ = std::fs::remove_file(&mark);
    let m = mark.display();
    let squat = "import os, socket, sys, time; s = socket.socket(); \
                 s.bind(('127.0.0.1', int(sys.argv[1]))); s.listen(); \
                 open(sys.argv[2] + '.tmp', 'w').write('%d %s' % (os.getpid(), sys.argv[1])); \
                 os.rename(sys.argv[2] + '.tmp', sys.argv[2]); time.sleep(60)";
    let script = format!(
        "if [ ! -e {m} ]; then ( python3 -c \"{squat}\" {{port}} {m} & ); \
         while [ ! -e {m} ]; do sleep 0.01; done; fi; \
         exec {{calib_server}} --port {{port}} --threads 1"
    );
    let s = spec(
        "portrace",
        &format!(
            "name = 'portrace'\nready = {{ stdout = 'READY' }}\nargv = ['sh', '-c', '''{script}''']\n"
        ),
    );
    let t = launch(&s, &opts("portrace")).unwrap_or_else(|e| panic!("{e}"));
    let text = std::fs::read_to_string(&mark).unwrap();
    std::fs::remove_file(&mark).unwrap();
    let (squatter, lost) = text.split_once(' ').unwrap();
    let (squatter, lost): (u32, u16) = (squatter.parse().unwrap(), lost.parse().unwrap());
    assert_ne!(t.port, lost, "the second launch picked a fresh port");
    assert_eq!(t.proof.holders, vec![t.pid], "{:?}", t.proof);
    let reply = get(t.port, b"GET /noop HTTP/1.1\r\nHost: x\r\n\r\n", 9);
    assert_eq!(&reply, b"HTTP/1.1 ");
    // The first launch's cgroup took the squatter with it; reap it (these
    // tests are its subreaper once it left the target's tree).
    let t0 = Instant::now();
    while !matches!(check_holder(lost, t.pid), HolderCheck::NoListener) {
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "squatter {squatter} still listens on {lost}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // SAFETY: waitpid on a pid this process may be the parent of; WNOHANG.
    unsafe { libc::waitpid(squatter as i32, std::ptr::null_mut(), libc::WNOHANG) };
    let info = t.stop(Duration::from_secs(2));
    assert_eq!(info.leftover, Vec::<u32>::new());
}

#[test]
fn accepts_a_listener_held_by_a_descendant_and_says_so() {
    root_or_skip!();
    let _g = LAUNCH.read().unwrap_or_else(|e| e.into_inner());
    // `; true` keeps sh from exec'ing: the server is sh's child.
    let s = spec(
        "wrapped",
        "name = 'wrapped'\nargv = ['sh', '-c', '{calib_server} --port {port} --threads 1; true']\n\
         ready = { stdout = 'READY' }\n",
    );
    let t = launch(&s, &opts("wrapped")).unwrap_or_else(|e| panic!("{e}"));
    assert!(t.proof.via_descendant, "{:?}", t.proof);
    assert_eq!(t.proof.holders.len(), 1);
    assert_ne!(t.proof.holders[0], t.pid);
    assert_eq!(
        rig::process::descendants(t.pid),
        t.proof.holders,
        "the server is sh's only descendant"
    );
    let (pid, server) = (t.pid, t.proof.holders[0]);
    let info = t.stop(Duration::from_secs(2));
    assert_eq!(info.leftover, Vec::<u32>::new());
    for p in [pid, server] {
        assert!(!Path::new(&format!("/proc/{p}")).exists(), "pid {p} gone");
    }
}

#[test]
fn a_target_that_never_becomes_ready_fails_with_its_stderr_tail() {
    root_or_skip!();
    let _g = LAUNCH.read().unwrap_or_else(|e| e.into_inner());
    let s = spec(
        "silent",
        "name = 'silent'\nargv = ['sh', '-c', 'echo boom >&2; exec sleep 30', 'sh', '{port}']\n\
         ready = { tcp = true }\nready_timeout_ms = 500\n",
    );
    let t0 = Instant::now();
    let err = launch(&s, &opts("silent")).unwrap_err();
    let took = t0.elapsed();
    match &err {
        LaunchError::NotReady {
            name,
            pid,
            waited,
            exit,
            stderr_tail,
            ..
        } => {
            assert_eq!(name, "silent");
            assert!(*waited >= Duration::from_millis(500), "{waited:?}");
            assert!(took < Duration::from_secs(3), "{took:?}");
            assert_eq!(*exit, None, "it was still running");
            assert_eq!(stderr_tail, "boom\n");
            assert_eq!(group_members(*pid), Vec::<u32>::new(), "killed");
        }
        other => panic!("expected NotReady, got {other:?}"),
    }
    let msg = err.to_string();
    assert!(msg.contains("was not ready after"), "{msg}");
    assert!(msg.contains("still running, killed by rig"), "{msg}");
    assert!(msg.ends_with("--- stderr tail ---\nboom\n"), "{msg}");

    // One that exits instead: its exit code is reported, quickly.
    let s = spec(
        "quitter",
        "name = 'quitter'\nargv = ['sh', '-c', 'echo bad flag >&2; exit 3', 'sh', '{port}']\n\
         ready = { tcp = true }\n",
    );
    let t0 = Instant::now();
    match launch(&s, &opts("quitter")).unwrap_err() {
        LaunchError::NotReady {
            exit, stderr_tail, ..
        } => {
            assert_eq!(exit.as_deref(), Some("exited with code 3"));
            assert_eq!(stderr_tail, "bad flag\n");
            assert!(t0.elapsed() < Duration::from_secs(3));
        }
        other => panic!("expected NotReady, got {other:?}"),
    }
}

/// Allocates and touches $ARGV[0] MiB once a client connects (so the launch
/// itself completes first); port from $PORT. The size is an argument because
/// perl folds a constant `"a" x (200 << 20)` at compile time.
const HOG: &str = r#"use IO::Socket::INET; $| = 1;
my $s = IO::Socket::INET->new(LocalAddr => "127.0.0.1", LocalPort => $ENV{"PORT"},
    Listen => 5, ReuseAddr => 1) or die "listen: $!";
print "READY\n"; my $c = $s->accept; my $x = "a" x ($ARGV[0] << 20); sleep 30;"#;

#[test]
fn a_memory_limit_below_need_ends_in_a_reported_oom_kill() {
    root_or_skip!();
    let _g = LAUNCH.read().unwrap_or_else(|e| e.into_inner());
    let s = spec(
        "hog",
        &format!(
            "name = 'hog'\nargv = ['perl', '-e', '''{HOG}''', '200']\nport = {{ env = 'PORT' }}\n\
             ready = {{ stdout = 'READY' }}\n"
        ),
    );
    let o = LaunchOptions {
        memory_limit_mib: Some(64),
        ..opts("hog")
    };
    let t = launch(&s, &o).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        t.notes
            .iter()
            .any(|n| n.contains("64 MiB") && n.contains("swap 0")),
        "{:?}",
        t.notes
    );
    let cg = t.cgroup_handle().unwrap();
    let before = CgroupSnapshot::read(&cg).unwrap();
    assert_eq!(before.mem_limit_bytes, Some(64 << 20));
    assert_eq!(before.oom_kills, Some(0));

    let _c = TcpStream::connect(("127.0.0.1", t.port)).unwrap();
    assert!(
        t.wait_exit(Duration::from_secs(20)),
        "the hog was not killed"
    );
    let after = CgroupSnapshot::read(&cg).unwrap();
    assert_eq!(after.oom_kills, Some(1), "{after:?}");
    // The peak reached the limit and never passed it. (v1 failcnt stays 0
    // on kernel 6.18, so it is not asserted.)
    let peak = after.mem_peak_bytes.unwrap();
    assert!((60 << 20..=64 << 20).contains(&peak), "{after:?}");

    let info = t.stop(Duration::from_secs(1));
    assert_eq!(info.signal, Some(libc::SIGKILL), "{}", info.describe());
    assert!(info.exited_on_its_own, "the kernel killed it, not rig");
    assert_eq!(info.cgroup.and_then(|c| c.oom_kills), Some(1));
    assert!(info.cgroup_removed);

    // Killed before it is ready: the launch error says why.
    let s = spec(
        "early_hog",
        "name = 'early_hog'\nargv = ['perl', '-e', 'my $x = \"a\" x ($ARGV[0] << 20); print \"READY\\n\"; sleep 30', '200', '{port}']\n\
         ready = { stdout = 'READY' }\n",
    );
    let e = launch(&s, &o).unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("killed by signal 9 (SIGKILL); its cgroup recorded 1 OOM kill(s): the memory limit (64 MiB)"),
        "{msg}"
    );
}

#[test]
fn cgroups_are_removed_after_stop_and_after_a_panic() {
    root_or_skip!();
    let _g = LAUNCH.read().unwrap_or_else(|e| e.into_inner());
    let o = LaunchOptions {
        memory_limit_mib: Some(256),
        cpu_quota: Some(0.5),
        ..opts("panic")
    };
    let t = launch(&calib_spec(), &o).unwrap_or_else(|e| panic!("{e}"));
    let cg = t.cgroup_handle().unwrap();
    assert!(cg.cpu_dir.is_some());
    let snap = CgroupSnapshot::read(&cg).unwrap();
    assert!(snap.cpu_throttled.is_some(), "{snap:?}");
    assert!(cg.dirs.iter().all(|d| d.exists()));
    let info = t.stop(Duration::from_secs(2));
    assert!(info.cgroup_removed);
    assert!(cg.dirs.iter().all(|d| !d.exists()));

    let seen: Mutex<Option<(u32, Vec<PathBuf>)>> = Mutex::new(None);
    let r = std::panic::catch_unwind(|| {
        let t = launch(&calib_spec(), &o).unwrap();
        *seen.lock().unwrap() = Some((t.pid, t.cgroup_handle().unwrap().dirs));
        panic!("test panic while a target runs");
    });
    assert!(r.is_err());
    let (pid, dirs) = seen.lock().unwrap().take().unwrap();
    for d in &dirs {
        assert!(!d.exists(), "{} removed by Drop during unwind", d.display());
    }
    assert!(!Path::new(&format!("/proc/{pid}")).exists());
    assert_eq!(group_members(pid), Vec::<u32>::new());
}

#[test]
fn pins_the_target_and_reads_the_affinity_back() {
    root_or_skip!();
    let _g = LAUNCH.read().unwrap_or_else(|e| e.into_inner());
    let o = LaunchOptions {
        server_cpus: Some(vec![0]),
        ..opts("pin")
    };
    let t = launch(&calib_spec(), &o).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(t.affinity, vec![0]);
    // Threads created after exec inherit it.
    for task in std::fs::read_dir(format!("/proc/{}/task", t.pid)).unwrap() {
        let tid: u32 = task.unwrap().file_name().to_str().unwrap().parse().unwrap();
        assert_eq!(rig::launch::start::affinity_of(tid).unwrap(), vec![0]);
    }
    drop(t);
    let o = LaunchOptions {
        server_cpus: Some(vec![4096]),
        ..opts("pin")
    };
    let e = launch(&calib_spec(), &o).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("--server-cpus [4096]: this machine's online CPUs are"),
        "{e}"
    );
}

#[test]
fn cleanup_all_kills_every_live_target_and_reap_finds_stale_cgroups() {
    root_or_skip!();
    let _g = LAUNCH.write().unwrap_or_else(|e| e.into_inner());
    let t = launch(&calib_spec(), &opts("cleanup")).unwrap_or_else(|e| panic!("{e}"));
    let dirs = t.cgroup_handle().unwrap().dirs;
    assert_eq!(cleanup_all(), 1);
    assert_eq!(group_members(t.pid), Vec::<u32>::new());
    assert!(dirs.iter().all(|d| !d.exists()));
    assert!(t.has_exited());
    let info = t.stop(Duration::from_millis(100));
    assert_eq!(info.signal, Some(libc::SIGTERM));
    assert_eq!(cleanup_all(), 0, "stop deregistered it");

    // A cgroup whose rig died (SIGKILL): owner pid dead, a process inside.
    let mut dead = std::process::Command::new("true").spawn().unwrap();
    let dead_pid = dead.id();
    dead.wait().unwrap();
    let parent = rig::launch::cgroup::v1_place("memory")
        .expect("memory hierarchy")
        .own;
    let stale = parent.join(format!("rig-stale-{dead_pid}-0"));
    std::fs::create_dir(&stale).unwrap();
    let mut orphan = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .unwrap();
    std::fs::write(stale.join("cgroup.procs"), orphan.id().to_string()).unwrap();
    let removed = reap_stale_cgroups();
    assert!(removed.contains(&stale), "{removed:?}");
    assert!(!stale.exists());
    let status = orphan.wait().unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(libc::SIGKILL));
}

#[test]
fn check_config_locates_syntax_errors() {
    let f = temp_file(
        "broken.toml",
        "name = \"x\"\nargv = [\"a\", \"{port}\"\nready = { tcp = true }\n",
    );
    let p = &f.0;
    let errs = check_config(p).unwrap_err();
    assert_eq!(errs.len(), 1);
    let text = errs[0].to_string();
    assert!(
        text.starts_with(&format!("{}:3:1: missing comma", p.display())),
        "file:LINE:COL first: {text}"
    );
    assert!(
        text.contains("\n3 | ready = { tcp = true }\n  | ^"),
        "{text}"
    );
}

#[test]
fn check_config_explains_semantic_errors() {
    let f = temp_file(
        "empty_argv.toml",
        "name = \"x\"\nargv = []\nready = { tcp = true }\n",
    );
    let errs = check_config(&f.0).unwrap_err();
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert_eq!((errs[0].line, errs[0].col), (2, 8));
    assert!(
        errs[0]
            .message
            .contains("`argv` is empty: give the program and its arguments as a list"),
        "{}",
        errs[0]
    );

    let ok = check_config(calib_toml()).unwrap();
    assert!(ok.starts_with("calib: "), "{ok}");
    let peer = Path::new(env!("CARGO_MANIFEST_DIR")).join("../config/targets/peer.toml");
    check_config(peer).unwrap();
}
