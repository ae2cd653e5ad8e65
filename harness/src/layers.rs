//! The import direction, checked: every module of the crate may use only
//! the modules listed for it in [`LAYERS`], and each of those comes earlier
//! in the table, so the graph has no cycle and nothing imports upward (no
//! stage imports a command, nothing but `cli` imports a command or `cli`).
//!
//! Tiers, bottom up: leaves (pure data and /proc readers), stages (launch,
//! load, sample, probe), the report schema and metrics built from windows,
//! the fixed-count window, the case runner, the commands, and `cli`.

use std::collections::BTreeSet;
use std::path::Path;

/// (module, the crate modules it may use), in dependency order.
const LAYERS: &[(&str, &[&str])] = &[
    // Leaves.
    ("exit", &[]),
    ("console", &[]),
    ("interrupt", &["exit"]),
    ("fsutil", &[]),
    ("usage", &[]),
    ("host", &[]),
    ("funchash", &[]),
    ("gitfacts", &[]),
    ("scenario", &["fsutil"]),
    ("stats", &[]),
    ("process", &[]),
    ("elf", &["process"]),
    // The one place that knows each runtime: below every stage that asks
    // it (probe, symbolize, report) and above nothing but the ELF reader.
    ("runtime", &["elf", "process"]),
    ("symbolize", &["elf", "process", "runtime"]),
    // Stages.
    ("load", &["interrupt"]),
    ("launch", &["fsutil", "interrupt", "process"]),
    ("sample", &["launch", "process"]),
    (
        "probe",
        &[
            "elf",
            "host",
            "interrupt",
            "process",
            "runtime",
            "symbolize",
        ],
    ),
    // What a window becomes.
    (
        "report",
        &[
            "elf",
            "fsutil",
            "host",
            "load",
            "probe",
            "process",
            "runtime",
            "stats",
            "symbolize",
        ],
    ),
    (
        "metrics",
        &[
            "probe",
            "report",
            "runtime",
            "scenario",
            "stats",
            "symbolize",
        ],
    ),
    // The result files (cases.jsonl, manifest.json, ab.json, gate.json)
    // read back as typed views, for report.html and `rig compare`.
    ("results", &["metrics"]),
    // report.html of an output directory, from its files.
    (
        "html",
        &["fsutil", "load", "metrics", "results", "scenario", "stats"],
    ),
    // The fixed-count window.
    (
        "window",
        &[
            "fsutil",
            "interrupt",
            "launch",
            "load",
            "metrics",
            "probe",
            "process",
        ],
    ),
    // The case runner (`rig run`, `rig ab`, `rig gate`).
    (
        "case",
        &[
            "interrupt",
            "launch",
            "load",
            "metrics",
            "probe",
            "process",
            "report",
            "sample",
            "scenario",
            "stats",
            "symbolize",
            "window",
        ],
    ),
    // Commands.
    (
        "session",
        &[
            "interrupt",
            "launch",
            "load",
            "probe",
            "process",
            "report",
            "symbolize",
            "usage",
            "window",
        ],
    ),
    // `rig flame`, and the flamegraphs of output directories.
    (
        "flamegraph",
        &["console", "exit", "fsutil", "report", "scenario"],
    ),
    (
        "run",
        &[
            "case",
            "exit",
            "flamegraph",
            "gitfacts",
            "html",
            "interrupt",
            "launch",
            "load",
            "metrics",
            "probe",
            "report",
            "scenario",
            "stats",
            "symbolize",
        ],
    ),
    (
        "ab",
        &[
            "case",
            "exit",
            "flamegraph",
            "fsutil",
            "gitfacts",
            "html",
            "launch",
            "load",
            "metrics",
            "probe",
            "report",
            "scenario",
            "stats",
            "symbolize",
        ],
    ),
    (
        "gate",
        &[
            "case",
            "exit",
            "fsutil",
            "gitfacts",
            "host",
            "html",
            "interrupt",
            "launch",
            "metrics",
            "probe",
            "report",
            "scenario",
            "stats",
            "symbolize",
            "window",
        ],
    ),
    // Result directories over builds, and the commit where a counter moved.
    (
        "compare",
        &[
            "exit", "fsutil", "funchash", "gitfacts", "html", "launch", "metrics", "results",
            "stats",
        ],
    ),
    (
        "bisect",
        &[
            "compare", "exit", "funchash", "gitfacts", "launch", "probe", "run", "scenario",
            "stats",
        ],
    ),
    // The small commands (attach and demo output, instructions,
    // probe-cost, check-config, funcdiff, probes, report).
    (
        "commands",
        &[
            "elf",
            "exit",
            "flamegraph",
            "fsutil",
            "funchash",
            "host",
            "html",
            "interrupt",
            "launch",
            "probe",
            "process",
            "report",
            "scenario",
            "session",
            "stats",
            "window",
        ],
    ),
    // Flags into settings, settings into a command.
    (
        "cli",
        &[
            "ab",
            "bisect",
            "commands",
            "compare",
            "exit",
            "flamegraph",
            "fsutil",
            "gate",
            "gitfacts",
            "interrupt",
            "launch",
            "load",
            "probe",
            "process",
            "run",
            "scenario",
            "session",
            "usage",
            "window",
        ],
    ),
];

