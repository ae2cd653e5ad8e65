//! `rig compare` and `rig bisect` over a series of calibration-server
//! builds: a git repository made here, six commits, one of which adds one
//! allocation per request and one of which only renames a function.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use super::{probes_shared, repo, rig_bin};
use rig::exit;

/// The calibration flags of fixtures/build.rs, plus a prefix map: the
/// same source built in two worktrees is the same binary (DWARF names the
/// build directory otherwise).
const BUILD_SH: &str = r#"set -e
mkdir -p build
gcc -O2 -g -fno-omit-frame-pointer -fno-builtin -fno-inline-functions-called-once \
  -fno-optimize-sibling-calls -fno-tree-loop-distribute-patterns -pthread -Wl,-z,now \
  -fdebug-prefix-map="$PWD"=. -o build/calib_server calib_server.c
"#;

const SPEC: &str = r#"name = "calib"
argv = ["build/calib_server", "--port", "{port}", "--threads", "2"]
port = "argv"
ready = { stdout = "READY" }
[protocols]
h1 = true
[[endpoints]]
path = "/calib"
status = 200
body = { literal = "calib\n" }
"#;

const MATRIX: &str = r#"[defaults]
warmup_ms = 50
duration_ms = 200
counted_requests = 100
settle_ms = 50

[[suite]]
name = "series"
kind = "http"
protocols = ["h1"]
paths = ["/calib"]
topologies = ["1"]
"#;

fn git(dir: &Path, args: &[&str]) -> String {
    let o = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args([
            "-c",
            "user.name=rig",
            "-c",
            "user.email=rig@example.invalid",
        ])
        .args(args)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

/// Replace `from` (which must be there) by `to` in `file`.
fn edit(file: &Path, from: &str, to: &str) {
    let text = std::fs::read_to_string(file).unwrap();
    assert!(text.contains(from), "{from:?} in {}", file.display());
    std::fs::write(file, text.replace(from, to)).unwrap();
}

fn commit(repo: &Path, msg: &str) -> String {
    git(repo, &["add", "-A"]);
    git(repo, &["commit", "-qm", msg]);
    git(repo, &["rev-parse", "HEAD"])
}

/// The repository with its six commits, oldest first.
fn make_repo(repo: &Path) -> Vec<String> {
    std::fs::create_dir_all(repo).unwrap();
    git(repo, &["init", "-q"]);
    let src = repo.join("calib_server.c");
    std::fs::copy(self::repo().join("fixtures/calib/calib_server.c"), &src).unwrap();
    std::fs::write(repo.join("build.sh"), BUILD_SH).unwrap();
    std::fs::write(repo.join("spec.toml"), SPEC).unwrap();
    std::fs::write(repo.join(".gitignore"), "build/\n").unwrap();
    let mut c = vec![commit(repo, "import the calibration server")];
    std::fs::write(repo.join("README"), "the calibration server\n").unwrap();
    c.push(commit(repo, "docs: a README"));
    let text = std::fs::read_to_string(&src).unwrap();
    std::fs::write(
        &src,
        text.replace("calib_alloc_calloc", "calib_alloc_zeroed"),
    )
    .unwrap();
    c.push(commit(
        repo,
        "rename calib_alloc_calloc to calib_alloc_zeroed",
    ));
    edit(&src, "    void *p[3];\n", "    void *p[4];\n");
    edit(
        &src,
        "/* SITE:alloc_small_c */\n",
        "/* SITE:alloc_small_c */\n    p[3] = malloc(g_sz_small);\n",
    );
    edit(
        &src,
        "/* SITE:free_small_c */\n",
        "/* SITE:free_small_c */\n    free(p[3]);\n",
    );
    c.push(commit(repo, "calib_alloc_small: a fourth allocation"));
    edit(
        &src,
        "/* Raw syscall(2) so glibc",
        "/* A comment only.\n * Raw syscall(2) so glibc",
    );
    c.push(commit(repo, "calib_syscalls: a comment"));
    edit(
        &src,
        "g_sink += (unsigned long)i; /* not a probe site",
        "g_sink += (unsigned long)i + 1; /* not a probe site",
    );
    c.push(commit(repo, "calib_spin: one more add"));
    c
}

/// `rig run` of the series matrix on the build of `spec`, into `out`.
fn rig_run(spec: &Path, matrix: &Path, out: &Path) {
    let o = Command::new(rig_bin())
        .arg("run")
        .arg("--target")
        .arg(spec)
        .arg("--matrix")
        .arg(matrix)
        .arg("--out")
        .arg(out)
        .args(["--probes", "alloc,syscalls"])
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(exit::OK),
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

fn series<'a>(case: &'a Value, metric: &str) -> &'a Value {
    case["series"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["metric"] == metric)
        .unwrap_or_else(|| panic!("no series {metric}"))
}

