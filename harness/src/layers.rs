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
    ("interrupt", &[]),
    ("fsutil", &[]),
    ("usage", &[]),
    ("host", &[]),
    ("scenario", &[]),
    ("stats", &[]),
    ("process", &[]),
    ("symbolize", &["process"]),
    // Stages.
    ("load", &["interrupt"]),
    ("launch", &["fsutil", "interrupt", "process"]),
    ("sample", &["launch", "process"]),
    ("probe", &["host", "interrupt", "process", "symbolize"]),
    // What a window becomes.
    (
        "report",
        &["fsutil", "host", "load", "probe", "process", "symbolize"],
    ),
    ("metrics", &["probe", "report", "scenario", "symbolize"]),
    // report.html of an output directory, from its files.
    ("html", &["fsutil", "load", "metrics", "scenario"]),
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
            "report",
            "sample",
            "scenario",
            "symbolize",
            "window",
        ],
    ),
    // Commands.
    (
        "session",
        &[
            "launch",
            "load",
            "probe",
            "process",
            "report",
            "symbolize",
            "window",
        ],
    ),
    // `rig flame`, and the flamegraphs of output directories.
    ("flamegraph", &["fsutil", "report", "scenario"]),
    (
        "run",
        &[
            "case",
            "html",
            "launch",
            "load",
            "metrics",
            "probe",
            "report",
            "scenario",
            "symbolize",
        ],
    ),
    (
        "ab",
        &[
            "case",
            "fsutil",
            "html",
            "launch",
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
            "host",
            "html",
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
    // Flags into settings, settings into a command.
    (
        "cli",
        &[
            "ab",
            "exit",
            "flamegraph",
            "fsutil",
            "gate",
            "host",
            "html",
            "interrupt",
            "launch",
            "load",
            "probe",
            "report",
            "run",
            "scenario",
            "session",
            "usage",
            "window",
        ],
    ),
];

/// The crate modules `text` names (`crate::x`).
fn uses(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (i, _) in text.match_indices("crate::") {
        let rest = &text[i + "crate::".len()..];
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_lowercase() || *c == '_')
            .collect();
        // `crate::name!` is a macro exported at the root, not a module.
        let is_macro = rest[name.len()..].starts_with('!');
        if !name.is_empty() && !is_macro {
            out.insert(name);
        }
    }
    out
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
        if ["lib", "main", "layers"].contains(&module.as_str()) {
            continue;
        }
        let Some((_, allowed)) = LAYERS.iter().find(|(m, _)| *m == module) else {
            panic!("module `{module}` is not in LAYERS: give it a tier");
        };
        seen.insert(module.clone());
        for used in uses(&std::fs::read_to_string(&f).unwrap()) {
            if used != module && !allowed.contains(&used.as_str()) {
                wrong.push(format!("{} uses crate::{used}", rel.display()));
            }
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
