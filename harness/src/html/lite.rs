//! One `cases.jsonl` line, read for the page only.
//!
//! A counted pass's attribution holds every stack of the window with every
//! frame named: tens of MB per case for a real server. The page needs the
//! user site of each stack and the stack rows; everything else of the
//! attribution is skipped while parsing (never built as JSON values), so the
//! page of a long run is built in bounded memory and time.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// A line: its `counted` pass read as [`Counted`], every other field as
/// JSON. By hand, not `#[serde(flatten)]`, which buffers each field once
/// more before it is read: a third of the page's time for an interrupted
/// run of 2000 cases.
struct Line {
    counted: Option<Counted>,
    rest: Map<String, Value>,
}

impl<'de> Deserialize<'de> for Line {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Line, D::Error> {
        struct Fields;
        impl<'de> serde::de::Visitor<'de> for Fields {
            type Value = Line;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a case object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut m: A) -> Result<Line, A::Error> {
                let mut line = Line {
                    counted: None,
                    rest: Map::new(),
                };
                while let Some(k) = m.next_key::<String>()? {
                    if k == "counted" {
                        line.counted = m.next_value()?;
                    } else {
                        line.rest.insert(k, m.next_value()?);
                    }
                }
                Ok(line)
            }
        }
        d.deserialize_map(Fields)
    }
}

#[derive(Deserialize)]
struct Counted {
    #[serde(default)]
    load: Value,
    #[serde(default)]
    per_request: Value,
    #[serde(default)]
    launch: Value,
    attribution: Option<Attribution>,
}

#[derive(Deserialize)]
struct Attribution {
    #[serde(default)]
    complete: Value,
    #[serde(default)]
    window: Value,
    #[serde(default)]
    losses: Value,
    #[serde(default)]
    processes: Value,
    #[serde(default)]
    stacks: Option<Stacks>,
}

#[derive(Deserialize)]
struct Stacks {
    #[serde(default)]
    stacks: BTreeMap<String, Stack>,
    #[serde(default)]
    kernel: BTreeMap<String, Vec<String>>,
    #[serde(default)]
    rows: Vec<Row>,
}

#[derive(Deserialize)]
struct Stack {
    frames: Vec<Site>,
    #[serde(default)]
    user_site: usize,
}

#[derive(Deserialize, Serialize)]
struct Site {
    #[serde(default)]
    addr: Option<u64>,
    #[serde(default)]
    module: Option<String>,
    #[serde(default)]
    module_offset: Option<u64>,
    #[serde(default)]
    function: Option<String>,
    #[serde(default)]
    file: Option<String>,
    #[serde(default)]
    line: Option<u64>,
}

#[derive(Deserialize, Serialize)]
struct Row {
    family: String,
    #[serde(default)]
    event: String,
    #[serde(default)]
    count: f64,
    #[serde(default)]
    amount: f64,
    #[serde(default)]
    stack: Option<String>,
    #[serde(default)]
    kernel_stack: Option<String>,
    #[serde(default)]
    inner: bool,
}

/// The line as JSON, the counted pass's attribution cut to `complete`,
/// `window`, `losses`, `processes` and `stacks` (each stack reduced to its
/// user site, as its only frame; kernel stacks to their innermost frame).
pub fn parse(line: &str) -> serde_json::Result<Value> {
    let l: Line = serde_json::from_str(line)?;
    let mut v = Value::Object(l.rest);
    if let Some(c) = l.counted {
        let attribution = c.attribution.map(|a| {
            let stacks = a.stacks.map(|s| {
                let users: Map<String, Value> = s
                    .stacks
                    .into_iter()
                    .map(|(k, mut st)| {
                        let frames: Vec<Site> = if st.user_site < st.frames.len() {
                            vec![st.frames.swap_remove(st.user_site)]
                        } else {
                            Vec::new()
                        };
                        (k, serde_json::json!({"frames": frames, "user_site": 0}))
                    })
                    .collect();
                let kernel: Map<String, Value> = s
                    .kernel
                    .into_iter()
                    .map(|(k, f)| {
                        (
                            k,
                            serde_json::json!(f.into_iter().take(1).collect::<Vec<_>>()),
                        )
                    })
                    .collect();
                serde_json::json!({"stacks": users, "kernel": kernel, "rows": s.rows})
            });
            serde_json::json!({
                "complete": a.complete, "window": a.window, "losses": a.losses,
                "processes": a.processes, "stacks": stacks,
            })
        });
        v["counted"] = serde_json::json!({
            "load": c.load, "per_request": c.per_request, "launch": c.launch,
            "attribution": attribution,
        });
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    #[test]
    fn keeps_the_user_site_of_each_stack_and_drops_the_site_tables() {
        let line = r#"{"id":"a","counted":{"per_request":{"allocations":8.0},"attribution":{
            "complete":true,"alloc":[{"site":{"function":"x"}}],
            "stacks":{"stacks":{"01":{"frames":[{"function":"malloc"},{"function":"f","line":7}],
            "user_site":1,"incomplete":[]}},"kernel":{"faults:2":["a","b"]},
            "rows":[{"family":"alloc","event":"malloc","count":3,"amount":96,"stack":"01",
            "kernel_stack":null,"inner":false,"pid":9}]}}}}"#;
        let v = super::parse(line).unwrap();
        let a = &v["counted"]["attribution"];
        assert!(a.get("alloc").is_none());
        assert_eq!(a["complete"], true);
        assert_eq!(a["stacks"]["stacks"]["01"]["frames"][0]["function"], "f");
        assert_eq!(a["stacks"]["stacks"]["01"]["frames"][0]["line"], 7);
        assert_eq!(a["stacks"]["stacks"]["01"]["user_site"], 0);
        assert_eq!(a["stacks"]["kernel"]["faults:2"], serde_json::json!(["a"]));
        assert_eq!(a["stacks"]["rows"][0]["amount"], 96.0);
        assert_eq!(v["counted"]["per_request"]["allocations"], 8.0);
        assert_eq!(v["id"], "a");
    }
}