fn steps(s: &Value) -> Vec<(u64, u64)> {
    s["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|st| (st["from"].as_u64().unwrap(), st["to"].as_u64().unwrap()))
        .collect()
}

#[test]
fn compare_marks_the_allocation_step_in_its_commit_and_bisect_finds_that_commit() {
    root_or_skip!();
    let _g = probes_shared();
    let d = tempfile::Builder::new()
        .prefix("rig-compare-")
        .tempdir()
        .unwrap();
    let root = d.path();
    let main = root.join("repo");
    let commits = make_repo(&main);
    let matrix = root.join("m.toml");
    std::fs::write(&matrix, MATRIX).unwrap();

    // Each commit built in a worktree of its own (the binaries must stay
    // for the function hashes); the first one measured twice: the negative
    // control of the timing band.
    let mut dirs: Vec<PathBuf> = Vec::new();
    for (i, c) in commits.iter().enumerate() {
        let wt = root.join(format!("wt{}", i + 1));
        git(
            &main,
            &["worktree", "add", "-q", "--detach", wt.to_str().unwrap(), c],
        );
        let b = Command::new("sh")
            .arg("build.sh")
            .current_dir(&wt)
            .output()
            .unwrap();
        assert!(b.status.success(), "{}", String::from_utf8_lossy(&b.stderr));
        let runs = if i == 0 { 2 } else { 1 };
        for r in 0..runs {
            let out = root.join(format!("run-c{}-{}", i + 1, r + 1));
            rig_run(&wt.join("spec.toml"), &matrix, &out);
            dirs.push(out);
        }
    }

    let json = root.join("compare.json");
    let page = root.join("compare.html");
    let o = Command::new(rig_bin())
        .arg("compare")
        .args(&dirs)
        .arg("--json")
        .arg(&json)
        .arg("--html")
        .arg(&page)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert_eq!(
        o.status.code(),
        Some(exit::OK),
        "{text}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let c: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let readings = c["readings"].as_array().unwrap();
    assert_eq!(readings.len(), 7, "{text}");
    // Readings: R1, R2 = commit 1 twice; R3 = commit 2 (a README: the same
    // binary); R4 rename; R5 the allocation; R6 a comment; R7 calib_spin.
    assert_eq!(readings[0]["build"], readings[1]["build"], "{text}");
    assert_eq!(readings[0]["build"], readings[2]["build"], "{text}");
    for (r, commit) in readings.iter().skip(1).zip(&commits) {
        assert_eq!(r["git"]["commit"], commit.as_str(), "{text}");
    }
    assert_eq!(c["cases"].as_array().unwrap().len(), 1, "{text}");
    let case = &c["cases"][0];
    assert_eq!(case["case"], "series/h1/calib/closed/1x1/ka");

    // Exactly one allocation step, in the interval R4 → R5 (the commit
    // that adds it), and no step of any exact counter anywhere else.
    let allocs = series(case, "allocs/req");
    assert_eq!(allocs["values"][0], 8.0, "{text}");
    assert_eq!(steps(allocs), vec![(3, 4)], "{text}");
    let st = &allocs["steps"][0];
    assert_eq!(
        (st["before"].as_f64(), st["after"].as_f64()),
        (Some(8.0), Some(9.0))
    );
    let adding = format!(
        "{} calib_alloc_small: a fourth allocation",
        &commits[3][..7]
    );
    let logged: Vec<&str> = st["commits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(logged.len(), 1, "{logged:?}");
    assert!(
        logged[0].starts_with(&commits[3][..7]),
        "{logged:?} {adding}"
    );
    for s in case["series"].as_array().unwrap() {
        if s["kind"] == "exact" {
            for step in steps(s) {
                assert_eq!(step, (3, 4), "{}: {text}", s["metric"]);
            }
            assert_eq!(s["unstable"].as_array().unwrap().len(), 0, "{text}");
        } else {
            // Timing: never a step between identical builds (R1, R2, R3).
            for step in steps(s) {
                assert!(step.0 >= 2, "{}: {step:?}: {text}", s["metric"]);
            }
        }
    }
    let site = series(case, "malloc calls @ calib_alloc_small");
    assert_eq!(steps(site), vec![(3, 4)]);
    assert_eq!(site["steps"][0]["function"], "changed");
    // The renamed function's counter is one series under its first name.
    let calloc = series(case, "calloc calls @ calib_alloc_calloc");
    assert!(steps(calloc).is_empty());
    assert!(
        calloc["values"]
            .as_array()
            .unwrap()
            .iter()
            .all(|v| v == 1.0),
        "{text}"
    );
    assert!(
        !text.contains("@ calib_alloc_zeroed"),
        "the rename made a series of its own: {text}"
    );
    assert!(
        text.contains("allocs/req: 8 → 9 (+1) between R4 and R5"),
        "{text}"
    );
    assert!(
        text.contains("malloc calls @ calib_alloc_small: 3 → 4 (+1) between R4 and R5; at calib_alloc_small, a function that changed"),
        "{text}"
    );

    // The function diffs: the rename, the changed function, a comment that
    // changes no function, and calib_spin.
    let fdiff = |to: u64| -> &Value {
        c["functions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["to"] == to)
            .unwrap_or_else(|| panic!("no function diff into R{}: {text}", to + 1))
    };
    let rename = fdiff(3);
    assert_eq!(
        rename["renamed"],
        serde_json::json!([["calib_alloc_calloc", "calib_alloc_zeroed"]]),
        "{text}"
    );
    assert_eq!(rename["changed"], serde_json::json!([]), "{text}");
    assert_eq!(
        fdiff(4)["changed"],
        serde_json::json!(["calib_alloc_small"]),
        "{text}"
    );
    assert_eq!(fdiff(5)["changed"], serde_json::json!([]), "{text}");
    assert_eq!(
        fdiff(6)["changed"],
        serde_json::json!(["calib_spin"]),
        "{text}"
    );
    assert!(
        text.contains("renamed: calib_alloc_calloc → calib_alloc_zeroed"),
        "{text}"
    );

    // The page: the step's series with its exact band, the step marked,
    // and the adding commit under it.
    assert!(
        text.contains(&format!("report: {}", page.display())),
        "{text}"
    );
    let html = std::fs::read_to_string(&page).unwrap();
    let figure = html
        .split("<figure ")
        .find(|f| f.contains("<figcaption>malloc calls @ calib_alloc_small <small>"))
        .unwrap_or_else(|| panic!("no chart of the site's series: {html}"));
    assert!(figure.contains("<line class=\"band exact\""), "{figure}");
    assert_eq!(
        figure.matches("<line class=\"step\"").count(),
        1,
        "{figure}"
    );
    assert!(
        figure.contains("step: 3 → 4 (+1) between R4 and R5; calib_alloc_small changed"),
        "{figure}"
    );
    assert!(figure.contains(&adding), "{figure}");
    assert!(!html.contains("<script"), "the page needs no script");
    if let Some(chrome) = super::html::chromium(test_name!()) {
        let p = super::html::load(&chrome, &page, &super::html::shot("compare"));
        assert!(p.console.is_empty(), "console messages: {:#?}", p.console);
        assert_eq!(
            p.dom.matches("<svg class=\"plot\"").count(),
            case["series"].as_array().unwrap().len(),
            "one chart per series"
        );
    }

    // Every other build: the step's interval now holds three commits (the
    // rename, the allocation and a comment), and only the allocation's
    // commit touched the function the step is at.
    let o = Command::new(rig_bin())
        .arg("compare")
        .args([&dirs[0], &dirs[1], &dirs[2], &dirs[5]])
        .arg("--json")
        .arg(root.join("every-other.json"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert_eq!(o.status.code(), Some(exit::OK), "{text}");
    let c: Value =
        serde_json::from_slice(&std::fs::read(root.join("every-other.json")).unwrap()).unwrap();
    let case = &c["cases"][0];
    let site = series(case, "malloc calls @ calib_alloc_small");
    assert_eq!(steps(site), vec![(2, 3)], "{text}");
    let st = &site["steps"][0];
    assert_eq!(st["commits"].as_array().unwrap().len(), 3, "{text}");
    assert_eq!(
        st["touched"]["commits"],
        serde_json::json!([adding]),
        "{text}"
    );
    let only = format!("only {} touched calib_alloc_small", &commits[3][..7]);
    assert_eq!(st["touched"]["message"], only.as_str(), "{text}");
    assert!(
        text.contains(&format!("3 commits: {} rename", &commits[2][..7])),
        "{text}"
    );
    assert!(text.contains(&format!("; {only}\n")), "{text}");
    // A counter of no site names no function.
    assert_eq!(
        series(case, "allocs/req")["steps"][0]["touched"],
        Value::Null
    );

    // Bisect on the repository the test made, from its own checkout.
    let head = git(&main, &["rev-parse", "HEAD"]);
    let worktrees = git(&main, &["worktree", "list"]);
    let o = Command::new(rig_bin())
        .arg("bisect")
        .arg("--repo")
        .arg(&main)
        .args(["--build", "sh build.sh"])
        .arg("--target")
        .arg(main.join("spec.toml"))
        .args(["--good", &commits[0], "--bad", &commits[5]])
        .args(["--counter", "allocs/req", "--requests", "50"])
        .output()
        .unwrap();
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(o.status.code(), Some(exit::OK), "{text}");
    assert!(
        text.contains(&format!(
            "first commit where `allocs/req` moved: {} calib_alloc_small: a fourth allocation",
            &commits[3][..12]
        )),
        "{text}"
    );
    assert!(text.contains("8 → 9 (+1)"), "{text}");
    assert!(text.contains("changed: calib_alloc_small"), "{text}");
    // The user's checkout is where it was, and the bisection's worktree is gone.
    assert_eq!(git(&main, &["rev-parse", "HEAD"]), head);
    assert_eq!(git(&main, &["status", "--porcelain"]), "");
    assert_eq!(git(&main, &["worktree", "list"]), worktrees);
}

#[test]
fn compare_refuses_to_align_cases_measured_with_different_settings() {
    let d = tempfile::tempdir().unwrap();
    let line = |duration: u64, sha: &str| {
        serde_json::json!({
            "id": "s/t/h1/x/closed/1x1/ka/#1", "target_name": "t", "repeat": 1,
            "duration_ms": duration, "status": "ok",
            "clean": {"launch": {"exe_sha256": sha}, "load": {"rps": 100.0}},
        })
        .to_string()
    };
    let (a, b) = (d.path().join("a"), d.path().join("b"));
    for (dir, dur, sha) in [(&a, 200, "aa"), (&b, 500, "bb")] {
        std::fs::create_dir(dir).unwrap();
        std::fs::write(dir.join("cases.jsonl"), line(dur, sha) + "\n").unwrap();
    }
    let o = Command::new(rig_bin())
        .arg("compare")
        .arg(&a)
        .arg(&b)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(exit::ERROR), "{err}");
    assert!(
        err.contains("s/h1/x/closed/1x1/ka: matrix setting `duration_ms` is 200 in R1"),
        "{err}"
    );
    assert!(err.contains("but 500 in R2"), "{err}");
}

#[test]
fn bisect_on_a_timing_metric_measures_repeats_and_ends_with_an_interval() {
    // The clean pass only: no probes, no root needed.
    let d = tempfile::Builder::new()
        .prefix("rig-bisect-timing-")
        .tempdir()
        .unwrap();
    let repo = d.path().join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    git(&repo, &["init", "-q"]);
    let src = repo.join("calib_server.c");
    std::fs::copy(self::repo().join("fixtures/calib/calib_server.c"), &src).unwrap();
    std::fs::write(repo.join("build.sh"), BUILD_SH).unwrap();
    std::fs::write(repo.join("spec.toml"), SPEC).unwrap();
    std::fs::write(repo.join(".gitignore"), "build/\n").unwrap();
    let good = commit(&repo, "import the calibration server");
    std::fs::write(repo.join("README"), "the calibration server\n").unwrap();
    let readme = commit(&repo, "docs: a README");
    // 3 ms more sleep per request: p50 goes from ~0.2 ms to over 3 ms.
    edit(
        &src,
        "struct timespec ts = { 0, g_sleep_ns };",
        "struct timespec ts = { 0, g_sleep_ns + 3000000 };",
    );
    let slow = commit(&repo, "calib_sleep: 3 ms more");
    edit(
        &src,
        "/* Raw syscall(2) so glibc",
        "/* A comment.\n * Raw syscall(2) so glibc",
    );
    let bad = commit(&repo, "calib_syscalls: a comment");
    let path = [&good, &readme, &slow, &bad];

    let o = Command::new(rig_bin())
        .arg("bisect")
        .arg("--repo")
        .arg(&repo)
        .args(["--build", "sh build.sh"])
        .arg("--target")
        .arg(repo.join("spec.toml"))
        .args(["--good", &good, "--bad", &bad])
        .args(["--counter", "latency p50 µs", "--repeats", "3"])
        .output()
        .unwrap();
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    // A machine too noisy to tell 3 ms apart refuses, saying so.
    if o.status.code() == Some(exit::USAGE) {
        assert!(text.contains("not more than the noise band"), "{text}");
        return;
    }
    let found = text.contains("first commit where `latency p50 µs` moved: ");
    let expected = if found { exit::OK } else { exit::UNDECIDED };
    assert_eq!(o.status.code(), Some(expected), "{text}");
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].starts_with(&format!(
            "rig bisect: 4 commits from {} (good) to {} (bad), counter `latency p50 µs` \
             (timing: median of 3 clean windows per commit)",
            &good[..12],
            &bad[..12]
        )),
        "{text}"
    );
    // Each commit measured: its id, the median, its three repeats.
    let evidence = |c: &str| {
        lines
            .iter()
            .find(|l| l.starts_with(&format!("  {}  ", &c[..12])))
            .copied()
    };
    for c in [&good, &bad] {
        let l = evidence(c).unwrap_or_else(|| panic!("no evidence of {c}: {text}"));
        let repeats = l.split_once("  (").map(|(_, r)| r).unwrap_or_default();
        assert_eq!(repeats.split(", ").count(), 3, "{l}");
    }
    assert!(lines[3].starts_with("  band ±"), "{text}");
    assert!(
        lines[3].contains("good-like") && lines[3].contains("bad-like"),
        "{text}"
    );
    // Every commit between: measured and classified, or never reached.
    for c in &path[1..3] {
        if let Some(l) = evidence(c) {
            assert!(
                ["good-like", "bad-like", "ambiguous"]
                    .iter()
                    .any(|s| l.contains(&format!("  {s}  "))),
                "{l}"
            );
        }
    }
    // It ends at one commit of the path with its parent, or stops at an
    // ambiguous one with the interval it had.
    if let Some(l) = lines
        .iter()
        .find(|l| l.starts_with("first commit where `latency p50 µs` moved: "))
    {
        let id = &l["first commit where `latency p50 µs` moved: ".len()..][..12];
        assert!(path[1..].iter().any(|c| c.starts_with(id)), "{text}");
        assert!(text.contains("builds measured)"), "{text}");
        assert!(text.contains("  functions: "), "{text}");
    } else {
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with("ambiguous: `latency p50 µs` at ")),
            "{text}"
        );
        assert!(
            lines.iter().any(|l| l.starts_with("interval: after ")),
            "{text}"
        );
    }
}

#[test]
fn bisect_follows_a_renamed_file_and_function_to_the_commit_that_adds_the_allocation() {
    root_or_skip!();
    let _g = probes_shared();
    let d = tempfile::Builder::new()
        .prefix("rig-bisect-rename-")
        .tempdir()
        .unwrap();
    let repo = d.path().join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    git(&repo, &["init", "-q"]);
    std::fs::copy(
        self::repo().join("fixtures/calib/calib_server.c"),
        repo.join("calib_server.c"),
    )
    .unwrap();
    std::fs::write(repo.join("build.sh"), BUILD_SH).unwrap();
    std::fs::write(repo.join("spec.toml"), SPEC).unwrap();
    std::fs::write(repo.join(".gitignore"), "build/\n").unwrap();
    let good = commit(&repo, "import the calibration server");
    // The source file moves, then the counter's function is renamed (the
    // same code under a new name), then that function gets one more
    // allocation.
    git(&repo, &["mv", "calib_server.c", "server.c"]);
    edit(&repo.join("build.sh"), "calib_server.c", "server.c");
    commit(&repo, "calib_server.c is server.c");
    let src = repo.join("server.c");
    let text = std::fs::read_to_string(&src).unwrap();
    std::fs::write(&src, text.replace("calib_alloc_small", "calib_alloc_three")).unwrap();
    commit(&repo, "rename calib_alloc_small to calib_alloc_three");
    edit(&src, "    void *p[3];\n", "    void *p[4];\n");
    edit(
        &src,
        "/* SITE:alloc_small_c */\n",
        "/* SITE:alloc_small_c */\n    p[3] = malloc(g_sz_small);\n",
    );
    edit(
        &src,
        "/* SITE:free_small_c */\n",
        "/* SITE:free_small_c */\n    free(p[3]);\n",
    );
    let adding = commit(&repo, "calib_alloc_three: a fourth allocation");
    edit(
        &src,
        "/* Raw syscall(2) so glibc",
        "/* A comment only.\n * Raw syscall(2) so glibc",
    );
    let bad = commit(&repo, "calib_syscalls: a comment");

    let o = Command::new(rig_bin())
        .arg("bisect")
        .arg("--repo")
        .arg(&repo)
        .args(["--build", "sh build.sh"])
        .arg("--target")
        .arg(repo.join("spec.toml"))
        .args(["--good", &good, "--bad", &bad])
        .args([
            "--counter",
            "malloc calls @ calib_alloc_small",
            "--requests",
            "50",
        ])
        .output()
        .unwrap();
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(o.status.code(), Some(exit::OK), "{text}");
    assert!(
        text.contains(&format!(
            "first commit where `malloc calls @ calib_alloc_small` moved: {} \
             calib_alloc_three: a fourth allocation",
            &adding[..12]
        )),
        "{text}"
    );
    assert!(text.contains("  3 → 4 (+1) against "), "{text}");
    assert!(
        text.contains("(at calib_alloc_three, renamed)"),
        "the renamed function's counter read under its new name: {text}"
    );
    // Bad's function was renamed and changed since good: followed only
    // through the commits measured between them.
    assert!(text.contains("(bad, read again: "), "{text}");
    assert!(text.contains("changed: calib_alloc_three"), "{text}");
    assert!(
        text.contains(&format!("\n  {} touched calib_alloc_small\n", &adding[..7])),
        "{text}"
    );
}

#[test]
fn funcdiff_names_the_functions_two_library_builds_change_and_add() {
    // Variant e of libcalibwork.so is a's work plus a known loop
    // (fixtures/calib/COSTS.md, "A/B fixtures"): calibwork_spin, called
    // from calibwork_request; b compiles out one allocation of
    // calibwork_alloc; d differs from a by a string no function reads.
    let d = tempfile::tempdir().unwrap();
    let json = d.path().join("e.json");
    let (a, e) = (
        rig_fixtures::calibwork_so('a'),
        rig_fixtures::calibwork_so('e'),
    );
    let o = Command::new(rig_bin())
        .arg("funcdiff")
        .arg(&a)
        .arg(&e)
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert_eq!(
        o.status.code(),
        Some(exit::OK),
        "{text}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(
        text,
        format!(
            "a: {}\nb: {}\nchanged  calibwork_request\nadded    calibwork_spin\n4 identical\n",
            a.display(),
            e.display()
        )
    );
    let j: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(j["changed"], serde_json::json!(["calibwork_request"]));
    assert_eq!(j["added"], serde_json::json!(["calibwork_spin"]));
    assert_eq!(j["removed"], serde_json::json!([]));
    assert_eq!(j["renamed"], serde_json::json!([]));
    assert_eq!(j["identical"], 4);
    assert_eq!(j["a"], a.display().to_string());

    let diff = |v: char| {
        let o = Command::new(rig_bin())
            .arg("funcdiff")
            .arg(&a)
            .arg(rig_fixtures::calibwork_so(v))
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&o.stdout).into_owned();
        text.lines().skip(2).collect::<Vec<_>>().join("\n")
    };
    assert_eq!(diff('b'), "changed  calibwork_alloc\n4 identical");
    assert_eq!(diff('d'), "5 identical");
    // A file that is no ELF: the error names it.
    let o = Command::new(rig_bin())
        .arg("funcdiff")
        .arg(&a)
        .arg(&json)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(exit::ERROR), "{err}");
    assert!(
        err.contains(&format!("{}: not an ELF file rig can read", json.display())),
        "{err}"
    );
}

