//! report.html in a real browser: Debian's chromium, headless, loads the
//! page from the file system (no network: the page's own
//! Content-Security-Policy forbids every fetch) and the tests read the DOM
//! it built (`--dump-dom`, after the page's script ran) and the console
//! messages it logged (`--enable-logging=stderr`). Outputs of real runs of
//! `rig run`, `rig ab` and `rig gate` on the calibration fixtures
//! (fixtures/calib/COSTS.md), whose per-request costs are known exactly.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use super::{probes_shared, repo, rig_bin, spec};
use rig::exit;

/// Debian's chromium, or `None` when it is missing outside CI (in CI a
/// missing browser fails the test: scripts/deps.sh installs it).
pub(super) fn chromium(test: &str) -> Option<PathBuf> {
    let found = super::on_path("chromium", &[]).or_else(|| super::on_path("chromium-browser", &[]));
    super::required(test, "chromium", found, "scripts/deps.sh installs it")
}

pub(super) struct Page {
    pub(super) dom: String,
    /// Console messages (errors, warnings, logs) and CSP violations.
    pub(super) console: Vec<String>,
}

fn browser(chrome: &Path, profile: &Path, extra: &[String], page: &Path) -> std::process::Output {
    Command::new(chrome)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--enable-logging=stderr",
            "--v=0",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(extra)
        .arg(format!("file://{}", page.display()))
        .output()
        .unwrap()
}

/// Load `page` in a fresh profile; also save a screenshot to `shot`.
pub(super) fn load(chrome: &Path, page: &Path, shot: &Path) -> Page {
    let profile = tempfile::tempdir().unwrap();
    let out = browser(chrome, profile.path(), &["--dump-dom".into()], page);
    assert!(out.status.success(), "chromium failed: {out:?}");
    let console = String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter(|l| l.contains(":CONSOLE") || l.contains("Content Security Policy"))
        .map(String::from)
        .collect();
    let profile2 = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(shot.parent().unwrap()).unwrap();
    let s = browser(
        chrome,
        profile2.path(),
        &[
            format!("--screenshot={}", shot.display()),
            "--window-size=1400,1800".into(),
            "--hide-scrollbars".into(),
        ],
        page,
    );
    assert!(s.status.success() && shot.is_file(), "screenshot: {s:?}");
    Page {
        dom: String::from_utf8_lossy(&out.stdout).into_owned(),
        console,
    }
}

/// The checks every page passes: it loaded, its script ran to the end and
/// logged nothing, and no error reached the page.
fn assert_clean(p: &Page) {
    assert!(p.console.is_empty(), "console messages: {:#?}", p.console);
    assert!(
        p.dom.contains("data-ready=\"1\""),
        "the script did not finish"
    );
    assert!(
        p.dom.contains("<div id=\"js-errors\" hidden=\"\"></div>"),
        "errors in the page"
    );
}

fn cases(dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(dir.join("cases.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

pub(super) fn shot(name: &str) -> PathBuf {
    repo().join("target").join(format!("rig-report-{name}.png"))
}

/// The `<article>` of one case in the DOM.
fn article<'a>(dom: &'a str, id: &str) -> &'a str {
    let start = dom
        .find(&format!(
            "<article class=\"case status-ok\" id=\"case-{}\"",
            rig::scenario::slug(id)
        ))
        .unwrap_or_else(|| panic!("no section for {id}"));
    let end = dom[start..].find("</article>").unwrap() + start;
    &dom[start..end]
}

fn scratch(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("rig-html-{name}-"))
        .tempdir()
        .unwrap()
}

const RUN_MATRIX: &str = r#"
[defaults]
warmup_ms = 200
duration_ms = 400
counted_requests = 1000

[[suite]]
name = "calib"
kind = "http"
protocols = ["h1"]
paths = ["/calib"]
topologies = ["1", "2"]
"#;

