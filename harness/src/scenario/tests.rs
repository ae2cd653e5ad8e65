use super::*;

/// The cases of `text` for one target, `peer`, and one round.
fn peer_cases(text: &str) -> Vec<Case> {
    let m = Matrix::parse("t.toml", text).unwrap();
    m.expand(&[], &["peer".into()], Some(1)).unwrap()
}

fn ids(cases: &[Case]) -> Vec<&str> {
    cases.iter().map(|c| c.id.as_str()).collect()
}

/// Why `text` with `from` replaced by `to` is refused.
fn refusal(text: &str, from: &str, to: &str) -> String {
    Matrix::parse("t.toml", &text.replace(from, to))
        .unwrap_err()
        .to_string()
}

/// `cases.jsonl` keeps its flat shape: a kind's missing settings are
/// null, a memory case's TLS listener is protocol h2-tls.
#[test]
fn a_case_serializes_flat() {
    let text = M.replace(
        "kind = \"memory\"",
        "kind = \"memory\"\nlisteners = [\"plain\", \"tls\"]",
    );
    let cases = peer_cases(&text);
    let json = |id_part: &str| {
        let c = cases.iter().find(|c| c.id.contains(id_part)).unwrap();
        serde_json::to_value(c).unwrap()
    };
    let tls = json("/tls/");
    assert_eq!(tls["kind"], "memory");
    assert_eq!(tls["protocol"], "h2-tls");
    assert!(tls["path"].is_null() && tls["topology"].is_null() && tls["load"].is_null());
    assert_eq!(tls["keepalive"], true);
    let h = json("/h1/");
    assert_eq!(h["kind"], "http");
    assert_eq!(h["protocol"], "h1");
    assert!(h["path"].is_string(), "{h}");
    assert!(h["topology"]["connections"].is_u64(), "{h}");
    for key in [
        "id",
        "suite",
        "target",
        "target_name",
        "repeat",
        "warmup_ms",
    ] {
        assert!(!h[key].is_null(), "{key}: {h}");
    }
}

#[test]
fn a_slug_is_one_file_name() {
    assert_eq!(
        slug("http/peer/h1/plain/r1000/16x1/ka/#1"),
        "http_peer_h1_plain_r1000_16x1_ka_1"
    );
    assert_eq!(slug("memory/a b/#2"), "memory_a_b_2");
    assert_eq!(slug("../x"), "x");
}

const M: &str = r#"
[defaults]
repeats = 2

[[suite]]
name = "memory"
kind = "memory"

[[suite]]
name = "http"
kind = "http"
protocols = ["h1"]
paths = ["/plain", "/json"]
rates = [1000.0]
topologies = ["4"]
keepalive = [true, false]
"#;

#[test]
fn expands_rounds_with_target_order_reversed() {
    let m = Matrix::parse("m.toml", M).unwrap();
    let cases = m.expand(&[], &["a".into(), "b".into()], None).unwrap();
    // 2 rounds × (memory 2 targets + http 2 paths × 2 keepalive × 2 targets)
    assert_eq!(cases.len(), 2 * (2 + 8));
    assert_eq!(cases[0].id, "memory/a/plain/#1");
    assert_eq!(cases[1].id, "memory/b/plain/#1");
    assert_eq!(cases[10].id, "memory/b/plain/#2");
    assert_eq!(cases[11].id, "memory/a/plain/#2");
    assert_eq!(cases[2].id, "http/a/h1/plain/r1000/4x1/ka/#1");
    assert_eq!(cases[4].id, "http/a/h1/plain/r1000/4x1/new/#1");
}

#[test]
fn explains_errors_with_their_line() {
    let e = Matrix::parse("m.toml", "[[suite]]\nname = \"x\"\nkind = \"htp\"\n").unwrap_err();
    let s = e.to_string();
    assert!(s.starts_with("m.toml:3:"), "{s}");
    let e = Matrix::parse(
        "m.toml",
        "[[suite]]\nname = \"h\"\nkind = \"http\"\nprotocols=[\"h1\"]\npaths=[\"/\"]\ntopologies=[\"2x8\"]\n",
    )
    .unwrap_err();
    assert!(
        e.to_string()
            .contains("HTTP/1.1 carries one request at a time"),
        "{e}"
    );
    let m = Matrix::parse("m.toml", M).unwrap();
    let e = m.expand(&["nope".into()], &["a".into()], None).unwrap_err();
    assert_eq!(
        e.to_string(),
        "--suite nope: no such suite in the matrix (have: memory, http)"
    );
}

