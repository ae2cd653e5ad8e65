//! Process trees: a prefork server (Debian's nginx, master + workers) is
//! measured whole, a row per process, against ground truth from independent
//! tracing (fixtures/nginx/COSTS.md, fixtures/nginx/verify.sh).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use rig::launch::spec::TargetSpec;
use rig::launch::start::LaunchOptions;
use rig::launch::{descendants, launch};

use super::{probes_shared, repo, rig_bin};
use rig::exit;

const NGINX: &str = "/usr/sbin/nginx";

/// Root, and nginx installed (`make deps` installs it; in CI its absence
/// is a failure, never a skip).
fn ready_for(test: &str) -> bool {
    if !super::root_or_skip(test) {
        return false;
    }
    super::required(
        test,
        NGINX,
        super::file(NGINX),
        "scripts/deps.sh installs Debian's nginx",
    )
    .is_some()
}

fn config(rel: &str) -> String {
    repo().join("config").join(rel).display().to_string()
}

/// An output directory of one test, removed when dropped.
struct Out(PathBuf);

impl Out {
    fn new(name: &str) -> Out {
        let d = std::env::temp_dir().join(format!("rig-tree-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        Out(d)
    }
    fn path(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

impl Drop for Out {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn rig(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(rig_bin()).args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn cases(out: &Out) -> Vec<Value> {
    std::fs::read_to_string(out.0.join("cases.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

fn alive(pid: u64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit_once(')')
            .and_then(|(_, r)| r.split_whitespace().next())
            .is_some_and(|st| st != "Z")
    })
}

/// Calls (and bytes) of `kind` at `function`, summed over the site rows.
fn site(a: &Value, kind: &str, function: &str) -> (u64, u64, bool) {
    let mut out = (0, 0, false);
    for r in a["alloc"].as_array().unwrap() {
        if r["kind"] == kind && r["site"]["function"] == function {
            out.0 += u(&r["calls"]);
            out.1 += u(&r["bytes"]);
            out.2 |= r["inner"].as_bool().unwrap();
        }
    }
    out
}

fn syscall(a: &Value, name: &str) -> u64 {
    a["syscalls"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["name"] == name)
        .map(|r| u(&r["count"]))
        .sum()
}

#[test]
fn nginx_one_worker_costs_exactly_its_ground_truth_per_request_twice() {
    let test = test_name!();
    if !ready_for(test) {
        return;
    }
    let _g = probes_shared();
    let out = Out::new("one");
    let (code, stdout, stderr) = rig(&[
        "run",
        "--target",
        &config("targets/nginx.toml"),
        "--matrix",
        &config("tree-matrix.toml"),
        "--out",
        out.path(),
        "--passes",
        "counted",
        "--repeats",
        "2",
        "--probes",
        "syscalls,alloc,copy,faults,sched",
    ]);
    assert_eq!(code, exit::OK, "stdout:\n{stdout}\nstderr:\n{stderr}");
    let cases = cases(&out);
    assert_eq!(cases.len(), 2, "two repeats of one case");
    let mut seen_pids = Vec::new();
    let mut per_run = Vec::new();
    for c in &cases {
        let a = &c["counted"]["attribution"];
        let n = u(&a["window"]["requests"]);
        assert_eq!(n, 1000);
        assert_eq!(a["scope"], "tree");
        assert_eq!(a["complete"], true, "{}", a["losses"]);
        let procs = a["processes"].as_array().unwrap();
        assert_eq!(procs.len(), 2, "master and one worker: {procs:?}");
        let (master, worker) = (&procs[0], &procs[1]);
        assert_eq!(master["root"], true);
        assert_eq!(master["role"], "master process");
        assert_eq!(worker["role"], "worker process");
        assert_eq!(worker["ppid"], master["pid"]);
        assert_eq!(worker["joined"]["how"], "at_attach");
        seen_pids.extend([u(&master["pid"]), u(&worker["pid"])]);

        // Ground truth (fixtures/nginx/COSTS.md): per request on one
        // keep-alive connection, 1 recvfrom, 1 writev, 1 epoll_wait;
        // posix_memalign 2 (8192 B) + malloc 1 (1024 B); 3 frees.
        for name in ["recvfrom", "writev", "epoll_wait"] {
            assert_eq!(syscall(a, name), n, "{name}");
        }
        assert_eq!(u(&worker["syscalls"]), 3 * n, "worker syscalls");
        assert_eq!(u(&worker["alloc"]["allocations"]), 3 * n);
        assert_eq!(u(&worker["alloc"]["bytes"]), 9216 * n);
        assert_eq!(u(&worker["alloc"]["frees"]), 3 * n);
        assert_eq!(
            site(a, "posix_memalign", "ngx_memalign"),
            (2 * n, 8192 * n, false)
        );
        assert_eq!(site(a, "malloc", "ngx_alloc"), (n, 1024 * n, false));
        assert_eq!(site(a, "free", "ngx_destroy_pool"), (2 * n, 0, false));
        assert_eq!(site(a, "free", "ngx_pfree"), (n, 0, false));
        // glibc's posix_memalign (alignment 16) calls malloc inside: seen,
        // marked inner, never counted twice.
        assert_eq!(site(a, "malloc", "posix_memalign"), (2 * n, 8192 * n, true));
        assert_eq!(u(&a["alloc_totals"]["allocations"]), 3 * n);
        // The master's share is near zero (it sleeps in sigsuspend).
        assert!(
            u(&master["syscalls"]) * 100 <= n,
            "master syscalls {}",
            master["syscalls"]
        );
        assert_eq!(u(&master["alloc"]["allocations"]), 0);
        // Everything per site and per process, as sorted text lines.
        let mut lines: Vec<String> = Vec::new();
        for r in a["syscalls"].as_array().unwrap() {
            lines.push(format!("syscall {} {}", r["name"], r["count"]));
        }
        for r in a["alloc"].as_array().unwrap() {
            let f = &r["site"]["function"];
            lines.push(format!("{} @ {f} {} {}", r["kind"], r["calls"], r["bytes"]));
        }
        // Not copies: nginx re-renders its cached time strings when the
        // wall-clock second changes (ngx_time_update, ~30 small memcpys), so
        // a window that crosses a second boundary copies more. rig reports
        // that faithfully; `rig gate` calls such a counter non-deterministic.
        for p in [master, worker] {
            lines.push(format!("{} {} {}", p["role"], p["syscalls"], p["alloc"]));
        }
        lines.sort();
        per_run.push(lines);
    }
    // A fresh nginx each run: the same numbers again.
    assert_eq!(per_run[0], per_run[1]);
    // Nothing of either run's nginx is left.
    for pid in seen_pids {
        assert!(!alive(pid), "nginx pid {pid} survived the run");
    }
}

#[test]
fn nginx_two_workers_tree_totals_are_the_sum_of_the_process_rows() {
    let test = test_name!();
    if !ready_for(test) {
        return;
    }
    let _g = probes_shared();
    let out = Out::new("two");
    let matrix = out.0.with_extension("toml");
    std::fs::write(
        &matrix,
        "[defaults]\nwarmup_ms = 200\nduration_ms = 500\ncounted_requests = 1000\n\
         [[suite]]\nname = \"plain\"\nkind = \"http\"\nprotocols = [\"h1\"]\n\
         paths = [\"/plain\"]\ntopologies = [\"4\"]\n",
    )
    .unwrap();
    let (code, stdout, stderr) = rig(&[
        "run",
        "--target",
        &config("targets/nginx-2w.toml"),
        "--matrix",
        matrix.to_str().unwrap(),
        "--out",
        out.path(),
        "--passes",
        "counted",
        "--probes",
        "all",
    ]);
    let _ = std::fs::remove_file(&matrix);
    assert_eq!(code, exit::OK, "stdout:\n{stdout}\nstderr:\n{stderr}");
    let c = &cases(&out)[0];
    let a = &c["counted"]["attribution"];
    let n = u(&a["window"]["requests"]);
    let procs = a["processes"].as_array().unwrap();
    assert_eq!(procs.len(), 3, "master and two workers: {procs:?}");
    let workers: Vec<&Value> = procs
        .iter()
        .filter(|p| p["role"] == "worker process")
        .collect();
    assert_eq!(workers.len(), 2);
    let sum = |f: &dyn Fn(&Value) -> u64| -> u64 { procs.iter().map(f).sum() };
    let rows = |key: &str, field: &str| -> u64 {
        a[key]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| u(&r[field]))
            .sum()
    };
    assert_eq!(sum(&|p| u(&p["syscalls"])), rows("syscalls", "count"));
    assert_eq!(
        sum(&|p| u(&p["alloc"]["allocations"])),
        u(&a["alloc_totals"]["allocations"])
    );
    assert_eq!(
        sum(&|p| u(&p["alloc"]["bytes"])),
        u(&a["alloc_totals"]["bytes"])
    );
    assert_eq!(
        sum(&|p| u(&p["alloc"]["frees"])),
        u(&a["alloc_totals"]["frees"])
    );
    assert_eq!(sum(&|p| u(&p["copy_bytes"])), rows("copy", "bytes"));
    assert_eq!(sum(&|p| u(&p["copy_calls"])), rows("copy", "calls"));
    assert_eq!(sum(&|p| u(&p["faults"])), rows("faults", "count"));
    assert_eq!(
        sum(&|p| u(&p["voluntary_switches"])),
        u(&a["sched"]["voluntary"])
    );
    assert_eq!(
        sum(&|p| u(&p["involuntary_switches"])),
        u(&a["sched"]["involuntary"])
    );
    // Whichever worker served a request, a request costs the same: the
    // workers' allocations add up to 3 per request.
    let worker_allocs: u64 = workers.iter().map(|w| u(&w["alloc"]["allocations"])).sum();
    assert_eq!(worker_allocs, 3 * n);
    for p in procs {
        assert!(!alive(u(&p["pid"])), "nginx pid {} survived", p["pid"]);
    }
}

/// One keep-alive connection, `n` GETs of /plain.
fn get_plain(port: u16, n: usize) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let body = b"hello from nginx\n";
    for _ in 0..n {
        s.write_all(b"GET /plain HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        while !got.ends_with(body) {
            let k = s.read(&mut buf).unwrap();
            assert!(k > 0, "nginx closed the connection");
            got.extend_from_slice(&buf[..k]);
        }
    }
}

fn nginx_spec(name: &str) -> TargetSpec {
    TargetSpec::load(repo().join("config/targets").join(name)).unwrap()
}

fn opts(label: &str) -> LaunchOptions {
    LaunchOptions {
        label: label.into(),
        ..LaunchOptions::default()
    }
}

#[test]
fn attach_follows_the_tree_and_a_worker_forked_during_the_window() {
    let test = test_name!();
    if !ready_for(test) {
        return;
    }
    let _g = probes_shared();
    let t =
        launch(&nginx_spec("nginx.toml"), &opts("tree-attach")).unwrap_or_else(|e| panic!("{e}"));
    let old = descendants(t.pid);
    assert_eq!(old.len(), 1, "one worker: {old:?}");
    let json = Out::new("attach");
    let mut child = Command::new(rig_bin())
        .args(["attach", "--pid", &t.pid.to_string(), "--duration", "4s"])
        .args(["--probes", "syscalls,alloc", "--json", json.path()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut said = String::new();
    let t0 = Instant::now();
    while !said.contains("window open") {
        let mut line = String::new();
        assert!(
            err.read_line(&mut line).unwrap() > 0,
            "rig attach ended early: {said}"
        );
        said.push_str(&line);
        assert!(t0.elapsed() < Duration::from_secs(20), "{said}");
    }
    assert!(
        said.contains(&format!(
            "following the process tree of pid {}: 2 process(es) now (1 descendant(s))",
            t.pid
        )),
        "{said}"
    );
    // Replace the worker (rig launched nginx, so the test may signal it):
    // the master forks a new one inside the window.
    // SAFETY: plain syscall on a process of the tree this test launched.
    unsafe { libc::kill(old[0] as i32, libc::SIGKILL) };
    let new = loop {
        let now: Vec<u32> = descendants(t.pid)
            .into_iter()
            .filter(|p| !old.contains(p))
            .collect();
        if let Some(&p) = now.first() {
            break p;
        }
        assert!(t0.elapsed() < Duration::from_secs(20), "no new worker");
        std::thread::sleep(Duration::from_millis(5));
    };
    // Give the follower time to attach the new worker's uprobes, then load it.
    std::thread::sleep(Duration::from_millis(500));
    get_plain(t.port, 20);
    let mut rest = String::new();
    err.read_to_string(&mut rest).unwrap();
    let status = child.wait().unwrap();
    // A process joined mid-window: its uprobe families missed its first
    // moments, so the window is marked incomplete (exit 5).
    assert_eq!(status.code(), Some(exit::INCOMPLETE), "{said}{rest}");
    let a: Value = serde_json::from_slice(&std::fs::read(&json.0).unwrap()).unwrap();
    let procs = a["processes"].as_array().unwrap();
    let row = |pid: u32| {
        procs
            .iter()
            .find(|p| p["pid"] == pid)
            .unwrap_or_else(|| panic!("pid {pid} not in {procs:?}"))
    };
    assert_eq!(row(old[0])["joined"]["how"], "at_attach");
    let fresh = row(new);
    assert_eq!(fresh["joined"]["how"], "forked", "{fresh}");
    assert!(
        fresh["joined"]["uprobe_gap_ms"].as_f64().is_some(),
        "{fresh}"
    );
    assert_eq!(fresh["role"], "worker process");
    // Its syscalls were seen from the fork (tracepoints), and its requests'
    // allocations once its uprobes were in: 20 requests, at least 3 each.
    assert!(u(&fresh["syscalls"]) >= 3 * 20, "{fresh}");
    assert!(u(&fresh["alloc"]["allocations"]) >= 3 * 20, "{fresh}");
    assert!(syscall(&a, "recvfrom") >= 20);
    let losses = a["losses"]["alloc"].to_string();
    assert!(losses.contains("forked during the window"), "{losses}");
    let info = t.stop(Duration::from_secs(2));
    assert_eq!(info.leftover, Vec::<u32>::new());
}

#[test]
fn stopping_a_tree_whose_master_died_first_leaves_no_worker() {
    let test = test_name!();
    if !ready_for(test) {
        return;
    }
    let t = launch(&nginx_spec("nginx-2w.toml"), &opts("tree-orphans"))
        .unwrap_or_else(|e| panic!("{e}"));
    let t0 = Instant::now();
    let workers = loop {
        let w = descendants(t.pid);
        if w.len() == 2 {
            break w;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "two workers: {w:?}");
        std::thread::sleep(Duration::from_millis(5));
    };
    // /proc sampling covers the tree: master and both workers.
    assert_eq!(
        rig::sample::ProcSnapshot::read_tree(t.pid)
            .unwrap()
            .processes,
        3
    );
    // Every worker's mapped objects are checked as the arm's, not only the
    // master's.
    let expected = rig::launch::identity::expected_objects(&nginx_spec("nginx-2w.toml")).unwrap();
    let proof = rig::launch::identity::verify("A", &expected, &t).unwrap();
    let mut checked = proof.processes.clone();
    checked.sort_unstable();
    let mut all = workers.clone();
    all.push(t.pid);
    all.sort_unstable();
    assert_eq!(checked, all);
    // The master dies first; its workers are orphaned (and reparented to
    // rig, the subreaper).
    // SAFETY: plain syscall on the process this test launched.
    unsafe { libc::kill(t.pid as i32, libc::SIGKILL) };
    assert!(t.wait_exit(Duration::from_secs(5)));
    assert!(
        workers.iter().any(|&w| alive(w as u64)),
        "workers outlive the master for now"
    );
    let info = t.stop(Duration::from_secs(2));
    assert_eq!(info.leftover, Vec::<u32>::new());
    for w in workers {
        assert!(!alive(w as u64), "worker {w} survived");
    }
}

#[test]
fn the_callgrind_window_refuses_a_prefork_tree_instead_of_counting_its_master() {
    let test = test_name!();
    if !ready_for(test) {
        return;
    }
    let (code, stdout, stderr) = rig(&[
        "instructions",
        "--backend",
        "callgrind",
        "--target",
        &config("targets/nginx.toml"),
        "--path",
        "/plain",
        "--requests",
        "20",
    ]);
    assert_ne!(code, exit::OK, "{stdout}");
    assert!(
        stderr.contains("runs as 2 processes")
            && stderr.contains("can count only the process rig launched"),
        "{stderr}"
    );
    assert!(
        !stdout.contains("instructions (Ir) per request"),
        "no number is reported: {stdout}"
    );
}

/// Every counted event's stack in a window of `a`: (family, event, count,
/// frames' function names innermost first, the user site's function,
/// incomplete reasons).
type StackEvent = (String, String, u64, Vec<String>, String, Vec<String>);

fn stack_events(a: &Value) -> Vec<StackEvent> {
    let st = &a["stacks"];
    assert_eq!(st["enabled"], true, "stacks were not taken");
    st["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let s = &st["stacks"][r["stack"].as_str().expect("a user stack")];
            let frames: Vec<String> = s["frames"]
                .as_array()
                .unwrap()
                .iter()
                .map(|f| f["function"].as_str().unwrap_or("?").to_string())
                .collect();
            let site = frames[s["user_site"].as_u64().unwrap() as usize].clone();
            let incomplete = s["incomplete"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_str().unwrap().to_string())
                .collect();
            (
                r["family"].as_str().unwrap().to_string(),
                r["event"].as_str().unwrap().to_string(),
                u(&r["count"]),
                frames,
                site,
                incomplete,
            )
        })
        .collect()
}

#[test]
fn nginx_stacks_run_through_its_event_loop_and_name_user_sites_inside_nginx() {
    let test = "nginx_stacks_run_through_its_event_loop_and_name_user_sites_inside_nginx";
    if !ready_for(test) {
        return;
    }
    let _g = probes_shared();
    let out = Out::new("stacks");
    let (code, stdout, stderr) = rig(&[
        "run",
        "--target",
        &config("targets/nginx.toml"),
        "--matrix",
        &config("tree-matrix.toml"),
        "--out",
        out.path(),
        "--passes",
        "counted",
        "--probes",
        "syscalls,alloc",
    ]);
    assert_eq!(code, exit::OK, "stdout:\n{stdout}\nstderr:\n{stderr}");
    let cases = cases(&out);
    let a = &cases[0]["counted"]["attribution"];
    let n = u(&a["window"]["requests"]);
    let events = stack_events(a);
    // Debian's nginx keeps no frame pointers; its worker was forked by the
    // master, whose unwind tables it shares.
    let count = |family: &str, event: &str, through: &[&str]| -> u64 {
        events
            .iter()
            .filter(|e| e.0 == family && e.1 == event)
            .inspect(|e| {
                assert!(e.5.is_empty(), "{event}: incomplete stack {e:?}");
                for f in through {
                    assert!(e.3.iter().any(|x| x == f), "{event} not through {f}: {e:?}");
                }
            })
            .map(|e| e.2)
            .sum()
    };
    // (The worker's own cycle function is static: Debian strips its name.)
    let event_loop = [
        "ngx_process_events_and_timers",
        "ngx_spawn_process",
        "ngx_master_process_cycle",
        "main",
        "_start",
    ];
    let recv = [&["ngx_unix_recv"][..], &event_loop].concat();
    let writev = [&["ngx_writev", "ngx_http_write_filter"][..], &event_loop].concat();
    assert_eq!(count("syscalls", "recvfrom", &recv), n);
    assert_eq!(count("syscalls", "writev", &writev), n);
    // Allocations (ground truth in fixtures/nginx/COSTS.md): 2 posix_memalign
    // (each with glibc's inner malloc) and 1 malloc per request; every user
    // site is nginx's own code, past glibc's allocator.
    assert_eq!(count("alloc", "posix_memalign", &event_loop), 2 * n);
    assert_eq!(count("alloc", "malloc", &event_loop), 3 * n);
    assert_eq!(count("alloc", "free", &event_loop), 3 * n);
    // nginx's pools are an allocator too: a user site lies past them, in
    // nginx's code, which may be a static function Debian's build leaves
    // unnamed.
    for e in events.iter().filter(|e| e.0 == "alloc") {
        let past_a_pool = e.3.iter().any(|f| f.starts_with("ngx_p"));
        assert!(
            e.4.starts_with("ngx_") || (e.4 == "?" && past_a_pool),
            "user site {} of {e:?}",
            e.4
        );
    }
    // nginx's pools are counted as an allocator of their own, past which
    // the user site lies.
    assert!(
        events
            .iter()
            .any(|e| e.0 == "alloc" && e.1.starts_with("ngx_p") && e.4 != e.1),
        "no pool allocation: {events:?}"
    );
    let sites: std::collections::BTreeSet<&str> = events
        .iter()
        .filter(|e| e.0 == "alloc" && e.1 == "posix_memalign")
        .map(|e| e.4.as_str())
        .collect();
    assert_eq!(sites.into_iter().collect::<Vec<_>>(), vec!["ngx_memalign"]);
}

/// `rig attach --pid` of rig's own parent (the shell that started it) in
/// tree mode: rig and the load command it runs (with the processes that
/// command forks) are inside that tree, and none of it is the target's
/// work. The shell is blocked in wait() for the whole window, so the
/// truth is exact: one process measured, 0 syscalls, 0 allocations.
#[test]
fn attach_to_an_ancestor_of_rig_never_counts_rig_or_its_children() {
    root_or_skip!();
    let _g = probes_shared();
    let out = Out::new("ancestor");
    std::fs::create_dir_all(&out.0).unwrap();
    let json = out.0.join("a.json");
    // `; echo` keeps the shell alive as rig's parent (no exec of the last
    // command); the load command forks three more processes from rig's child.
    let script = format!(
        "'{}' attach --pid $$ --tree --probes syscalls,alloc --per 1 --json '{}' \
         -- /bin/sh -c '/bin/true; /bin/true; /bin/true; /bin/sleep 1'; echo rig=$?",
        rig_bin(),
        json.display()
    );
    let sh = Command::new("/bin/sh")
        .args(["-c", &script])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&sh.stdout);
    let stderr = String::from_utf8_lossy(&sh.stderr);
    assert!(stdout.contains("rig=0"), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("rig itself (pid") && stderr.contains("are left out"),
        "{stderr}"
    );
    let a: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let shell = u(&a["pid"]);
    let pids: Vec<u64> = a["processes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| u(&p["pid"]))
        .collect();
    assert_eq!(pids, vec![shell], "{:#}", a["processes"]);
    let rig_pid = u(&a["window"]["rig_excluded"][0]);
    assert_ne!(rig_pid, shell);
    let syscalls: u64 = a["syscalls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| u(&r["count"]))
        .sum();
    assert_eq!(syscalls, 0, "{:#}", a["syscalls"]);
    assert_eq!(
        u(&a["alloc_totals"]["allocations"]),
        0,
        "{:#}",
        a["alloc_totals"]
    );
    assert_eq!(u(&a["alloc_totals"]["frees"]), 0, "{:#}", a["alloc_totals"]);
}