/// The flamegraphs rig wrote in `dir` (`<graph>.svg` or
/// `<graph>.diff.svg`): (graph, the `src` the page embeds it as).
fn flame_files(dir: &Path, diff: bool) -> Vec<(String, String)> {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD;
    let mut out: Vec<(String, String)> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .flatten()
        .filter_map(|f| {
            let name = f.file_name().to_string_lossy().into_owned();
            let stem = name.strip_suffix(".svg")?;
            let graph = match (stem.strip_suffix(".diff"), diff) {
                (Some(g), true) => g,
                (None, false) => stem,
                _ => return None,
            };
            let svg = std::fs::read(f.path()).unwrap();
            Some((
                graph.to_string(),
                format!("data:image/svg+xml;base64,{}", b64.encode(svg)),
            ))
        })
        .collect();
    out.sort();
    out
}

/// Every flamegraph of `files` is an iframe of `html`, the file itself.
fn assert_embeds(html: &str, files: &[(String, String)], what: &str) {
    for (graph, src) in files {
        let at = html
            .find(&format!("src=\"{src}\""))
            .unwrap_or_else(|| panic!("{what}: {graph}.svg is not embedded"));
        let tag = &html[html[..at].rfind("<iframe").unwrap()..at];
        assert!(
            tag.starts_with(&format!("<iframe class=\"flame\" data-family=\"{graph}\"")),
            "{what}: {tag}"
        );
    }
}

