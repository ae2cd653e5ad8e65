//! The `rig ab` and `rig gate` parts of the page, from `ab.json` /
//! `gate.json` and the cases of the run.

use serde_json::{json, Value};

use super::cases::fmt;
use super::Inputs;

fn num(v: &Value) -> String {
    v.as_f64().map_or_else(|| "—".to_string(), fmt)
}

fn short(sha: &Value) -> String {
    sha.as_str()
        .map_or(String::new(), |s| s.chars().take(12).collect())
}

/// `PATH sha256 0123456789ab…` of one verified or expected object.
fn object_line(o: &Value) -> String {
    format!(
        "{} sha256 {}…",
        o["path"].as_str().unwrap_or_default(),
        short(&o["sha256"])
    )
}

/// Which objects each launch of each arm proved it mapped.
fn proofs(cases: &[Value]) -> Vec<Value> {
    let mut out = Vec::new();
    for c in cases {
        for pass in ["clean", "counted"] {
            let l = &c[pass]["launch"];
            let Some(p) = l["arm_proof"].as_object() else {
                continue;
            };
            let objects: Vec<String> = p["verified"]
                .as_array()
                .into_iter()
                .flatten()
                .map(object_line)
                .collect();
            out.push(json!({
                "case": c["id"], "target": c["target_name"], "pass": pass, "pid": l["pid"],
                "processes": p["processes"], "objects": objects,
            }));
        }
    }
    out
}

pub fn ab(inp: &Inputs) -> Value {
    let s = &inp.summary;
    let arms: Vec<String> = s["arms"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|a| a.as_str().map(String::from))
        .collect();
    let expected: Vec<Value> = inp.manifest["arms"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|a| {
            json!({
                "name": a["name"],
                "objects": a["expected_objects"].as_array().into_iter().flatten()
                    .map(object_line)
                    .collect::<Vec<_>>(),
            })
        })
        .collect();
    let metrics: Vec<Value> = s["metrics"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| metric(m, &arms))
        .collect();
    let sites: Vec<Value> = s["code_differences"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|d| {
            json!({
                "case": d["case"],
                "sites": d["sites"].as_array().into_iter().flatten().map(|x| json!({
                    "site": x[0],
                    "medians": x[1].as_array().into_iter().flatten().map(num).collect::<Vec<_>>(),
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    json!({
        "arms": arms, "expected": expected, "proofs": proofs(&inp.cases),
        "rounds": s["rounds"], "order": s["order"], "interrupted": s["interrupted"],
        "failed_runs": s["failed_runs"], "equality": s["equality"], "evidence": s["evidence"],
        "metrics": metrics, "code_differences": sites, "drift": s["drift"], "verdict": s["verdict"],
    })
}

/// One metric of `ab.json`: each arm's raw values, and every arm after the
/// first against the first.
fn metric(m: &Value, arms: &[String]) -> Value {
    let raw: Vec<String> = m["values"]
        .as_array()
        .into_iter()
        .flatten()
        .zip(arms)
        .map(|(v, arm)| {
            let vals: Vec<String> = v.as_array().into_iter().flatten().map(num).collect();
            format!("{arm}: {}", vals.join(" "))
        })
        .collect();
    let vs: Vec<Value> = m["vs_first"]
        .as_array()
        .into_iter()
        .flatten()
        .zip(arms.iter().skip(1))
        .map(|(c, arm)| {
            json!({
                "arm": arm,
                "a_median": num(&c["a_median"]), "b_median": num(&c["b_median"]),
                "diff": num(&c["diff_median"]),
                "rel": c["rel"].as_f64().map(|r| format!("{:+.1}%", r * 100.0)),
                "ci": c["ci"].as_object().map(|i| format!("[{}, {}]",
                    num(&i["lo"]), num(&i["hi"]))),
                "p": c["p_value"].as_f64().map(|p| format!("{p:.3}")),
                "verdict": c["verdict"], "reason": c["reason"],
            })
        })
        .collect();
    json!({
        "case": m["case"], "metric": m["metric"], "unit": m["unit"],
        "exact": m["exact"], "control": m["control"], "raw": raw, "vs": vs,
    })
}

pub fn gate(g: &Value) -> Value {
    let breaches: Vec<&str> = g["breaches"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let observed = |name: &str| {
        g["observed"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|o| o["name"] == name)
            .cloned()
            .unwrap_or(Value::Null)
    };
    let rows: Vec<Value> = g["rows"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| {
            let name = r["counter"].as_str().unwrap_or_default();
            let o = observed(name);
            let verdict = r["verdict"].as_str().unwrap_or_default();
            // A breach, or a new site the baseline's `max_new_sites` refused.
            let breach = verdict.ends_with("breach")
                || breaches.iter().any(|b| b.contains(&format!("{name}: ")));
            json!({
                "counter": name,
                // A counter that names a call site: a breach there is the
                // site to look at first.
                "site": name.contains(" @ "),
                "baseline": num(&r["baseline"]), "now": num(&r["now"]), "limit": r["limit"],
                "verdict": verdict, "breach": breach, "note": r["note"],
                "runs": o["values"].as_array().into_iter().flatten().map(num).collect::<Vec<_>>(),
                "deterministic": o["deterministic"],
            })
        })
        .collect();
    let breaching_sites: Vec<&Value> = rows
        .iter()
        .filter(|r| r["breach"] == true && r["site"] == true)
        .collect();
    json!({
        "passed": g["breaches"].as_array().is_none_or(Vec::is_empty),
        "baseline": g["baseline"], "target": g["target"], "binary": g["binary"],
        "repeats": g["repeats"], "requests": g["requests"], "breaches": g["breaches"],
        "breaching_sites": breaching_sites, "rows": rows,
    })
}