/// One case of the A/B fixtures, counted only, small.
const DYN_MATRIX: &str = r#"[defaults]
warmup_ms = 50
duration_ms = 100
counted_requests = 100

[[suite]]
name = "work"
kind = "http"
protocols = ["h1"]
paths = ["/work"]
topologies = ["1"]
"#;

/// Run rig with `args`; its exit code and its output (stdout, stderr).
fn rig(args: &[&std::ffi::OsStr]) -> (Option<i32>, String) {
    let o = Command::new(rig_bin()).args(args).output().unwrap();
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    (o.status.code(), text)
}

#[test]
fn compare_aligns_the_cases_of_a_run_an_ab_and_a_gate_and_tells_their_libraries_apart() {
    root_or_skip!();
    let _g = probes_shared();
    let d = tempfile::Builder::new()
        .prefix("rig-compare-dirs-")
        .tempdir()
        .unwrap();
    let root = d.path();
    let matrix = root.join("m.toml");
    std::fs::write(&matrix, DYN_MATRIX).unwrap();
    let s = |p: &Path| p.as_os_str().to_owned();
    let spec_of = |v: char| std::ffi::OsString::from(super::spec(&format!("calib-dyn-{v}.toml")));
    let (run, ab, gate) = (root.join("run"), root.join("ab"), root.join("gate"));

    // rig run of arm a (libcalibwork.so variant a: 3 allocations per request).
    let (code, text) = rig(&[
        "run".as_ref(),
        "--target".as_ref(),
        &spec_of('a'),
        "--matrix".as_ref(),
        &s(&matrix),
        "--out".as_ref(),
        &s(&run),
        "--probes".as_ref(),
        "alloc".as_ref(),
    ]);
    assert_eq!(code, Some(exit::OK), "{text}");
    // rig ab of a against b (one allocation fewer), one round.
    let arm = |n: &str, v: char| {
        let mut a = std::ffi::OsString::from(format!("{n}="));
        a.push(spec_of(v));
        a
    };
    let (code, text) = rig(&[
        "ab".as_ref(),
        "--arm".as_ref(),
        &arm("a", 'a'),
        "--arm".as_ref(),
        &arm("b", 'b'),
        "--matrix".as_ref(),
        &s(&matrix),
        "--suite".as_ref(),
        "work".as_ref(),
        "--rounds".as_ref(),
        "1".as_ref(),
        "--passes".as_ref(),
        "counted".as_ref(),
        "--probes".as_ref(),
        "alloc".as_ref(),
        "--out".as_ref(),
        &s(&ab),
    ]);
    assert_eq!(code, Some(exit::OK), "{text}");
    // rig gate: a baseline blessed on a, then variant c (one allocation
    // more) against it: a breach, its directory written all the same.
    let baseline = root.join("baseline.toml");
    std::fs::write(
        &baseline,
        format!(
            "target = \"{}\"\nmatrix = \"{}\"\nsuite = \"work\"\nrepeats = 2\nrequests = 100\nprobes = \"alloc\"\n",
            super::spec("calib-dyn-a.toml"),
            matrix.display()
        ),
    )
    .unwrap();
    let (code, text) = rig(&[
        "gate".as_ref(),
        "--baseline".as_ref(),
        &s(&baseline),
        "--bless".as_ref(),
    ]);
    assert_eq!(code, Some(exit::OK), "{text}");
    let (code, text) = rig(&[
        "gate".as_ref(),
        "--baseline".as_ref(),
        &s(&baseline),
        "--target".as_ref(),
        &spec_of('c'),
        "--out".as_ref(),
        &s(&gate),
    ]);
    assert_eq!(code, Some(exit::GATE_BREACH), "{text}");

    let json = root.join("c.json");
    let (code, text) = rig(&[
        "compare".as_ref(),
        &s(&run),
        &s(&ab),
        &s(&gate),
        "--json".as_ref(),
        &s(&json),
    ]);
    assert_eq!(code, Some(exit::OK), "{text}");
    let c: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let readings = c["readings"].as_array().unwrap();
    let targets: Vec<&str> = readings
        .iter()
        .map(|r| r["target"].as_str().unwrap())
        .collect();
    assert_eq!(targets, ["calib-dyn-a", "a", "b", "calib-dyn-c"], "{text}");
    // Every reading runs calib_dyn; its library makes the build. The run
    // and arm a ran the same build: a negative control.
    let library = |r: &Value| -> PathBuf {
        let m = r["modules"].as_array().unwrap();
        assert_eq!(m.len(), 1, "{r}");
        PathBuf::from(m[0].as_str().unwrap())
    };
    for (r, v) in readings.iter().zip(['a', 'a', 'b', 'c']) {
        assert_eq!(library(r), rig_fixtures::calibwork_so(v), "{text}");
    }
    assert_eq!(readings[0]["build"], readings[1]["build"], "{text}");
    assert_ne!(readings[1]["build"], readings[2]["build"], "{text}");
    // The fixtures are built inside rig's own work tree: each of the three
    // manifests names its commit.
    let commit = |r: &Value| r["git"]["commit"].as_str().map(str::to_string);
    assert!(commit(&readings[0]).is_some(), "{text}");
    for r in readings {
        assert_eq!(commit(r), commit(&readings[0]), "{text}");
    }
    assert_ne!(readings[2]["build"], readings[3]["build"], "{text}");
    // One case, aligned across the three directories.
    assert_eq!(c["refused"], serde_json::json!([]), "{text}");
    let cases = c["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 1, "{text}");
    let case = &cases[0];
    assert_eq!(case["case"], "work/h1/work/closed/1x1/ka");
    let allocs = series(case, "allocs/req");
    assert_eq!(
        allocs["values"],
        serde_json::json!([3.0, 3.0, 2.0, 4.0]),
        "{text}"
    );
    assert_eq!(steps(allocs), vec![(1, 2), (2, 3)], "{text}");
    assert_eq!(allocs["unstable"], serde_json::json!([]), "{text}");
    let site = series(case, "malloc calls @ calibwork_alloc");
    assert_eq!(steps(site), vec![(1, 2), (2, 3)], "{text}");
    for st in site["steps"].as_array().unwrap() {
        assert_eq!(st["function"], "changed", "{text}");
    }
    // The functions of the library, keyed by its module.
    let functions = c["functions"].as_array().unwrap();
    let to: Vec<u64> = functions
        .iter()
        .map(|f| f["to"].as_u64().unwrap())
        .collect();
    assert_eq!(to, [2, 3], "no diff between identical builds: {text}");
    for f in functions {
        assert_eq!(
            f["changed"],
            serde_json::json!(["libcalibwork.so!calibwork_alloc"]),
            "{text}"
        );
    }
    assert!(
        text.contains("R2 → R3: ") && text.contains("changed: libcalibwork.so!calibwork_alloc"),
        "{text}"
    );
}