#[test]
fn run_report_shows_every_case_its_latency_plot_sites_and_flamegraph_in_chromium() {
    root_or_skip!();
    let Some(chrome) = chromium(test_name!()) else {
        return;
    };
    let _g = probes_shared();
    let d = scratch("run");
    let matrix = d.path().join("m.toml");
    std::fs::write(&matrix, RUN_MATRIX).unwrap();
    let out = d.path().join("out");
    let o = Command::new(rig_bin())
        .arg("run")
        .arg("--target")
        .arg(spec("calib.toml"))
        .arg("--matrix")
        .arg(&matrix)
        .arg("--out")
        .arg(&out)
        .args(["--probes", "syscalls,alloc,copy,faults"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(exit::OK), "{stdout}\n{o:?}");
    let page = out.join("report.html");
    assert!(
        stdout.contains(&format!("report: {}", page.display())),
        "{stdout}"
    );
    let cs = cases(&out);
    assert_eq!(cs.len(), 2);
    // Every counted case has rig's own flamegraphs, one per measure with a
    // value (COSTS.md: allocations, their bytes, copies and syscalls at
    // every /calib request).
    for c in &cs {
        let dir = out
            .join("flame")
            .join(rig::scenario::slug(c["id"].as_str().unwrap()));
        for f in [
            "alloc.svg",
            "alloc_bytes.svg",
            "copy.svg",
            "copy_calls.svg",
            "syscalls.svg",
        ] {
            assert!(
                dir.join(f).is_file(),
                "rig wrote no {f} in {}",
                dir.display()
            );
        }
    }
    // `rig report` rebuilds the page from the directory.
    let r = Command::new(rig_bin())
        .arg("report")
        .arg(&out)
        .output()
        .unwrap();
    assert!(r.status.success(), "{r:?}");
    assert_eq!(
        String::from_utf8_lossy(&r.stdout).trim(),
        format!("report: {}", page.display())
    );

    let p = load(&chrome, &page, &shot("run"));
    assert_clean(&p);
    for c in &cs {
        let id = c["id"].as_str().unwrap();
        assert_eq!(c["status"], "ok", "{c:#}");
        // Its row in the matrix, with the exact counters of the calibration
        // server (COSTS.md: 8 allocations of 6004 B, 9 syscalls per request).
        let row = format!("<tr class=\"case-row status-ok\" data-case=\"{id}\" data-suite=\"calib\" data-protocol=\"h1\" data-target=\"calib\">");
        let at = p
            .dom
            .find(&row)
            .unwrap_or_else(|| panic!("no row for {id}"));
        let row_html = &p.dom[at..at + p.dom[at..].find("</tr>").unwrap()];
        for v in [
            "<td class=\"n\" data-sort=\"8.0\">8</td>",
            "<td class=\"n\" data-sort=\"6004.0\">6004</td>",
        ] {
            assert!(row_html.contains(v), "{v} not in {row_html}");
        }
        // Syscalls: 9 per request, plus the futex calls of g_mu when two
        // workers are busy at once (COSTS.md: several concurrent
        // connections contend on it), which the case records exactly.
        let counted = &c["counted"]["attribution"];
        let futex = counted["syscalls"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["name"] == "futex")
            .map(|s| s["count"].as_u64().unwrap())
            .sum::<u64>();
        let total = counted["processes"][0]["syscalls"].as_u64().unwrap();
        assert_eq!(total - futex, 9000, "{counted:#}");
        let per_req = c["counted"]["per_request"]["syscalls"].as_f64().unwrap();
        assert_eq!(per_req, total as f64 / 1000.0);
        let cell = format!("<td class=\"n\" data-sort=\"{per_req:?}\">");
        assert!(row_html.contains(&cell), "{cell} not in {row_html}");
        if futex == 0 {
            let exact = "<td class=\"n\" data-sort=\"9.0\">9</td>";
            assert!(row_html.contains(exact), "{exact} not in {row_html}");
        }
        let a = article(&p.dom, id);
        // The latency percentile curve, drawn by the page's script.
        assert!(
            a.contains(&format!("<svg class=\"plot\" data-kind=\"latency\" viewBox=\"0 0 460 260\" width=\"460\" height=\"260\" role=\"img\" data-case=\"{id}\">")),
            "no latency plot for {id}"
        );
        assert!(a.contains("data-series=\"latency\""));
        assert!(a.contains("data-kind=\"memory\"") && a.contains("data-kind=\"cpu\""));
        // Top user sites per request: exactly COSTS.md's totals.
        assert!(a.contains("alloc: 8 events/req, 6004 bytes/req at"), "{a}");
        // Each flamegraph rig wrote for the case, embedded as the file
        // itself, and no other.
        let flames = flame_files(&out.join("flame").join(rig::scenario::slug(id)), false);
        assert_embeds(a, &flames, id);
        assert_eq!(
            a.matches("<iframe class=\"flame\"").count(),
            flames.len(),
            "{id}"
        );
        assert!(!a.contains("no flamegraph recorded"));
    }
    // The two cases differ in connections only: a sweep.
    assert!(p.dom.contains("against connections"));
    assert!(p.dom.contains("<svg class=\"plot\" data-kind=\"sweep\""));
}

#[test]
fn ab_report_shows_the_proof_order_verdicts_and_the_changed_site_in_chromium() {
    root_or_skip!();
    let Some(chrome) = chromium(test_name!()) else {
        return;
    };
    let _g = probes_shared();
    let d = scratch("ab");
    let matrix = d.path().join("m.toml");
    std::fs::write(
        &matrix,
        RUN_MATRIX
            .replace("\"1\", \"2\"", "\"1\"")
            .replace("/calib\"]", "/work\"]")
            .replace("counted_requests = 1000", "counted_requests = 500")
            .replace("name = \"calib\"", "name = \"work\""),
    )
    .unwrap();
    let out = d.path().join("out");
    let o = Command::new(rig_bin())
        .arg("ab")
        .arg("--arm")
        .arg(format!("A={}", spec("calib-dyn-a.toml")))
        .arg("--arm")
        .arg(format!("B={}", spec("calib-dyn-b.toml")))
        .arg("--matrix")
        .arg(&matrix)
        .args([
            "--suite",
            "work",
            "--rounds",
            "1",
            "--probes",
            "syscalls,alloc,copy",
        ])
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(exit::OK), "{o:?}");
    let p = load(&chrome, &out.join("report.html"), &shot("ab"));
    assert_clean(&p);
    assert!(p.dom.contains("<h2>A/B: A vs B</h2>"));
    // The run order, and every launch's proof of its arm.
    assert!(p
        .dom
        .contains("<span>A1</span> <span>B1</span> <span>B2</span> <span>A2</span>"));
    assert!(p.dom.contains("libcalibwork.so sha256 "));
    // allocs/req: 3 in every A run, 2 in every B run (COSTS.md, "A/B fixtures").
    // With one round (two runs per arm) no counter is proven deterministic,
    // so the row is shown but not decided as exact; the changed site is.
    let row = p.dom.find("<td>allocs/req").expect("allocs/req row");
    let tr = &p.dom[p.dom[..row].rfind("<tr").unwrap()..row + p.dom[row..].find("</tr>").unwrap()];
    assert!(!tr.contains("<small>exact</small>"), "{tr}");
    assert!(tr.contains("A: 3 3<br>B: 2 2<br>"), "{tr}");
    assert!(tr.contains("<td class=\"n\">3 → 2</td>"), "{tr}");
    // The changed call site, named.
    let line = rig_fixtures::calibwork_site_line("ab_alloc_3");
    assert!(
        p.dom.contains(&format!("calibwork.c:{line}")),
        "ab_alloc_3's line {line} not named"
    );
    // The 95% CI of B − A: 2 − 3 in every run.
    assert!(
        p.dom.contains("<th>B − A</th><th>95% CI</th>"),
        "no CI column"
    );
    assert!(tr.contains("<td class=\"n\">[-1, -1]</td>"), "{tr}");
    let cs = cases(&out);
    for c in &cs {
        let a = article(&p.dom, c["id"].as_str().unwrap());
        assert!(a.contains("data-kind=\"latency\""));
    }
    // The differential flamegraphs of the case (arm and run left out of
    // its name), each embedded as the file rig wrote.
    assert!(p
        .dom
        .contains("<h2>differential flamegraphs (A → B per request: red grew, blue shrank)</h2>"));
    let ab: Value = serde_json::from_slice(&std::fs::read(out.join("ab.json")).unwrap()).unwrap();
    let key = ab["code_differences"][0]["case"].as_str().unwrap();
    let slug = rig::scenario::slug(key);
    let diffs = flame_files(&out.join("flame").join(&slug), true);
    assert!(
        diffs.iter().any(|(g, _)| g == "alloc"),
        "no alloc.diff.svg for {slug}: {:?}",
        diffs.iter().map(|d| &d.0).collect::<Vec<_>>()
    );
    let section = &p.dom[p
        .dom
        .find("<section id=\"flames\">")
        .expect("no flames section")..];
    assert!(section.contains(&format!("<h3>{slug}</h3>")), "{slug}");
    assert_embeds(section, &diffs, &slug);
}

