//! `rig probe-cost` measures every probe kind on this host (no timing is
//! asserted: only that each was measured and reported).

use super::{probes_shared, rig_bin};

#[test]
fn probe_cost_measures_every_probe_kind() {
    root_or_skip!();
    let _g = probes_shared();
    let json = std::env::temp_dir().join(format!("rig-cost-{}.json", std::process::id()));
    let out = std::process::Command::new(rig_bin())
        .args([
            "probe-cost",
            "--iterations",
            "2000",
            "--rounds",
            "1",
            "--json",
        ])
        .arg(&json)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    std::fs::remove_file(&json).unwrap();
    let kinds: Vec<&str> = rows
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "malloc entry",
            "malloc return",
            "counting uprobe (uprobe_multi link, as on CPython's inlined pymalloc)",
            "free entry",
            "memcpy implementation entry",
            "pthread_mutex_lock entry",
            "pthread_mutex_lock return",
            "pthread_mutex_unlock entry",
            "USDT marker (--usdt)",
            "USDT marker by its string (--usdt …#1/2)",
            "USDT marker by its NUL-ended string (--usdt …#1)",
            "function entry (--func)",
            "syscall enter + exit",
            "Go runtime.mallocgc entry",
            "Go syscall enter + exit",
            "CPython syscall enter + exit",
            "CPython call by function (--usdt python:function__entry#1)",
            "CPython call by function (--interp-calls python)"
        ]
    );
    for r in rows.as_array().unwrap() {
        assert_eq!(
            r["clean_runs"].as_array().unwrap().len(),
            2,
            "A B B A: two runs per arm"
        );
        assert_eq!(r["probed_runs"].as_array().unwrap().len(), 2);
        assert!(r["ns_per_hit"].as_f64().unwrap().is_finite(), "{r}");
        // Each probed arm ran its BPF program (the kernel's run count was
        // not zero), with and without stacks: the Go rows too, whose
        // probe is on runtime.mallocgc in the Go executable and whose
        // stacks are walked through Go frames, and the CPython rows, whose
        // stacks also read 20 Python frames (and whose call marker fires
        // only under the fixture's profile function: one hit per call;
        // the call handler's probe counts the same calls without one;
        // the counting uprobe's runs are its own program's, read by id).
        assert!(r["program_ns"].as_f64().unwrap().is_finite(), "{r}");
        assert!(r["program_ns_stacks"].as_f64().unwrap().is_finite(), "{r}");
        let per = r["hits_per_iteration"].as_u64().unwrap();
        for n in r["program_runs"].as_array().unwrap() {
            assert!(n.as_u64().unwrap() >= 2000 * per, "{r}");
        }
        // The counting link (raw bpf(2), filtered by process) ran its
        // program once per malloc of the loop, no more.
        if r["kind"].as_str().unwrap().starts_with("counting uprobe") {
            assert_eq!(r["program_runs"], serde_json::json!([2000, 2000]), "{r}");
        }
        assert!(stdout.contains(r["kind"].as_str().unwrap()));
    }
}