/// Valid TOML a line-by-line reader misplaces: spaces in headers,
/// quoted keys, suites as an inline array, a value on a later line.
#[test]
fn suite_level_errors_carry_the_position_the_parser_gives() {
    let pos = |text: &str| {
        let e = Matrix::parse("m.toml", text).unwrap_err().to_string();
        e.split(':').skip(1).take(2).collect::<Vec<_>>().join(":")
    };
    let suite = "name = \"a\"\nkind = \"http\"\nprotocols = [\"h1\"]\npaths = [\"/\"]\n";
    assert_eq!(
        pos(&format!(
            "[ defaults ]\n# x\n  \"duration_ms\" = 0\n[[ suite ]]\n{suite}topologies = [\"1\"]\n"
        )),
        "3:3"
    );
    assert_eq!(
        pos(&format!(
            "[[suite]]\n{suite}topologies = [\"1\"]\n[[ suite ]]\n{}\n  rates = []\ntopologies = [\"1\"]\n",
            suite.replace("\"a\"", "\"b\"")
        )),
        "13:3"
    );
    assert_eq!(
        pos("suite = [\n  { name = \"a\", kind = \"http\", protocols = [\"h1\"], paths = [\"/\"], topologies = [\"1\"], rates = [1e12] },\n]\n"),
        "2:87"
    );
    assert_eq!(
        pos(&format!(
            "[[suite]]\n{suite}topologies = [\"1\"]\n\n[[suite]]\n{suite}topologies = [\"1\"]\n"
        )),
        "9:1"
    );
}

#[test]
fn parses_topologies() {
    assert_eq!(
        Topology::parse("4x16"),
        Some(Topology {
            connections: 4,
            streams: 16
        })
    );
    assert_eq!(
        Topology::parse("8"),
        Some(Topology {
            connections: 8,
            streams: 1
        })
    );
    assert_eq!(Topology::parse("0x1"), None);
    assert_eq!(Topology::parse("x"), None);
}

const MEMSLOPE: &str = r#"
[[suite]]
name = "ms"
kind = "memslope"
protocols = ["h1", "h2c"]
paths = ["/plain"]
connections = [0, 32, 64]
"#;

#[test]
fn a_memslope_suite_is_a_case_per_protocol_and_path_with_its_tiers() {
    let cases = peer_cases(MEMSLOPE);
    assert_eq!(
        ids(&cases),
        vec![
            "ms/peer/h1/plain/c0-32-64/#1",
            "ms/peer/h2c/plain/c0-32-64/#1"
        ]
    );
    let j = serde_json::to_value(&cases[1]).unwrap();
    assert_eq!(j["kind"], "memslope");
    assert_eq!(j["protocol"], "h2c");
    assert_eq!(j["path"], "/plain");
    assert_eq!(j["connections"], serde_json::json!([0, 32, 64]));
    assert!(j["topology"].is_null() && j["load"].is_null());
}

#[test]
fn a_memslope_suite_needs_three_ascending_tiers() {
    for (tiers, says) in [
        ("[0, 32]", "give at least 3"),
        ("[0, 64, 32]", "tiers must ascend: 64 then 32"),
        ("[0, 32, 32]", "tiers must ascend: 32 then 32"),
    ] {
        let e = refusal(MEMSLOPE, "[0, 32, 64]", tiers);
        assert!(e.starts_with("t.toml:7:"), "{e}");
        assert!(e.contains(says), "{tiers}: {e}");
    }
    let e = refusal(MEMSLOPE, "paths = [\"/plain\"]\n", "");
    assert!(e.contains("a memslope suite needs protocols, paths"), "{e}");
}

const RECOVERY: &str = r#"
[[suite]]
name = "rec"
kind = "recovery"
protocols = ["h2c"]
paths = ["/plain"]
rates = [500.0]
topologies = ["4x16"]
cycles = 5
"#;

#[test]
fn a_recovery_suite_is_a_case_per_protocol_rate_topology_and_close() {
    let cases = peer_cases(RECOVERY);
    assert_eq!(
        ids(&cases),
        vec![
            "rec/peer/h2c/plain/r500/4x16/graceful/x5/#1",
            "rec/peer/h2c/plain/r500/4x16/abrupt/x5/#1"
        ]
    );
    let j = serde_json::to_value(&cases[1]).unwrap();
    assert_eq!(
        (&j["kind"], &j["close"], &j["cycles"]),
        (&"recovery".into(), &"abrupt".into(), &5.into())
    );
    assert_eq!(
        j["topology"],
        serde_json::json!({"connections": 4, "streams": 16})
    );
    for (from, to, says) in [
        ("cycles = 5", "cycles = 1", "give at least 2"),
        ("rates = [500.0]\n", "", "a recovery suite needs rates"),
    ] {
        let e = refusal(RECOVERY, from, to);
        assert!(e.contains(says), "{e}");
    }
}