/// The crate modules `text` names: `crate::x`, and every first segment of
/// a group, `crate::{x, y::{z, w}}` (x and y). Without the groups, one
/// `use crate::{..}` line could import upward unseen.
fn uses(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (i, _) in text.match_indices("crate::") {
        let rest = text[i + "crate::".len()..].trim_start();
        match rest.strip_prefix('{') {
            Some(group) => {
                for item in top_level_items(group) {
                    add_module(item, &mut out);
                }
            }
            None => add_module(rest, &mut out),
        }
    }
    out
}

/// The module a path starts with, unless it is `self`, a type or a macro
/// exported at the root (`crate::name!`).
fn add_module(path: &str, out: &mut BTreeSet<String>) {
    let path = path.trim_start();
    let name: String = path
        .chars()
        .take_while(|c| c.is_ascii_lowercase() || *c == '_')
        .collect();
    let is_macro = path[name.len()..].starts_with('!');
    if !name.is_empty() && name != "self" && !is_macro {
        out.insert(name);
    }
}

/// The comma-separated items of a group whose `{` was just read, up to its
/// closing `}`; braces of nested groups stay inside their item.
fn top_level_items(group: &str) -> Vec<&str> {
    let mut items = Vec::new();
    let (mut depth, mut start) = (0usize, 0);
    for (i, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => {
                items.push(&group[start..i]);
                return items;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&group[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    // An unclosed group (a string, a comment): what was read still counts.
    items.push(&group[start..]);
    items
}

/// The imports of `module`'s file `text` that its row of [`LAYERS`] does
/// not allow.
fn against_layers(module: &str, text: &str) -> Vec<String> {
    let Some((_, allowed)) = LAYERS.iter().find(|(m, _)| *m == module) else {
        panic!("module `{module}` is not in LAYERS: give it a tier");
    };
    uses(text)
        .into_iter()
        // `testkit` is compiled only for unit tests, so a test's use of it
        // is no edge of the product's graph.
        .filter(|used| used != module && used != "testkit" && !allowed.contains(&used.as_str()))
        .collect()
}

fn sources(p: &Path, out: &mut Vec<std::path::PathBuf>) {
    if p.is_dir() {
        for e in std::fs::read_dir(p).unwrap() {
            sources(&e.unwrap().path(), out);
        }
    } else if p.extension().is_some_and(|e| e == "rs") {
        out.push(p.to_path_buf());
    }
}

#[test]
fn the_layer_table_is_in_dependency_order() {
    for (i, (m, deps)) in LAYERS.iter().enumerate() {
        for d in *deps {
            let j = LAYERS.iter().position(|(n, _)| n == d);
            assert!(
                j.is_some_and(|j| j < i),
                "`{m}` may use `{d}`, which must come before it in LAYERS"
            );
        }
    }
}

#[test]
fn no_module_imports_upward() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let mut seen = BTreeSet::new();
    let mut wrong = Vec::new();
    for f in files {
        let rel = f.strip_prefix(&src).unwrap();
        let top = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy();
        let module = top.trim_end_matches(".rs").to_string();
        if ["lib", "main", "layers", "testkit"].contains(&module.as_str()) {
            continue;
        }
        seen.insert(module.clone());
        for used in against_layers(&module, &std::fs::read_to_string(&f).unwrap()) {
            wrong.push(format!("{} uses crate::{used}", rel.display()));
        }
    }
    assert!(
        wrong.is_empty(),
        "imports against the layers:\n{}",
        wrong.join("\n")
    );
    assert_eq!(seen.len(), LAYERS.len(), "every module in LAYERS exists");
}

#[test]
fn finds_the_modules_a_file_names() {
    let text = "use crate::probe::{Family};\nlet x = crate::launch::start::launch(s);";
    assert_eq!(
        uses(text).into_iter().collect::<Vec<_>>(),
        ["launch", "probe"]
    );
}

#[test]
fn finds_the_modules_of_grouped_and_nested_imports() {
    let text = "use crate::{\n    probe::{Family, Scope},\n    launch,\n    self,\n};\n\
                use crate::report::{table, Attribution};\ncrate::root_or_skip!();";
    assert_eq!(
        uses(text).into_iter().collect::<Vec<_>>(),
        ["launch", "probe", "report"]
    );
}

/// A stage that imports a command is caught, written either way.
#[test]
fn an_upward_import_fails_the_check_grouped_or_not() {
    assert_eq!(
        against_layers("probe", "use crate::gate::GateReport;"),
        ["gate"]
    );
    assert_eq!(
        against_layers("probe", "use crate::{process::Pid, run::{Status, table}};"),
        ["run"]
    );
    assert_eq!(
        against_layers("load", "use crate::{interrupt, cli::{Cli}};"),
        ["cli"]
    );
    assert!(against_layers("probe", "use crate::{host, process::{self, Pid}};").is_empty());
}