#[test]
fn gate_report_highlights_the_breaching_site_in_chromium() {
    root_or_skip!();
    let Some(chrome) = chromium(test_name!()) else {
        return;
    };
    let _g = probes_shared();
    let d = scratch("gate");
    let b = d.path().join("baseline.toml");
    std::fs::write(
        &b,
        format!(
            "target = \"{}\"\nmatrix = \"{}\"\nsuite = \"work\"\nrepeats = 2\nrequests = 500\nprobes = \"syscalls,alloc,copy\"\nmax_new_sites = 0\n",
            spec("calib-dyn-a.toml"),
            repo().join("config/gate-matrix.toml").display()
        ),
    )
    .unwrap();
    let bless = Command::new(rig_bin())
        .args(["gate", "--bless", "--baseline"])
        .arg(&b)
        .output()
        .unwrap();
    assert!(bless.status.success(), "{bless:?}");
    let out = d.path().join("out");
    let o = Command::new(rig_bin())
        .args(["gate", "--baseline"])
        .arg(&b)
        .arg("--target")
        .arg(spec("calib-dyn-c.toml"))
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(exit::GATE_BREACH), "{o:?}");
    let p = load(&chrome, &out.join("report.html"), &shot("gate"));
    assert_clean(&p);
    assert!(p.dom.contains("gate: <span class=\"bad\">breach</span>"));
    // Variant C's one extra malloc per request, at its own site.
    let line = rig_fixtures::calibwork_site_line("ab_alloc_extra");
    let site = format!("malloc calls @ calibwork_alloc (calibwork.c:{line})");
    assert!(
        p.dom
            .contains(&format!("<mark class=\"site\">{site}</mark>")),
        "{site} not highlighted"
    );
    // One row per counted run in the matrix.
    assert_eq!(p.dom.matches("<tr class=\"case-row status-ok\"").count(), 2);
}