const SOAK: &str = r#"
[[suite]]
name = "soak"
kind = "soak"
protocols = ["h1", "h2c"]
paths = ["/plain"]
rates = [500.0]
topologies = ["4"]
duration_ms = 60000
interval_ms = 10000
"#;

#[test]
fn a_soak_suite_is_a_case_per_protocol_rate_and_topology_with_its_interval() {
    let cases = peer_cases(SOAK);
    assert_eq!(
        ids(&cases),
        vec![
            "soak/peer/h1/plain/r500/4x1/i10000ms/#1",
            "soak/peer/h2c/plain/r500/4x1/i10000ms/#1"
        ]
    );
    let CaseKind::Soak(k) = &cases[0].what else {
        panic!("{:?}", cases[0].what);
    };
    assert_eq!(k.intervals(cases[0].duration_ms), 6);
    let j = serde_json::to_value(&cases[1]).unwrap();
    assert_eq!(
        (&j["kind"], &j["interval_ms"], &j["duration_ms"]),
        (&"soak".into(), &10000.into(), &60000.into())
    );
    assert_eq!(
        j["load"],
        serde_json::json!({"kind": "open", "rate": 500.0})
    );
    for (from, to, says) in [
        ("rates = [500.0]\n", "", "a soak suite needs rates"),
        (
            "interval_ms = 10000\n",
            "",
            "a soak suite needs interval_ms",
        ),
        (
            "interval_ms = 10000",
            "interval_ms = 40000",
            "at least two whole intervals",
        ),
        (
            "interval_ms = 10000",
            "interval_ms = 0",
            "at least two whole intervals",
        ),
    ] {
        let e = refusal(SOAK, from, to);
        assert!(e.contains(says), "{from} -> {to}: {e}");
    }
    let http = SOAK
        .replace("kind = \"soak\"", "kind = \"http\"")
        .replace("name = \"soak\"", "name = \"h\"");
    let e = Matrix::parse("t.toml", &http).unwrap_err().to_string();
    assert!(e.contains("interval_ms belongs to soak suites"), "{e}");
}

#[test]
fn a_memslope_suite_takes_live_connections_besides_http() {
    let text = r#"
[[suite]]
name = "ms"
kind = "memslope"
protocols = ["h1"]
paths = ["/plain"]
live = ["ws", "sse"]
connections = [0, 32, 64]
"#;
    let cases = peer_cases(text);
    assert_eq!(
        ids(&cases),
        vec![
            "ms/peer/h1/plain/c0-32-64/#1",
            "ms/peer/ws/c0-32-64/#1",
            "ms/peer/sse/c0-32-64/#1"
        ]
    );
    let j = serde_json::to_value(&cases[1]).unwrap();
    assert_eq!(
        (&j["live_protocol"], &j["path"], &j["protocol"]),
        (
            &"ws".into(),
            &serde_json::Value::Null,
            &serde_json::Value::Null
        )
    );
    let live_only = text.replace("protocols = [\"h1\"]\npaths = [\"/plain\"]\n", "");
    assert_eq!(peer_cases(&live_only).len(), 2);
    let e = refusal(text, "paths = [\"/plain\"]\n", "");
    assert!(e.contains("a memslope suite needs protocols, paths"), "{e}");
}

/// The count `expand` checks first is the number of cases it makes, for
/// every kind of suite, targets and repeats included.
#[test]
fn the_case_count_is_what_expand_makes() {
    let http = M
        .replace(
            "kind = \"memory\"",
            "kind = \"memory\"\nlisteners = [\"plain\", \"tls\"]",
        )
        // Each h1 runs every keep-alive setting, a repeated one too.
        .replace("[\"h1\"]", "[\"h1\", \"h2c\", \"h1\"]");
    let m = Matrix::parse("t.toml", &(http + MEMSLOPE + RECOVERY + SOAK + LIVE)).unwrap();
    let kinds: Vec<SuiteKind> = m.suites.iter().map(|s| s.plan.kind()).collect();
    use SuiteKind::*;
    assert_eq!(kinds, [Memory, Http, Memslope, Recovery, Soak, Live]);
    for (targets, repeats) in [(1, 1), (2, 3)] {
        let names: Vec<String> = (0..targets).map(|t| format!("t{t}")).collect();
        let cases = m.expand(&[], &names, Some(repeats)).unwrap();
        assert_eq!(
            m.case_count(&[], targets, repeats).unwrap(),
            cases.len() as u64
        );
    }
}