/// A hand-made case of `suite` whose counted pass made `allocs` allocations
/// per request (the matrix's allocs/req column).
fn handmade_case(id: &str, suite: &str, allocs: f64) -> Value {
    serde_json::json!({
        "id": id, "suite": suite, "kind": "http", "target": 0, "target_name": "calib",
        "repeat": 1, "protocol": "h1", "path": "/calib", "load": {"kind": "closed"},
        "topology": {"connections": 1, "streams": 1}, "keepalive": true, "status": "ok",
        "reasons": [],
        "clean": {"load": {"succeeded": 100, "errors": {}, "rps": 1000.0},
                  "server": {"cpu_us_per_request": 10.0, "rss_max_kib": 4096}},
        "counted": {"load": {"succeeded": 100}, "per_request": {"allocations": allocs}},
    })
}

/// What the page's own script does when a person uses it: a click on a
/// column header sorts the matrix by that column (again: the other way), a
/// filter hides the rows of other suites, and a flamegraph tab shows its
/// family's graph alone. A driver script appended to a copy of the page
/// (the page's policy allows inline scripts) clicks, as a person would, in
/// chromium, and writes what it saw into the DOM.
#[test]
fn the_matrix_sorts_and_filters_and_the_flamegraph_tabs_switch_in_chromium() {
    let Some(chrome) = chromium(test_name!()) else {
        return;
    };
    let d = scratch("behaviour");
    let dir = d.path();
    let cases = [
        ("s1/calib/a/#1", "s1", 8.0),
        ("s2/calib/b/#1", "s2", 2.0),
        ("s1/calib/c/#1", "s1", 5.0),
    ];
    let lines: String = cases
        .iter()
        .map(|(id, s, a)| format!("{}\n", handmade_case(id, s, *a)))
        .collect();
    std::fs::write(dir.join("cases.jsonl"), lines).unwrap();
    std::fs::write(dir.join("manifest.json"), r#"{"rig_version": "t"}"#).unwrap();
    let flame = dir.join("flame").join(rig::scenario::slug(cases[0].0));
    std::fs::create_dir_all(&flame).unwrap();
    for f in ["alloc", "copy", "syscalls"] {
        std::fs::write(
            flame.join(format!("{f}.svg")),
            format!(r#"<svg xmlns="http://www.w3.org/2000/svg" width="1200" height="60"><text>{f}</text></svg>"#),
        )
        .unwrap();
    }
    let page = rig::html::write(dir).unwrap();
    let driver = r#"<script>
(function () {
  var out = {};
  var t = document.querySelector("table.matrix");
  var ths = t.querySelectorAll("thead th"), col = -1;
  ths.forEach(function (th, i) { if (th.textContent.trim() === "allocs/req") col = i; });
  var order = function () {
    return Array.prototype.map.call(t.tBodies[0].rows, function (r) { return r.dataset.case; });
  };
  out.before = order();
  ths[col].click(); out.ascending = order();
  ths[col].click(); out.descending = order();
  var s = document.querySelector('select[data-filter="suite"]');
  s.value = "s2"; s.dispatchEvent(new Event("change"));
  out.shown = Array.prototype.filter.call(t.tBodies[0].rows, function (r) { return !r.hidden; })
    .map(function (r) { return r.dataset.case; });
  var box = document.querySelector(".flames");
  out.tab_before = Array.prototype.filter.call(box.querySelectorAll("iframe.flame"), function (f) { return !f.hidden; })
    .map(function (f) { return f.dataset.family; });
  box.querySelector('button.tab[data-family="copy"]').click();
  out.tab_after = Array.prototype.filter.call(box.querySelectorAll("iframe.flame"), function (f) { return !f.hidden; })
    .map(function (f) { return f.dataset.family; });
  out.tab_on = box.querySelector("button.tab.on").dataset.family;
  var pre = document.createElement("pre");
  pre.id = "driver"; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
</script></body>"#;
    let html = std::fs::read_to_string(&page).unwrap();
    assert_eq!(html.matches("</body>").count(), 1);
    let driven = dir.join("driven.html");
    std::fs::write(&driven, html.replace("</body>", driver)).unwrap();
    let p = load(&chrome, &driven, &shot("behaviour"));
    assert_clean(&p);
    let json = p
        .dom
        .split_once("<pre id=\"driver\">")
        .and_then(|(_, r)| r.split_once("</pre>"))
        .map(|(j, _)| j.replace("&quot;", "\""))
        .unwrap_or_else(|| panic!("the driver wrote nothing: {}", p.dom));
    let got: Value = serde_json::from_str(&json).unwrap();
    let ids = |v: &[&str]| serde_json::json!(v);
    let (a, b, c) = (cases[0].0, cases[1].0, cases[2].0);
    assert_eq!(got["before"], ids(&[a, b, c]), "{got:#}");
    assert_eq!(got["ascending"], ids(&[b, c, a]), "{got:#}");
    assert_eq!(got["descending"], ids(&[a, c, b]), "{got:#}");
    assert_eq!(got["shown"], ids(&[b]), "{got:#}");
    assert_eq!(got["tab_before"], ids(&["alloc"]), "{got:#}");
    assert_eq!(got["tab_after"], ids(&["copy"]), "{got:#}");
    assert_eq!(got["tab_on"], "copy", "{got:#}");
}

/// An interrupted run's skipped cases, one row for the run: the suite
/// filter keeps the row while one of the cases it lists is of the chosen
/// suite, shows only those cases in its list, and hides the row when none
/// is.
#[test]
fn a_row_of_skipped_cases_follows_the_suite_filter_by_the_cases_it_lists_in_chromium() {
    let Some(chrome) = chromium(test_name!()) else {
        return;
    };
    let d = scratch("skipped");
    let dir = d.path();
    let mut lines = format!("{}\n", handmade_case("s0/calib/a/#1", "s0", 8.0));
    for (i, s) in ["s1", "s2", "s2"].into_iter().enumerate() {
        let mut c = handmade_case(&format!("{s}/calib/p{i}/#1"), s, 0.0);
        c["status"] = "skipped".into();
        c["reasons"] = serde_json::json!(["rig was interrupted by SIGINT before this case"]);
        c.as_object_mut().unwrap().remove("clean");
        c.as_object_mut().unwrap().remove("counted");
        lines += &format!("{c}\n");
    }
    std::fs::write(dir.join("cases.jsonl"), lines).unwrap();
    std::fs::write(dir.join("manifest.json"), r#"{"rig_version": "t"}"#).unwrap();
    let page = rig::html::write(dir).unwrap();
    let driver = r#"<script>
(function () {
  var out = {};
  var row = document.querySelector("tr.skipped-run");
  var listed = function () {
    return Array.prototype.filter.call(row.querySelectorAll("li.case-row"), function (l) { return !l.hidden; })
      .map(function (l) { return l.dataset.suite; });
  };
  var s = document.querySelector('select[data-filter="suite"]');
  [["s2", "s2"], ["s0", "s0"], ["", "all"]].forEach(function (v) {
    s.value = v[0]; s.dispatchEvent(new Event("change"));
    out[v[1]] = {row: !row.hidden, listed: listed()};
  });
  var pre = document.createElement("pre");
  pre.id = "driver"; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
</script></body>"#;
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(
        html.contains(
            "<summary>3 cases skipped: rig was interrupted by SIGINT before this case</summary>"
        ),
        "{html}"
    );
    let driven = dir.join("driven.html");
    std::fs::write(&driven, html.replace("</body>", driver)).unwrap();
    let p = load(&chrome, &driven, &shot("skipped"));
    assert_clean(&p);
    let json = p
        .dom
        .split_once("<pre id=\"driver\">")
        .and_then(|(_, r)| r.split_once("</pre>"))
        .map(|(j, _)| j.replace("&quot;", "\""))
        .unwrap_or_else(|| panic!("the driver wrote nothing: {}", p.dom));
    let got: Value = serde_json::from_str(&json).unwrap();
    let want = serde_json::json!({
        "s2": {"row": true, "listed": ["s2", "s2"]},
        "s0": {"row": false, "listed": []},
        "all": {"row": true, "listed": ["s1", "s2", "s2"]},
    });
    assert_eq!(got, want, "{got:#}");
}