const LIVE: &str = r#"
[[suite]]
name = "live"
kind = "live"
live = ["tcp", "ws", "sse"]
connections = [32, 128]
"#;

/// Each suite is the plan of its kind, its settings typed: topologies
/// parsed, an http suite without rates a closed loop, a soak suite's
/// interval there.
#[test]
fn each_suite_parses_into_the_plan_of_its_kind() {
    let http = M.replace("rates = [1000.0]\n", "");
    let m = Matrix::parse("t.toml", &(http + RECOVERY + SOAK + LIVE)).unwrap();
    let four = Topology {
        connections: 4,
        streams: 1,
    };
    assert_eq!(
        m.suites[1].plan,
        Plan::Http {
            requests: Requests {
                protocols: vec![Proto::H1],
                paths: vec!["/plain".into(), "/json".into()],
                loads: vec![LoadShape::Closed],
                topologies: vec![four],
            },
            keepalive: vec![true, false],
        }
    );
    let Plan::Soak {
        requests,
        interval_ms: 10000,
    } = &m.suites[3].plan
    else {
        panic!("{:?}", m.suites[3].plan);
    };
    assert_eq!(
        (&requests.loads, &requests.topologies),
        (&vec![500.0], &vec![four])
    );
    assert_eq!(
        m.suites[4].plan,
        Plan::Live {
            protocols: vec![LiveProto::Tcp, LiveProto::Ws, LiveProto::Sse],
            tiers: vec![32, 128],
            cycles: 3,
            message_ms: 100,
        }
    );
}

/// 1000 paths × 1000 rates × 100 topologies × 2 keep-alive settings: 200
/// million cases, refused by counting (nothing allocated), naming the
/// count, the axes and the axis to cut; an overflowing product too.
#[test]
fn a_matrix_of_millions_of_cases_is_refused_with_its_axes_before_expanding() {
    let list = |n: usize, f: &dyn Fn(usize) -> String| (0..n).map(f).collect::<Vec<_>>().join(", ");
    let text = format!(
        "[[suite]]\nname = \"big\"\nkind = \"http\"\nprotocols = [\"h1\"]\npaths = [{}]\n\
         rates = [{}]\ntopologies = [{}]\nkeepalive = [true, false]\n",
        list(1000, &|i| format!("\"/p{i}\"")),
        list(1000, &|i| format!("{}", i + 1)),
        list(100, &|i| format!("\"{}\"", i + 1)),
    );
    let m = Matrix::parse("big.toml", &text).unwrap();
    let e = m
        .expand(&[], &["t".into()], Some(1))
        .unwrap_err()
        .to_string();
    assert!(e.contains("200000000 cases"), "{e}");
    assert!(
        e.contains("(1 protocols × 2 keepalive × 1000 paths × 1000 rates × 100 topologies)"),
        "{e}"
    );
    assert!(e.contains("cut `paths` (1000 values)"), "{e}");
    assert!(e.contains(&format!("more than the {MAX_CASES}")), "{e}");
    let e = m.case_count(&[], 1000, u32::MAX).unwrap_err().to_string();
    assert!(e.contains("more than 18446744073709551615 cases"), "{e}");
    assert!(e.contains("1000 targets, 4294967295 repeats"), "{e}");
}

/// Validation reads the file's spans once, whatever the number of
/// suites: a duplicate name among thousands is still found with its line.
#[test]
fn thousands_of_suites_validate_and_a_late_duplicate_keeps_its_line() {
    let suite = |i: usize| {
        format!("[[suite]]\nname = \"s{i}\"\nkind = \"http\"\nprotocols = [\"h1\"]\npaths = [\"/\"]\ntopologies = [\"1\"]\n")
    };
    let mut text: String = (0..3000).map(suite).collect();
    let m = Matrix::parse("t.toml", &text).unwrap();
    assert_eq!(m.suites.len(), 3000);
    text.push_str(&suite(7));
    let e = Matrix::parse("t.toml", &text).unwrap_err().to_string();
    // Suite 7 starts on line 43 (6 lines a suite); the copy is suite 3000.
    assert!(e.starts_with("t.toml:18002:1:"), "{e}");
    assert!(e.contains("the other is at line 44"), "{e}");
}
