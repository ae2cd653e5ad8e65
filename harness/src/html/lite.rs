//! One `cases.jsonl` line, read for the page only.
//!
//! A counted pass's attribution holds every stack of the window with every
//! frame named: tens of MB per case for a real server. The page needs the
//! user site of each stack and the stack rows, read as [`Stacks`];
//! everything else of the attribution is skipped while parsing (never built
//! as JSON values), so the page of a long run is built in bounded memory
//! and time.

use std::collections::BTreeMap;

use serde::Deserialize;
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

#[derive(Default, Deserialize)]
struct Attribution {
    #[serde(default)]
    complete: Value,
    #[serde(default)]
    window: Value,
    #[serde(default)]
    losses: Value,
    #[serde(default)]
    processes: Value,
    /// The probes a user named, by call site (small: one row per site).
    #[serde(default)]
    user: Value,
    #[serde(default)]
    stacks: Option<Stacks>,
}

/// `report::stacks`' tables: each stack by key, and the rows counting
/// events on them.
#[derive(Debug, Default, Deserialize)]
pub struct Stacks {
    #[serde(default)]
    pub stacks: BTreeMap<String, Stack>,
    #[serde(default)]
    pub kernel: BTreeMap<String, Vec<String>>,
    #[serde(default)]
    pub rows: Vec<Row>,
}

#[derive(Debug, Deserialize)]
pub struct Stack {
    pub frames: Vec<Site>,
    /// The first frame outside the wrappers.
    #[serde(default)]
    pub user_site: usize,
}

#[derive(Debug, Deserialize)]
pub struct Site {
    #[serde(default)]
    pub addr: Option<u64>,
    #[serde(default)]
    pub module: Option<String>,
    #[serde(default)]
    pub module_offset: Option<u64>,
    #[serde(default)]
    pub function: Option<String>,
    #[serde(default)]
    pub file: Option<String>,
    #[serde(default)]
    pub line: Option<u64>,
}

#[derive(Debug, Deserialize)]
pub struct Row {
    pub family: String,
    #[serde(default)]
    pub event: String,
    #[serde(default)]
    pub count: f64,
    #[serde(default)]
    pub amount: f64,
    #[serde(default)]
    pub stack: Option<String>,
    #[serde(default)]
    pub kernel_stack: Option<String>,
    /// An allocation made inside another counted one.
    #[serde(default)]
    pub inner: bool,
    /// An application allocator's call, beside the heap's.
    #[serde(default)]
    pub beside_the_heap: bool,
    /// A free, of any allocator.
    #[serde(default)]
    pub free: bool,
}

/// A line as the page reads it.
pub struct Parsed {
    /// The line as JSON, its counted pass's attribution cut to
    /// `complete`, `window`, `losses`, `processes` and `user`.
    pub json: Value,
    /// The counted pass's stacks, when it has them.
    pub stacks: Option<Stacks>,
}

/// The line, its counted pass's stacks apart.
pub fn parse(line: &str) -> serde_json::Result<Parsed> {
    let l: Line = serde_json::from_str(line)?;
    let mut json = Value::Object(l.rest);
    let mut stacks = None;
    if let Some(c) = l.counted {
        // Without an attribution, its fields are `null`, as they are
        // absent from one.
        let a = c.attribution.unwrap_or_default();
        stacks = a.stacks;
        json["counted"] = serde_json::json!({
            "load": c.load, "per_request": c.per_request, "launch": c.launch,
            "attribution": {
                "complete": a.complete, "window": a.window, "losses": a.losses,
                "processes": a.processes, "user": a.user,
            },
        });
    }
    Ok(Parsed { json, stacks })
}

#[cfg(test)]
mod tests {
    #[test]
    fn keeps_the_stacks_and_drops_the_site_tables() {
        let line = r#"{"id":"a","counted":{"per_request":{"allocations":8.0},"attribution":{
            "complete":true,"alloc":[{"site":{"function":"x"}}],
            "stacks":{"stacks":{"01":{"frames":[{"function":"malloc"},{"function":"f","line":7}],
            "user_site":1,"incomplete":[]}},"kernel":{"faults:2":["a","b"]},
            "rows":[{"family":"alloc","event":"malloc","count":3,"amount":96,"stack":"01",
            "kernel_stack":null,"inner":false,"pid":9}]}}}}"#;
        let p = super::parse(line).unwrap();
        let a = &p.json["counted"]["attribution"];
        assert!(a.get("alloc").is_none() && a.get("stacks").is_none());
        assert_eq!(a["complete"], true);
        let st = p.stacks.unwrap();
        let s = &st.stacks["01"];
        assert_eq!(s.frames[s.user_site].function.as_deref(), Some("f"));
        assert_eq!(s.frames[s.user_site].line, Some(7));
        assert_eq!(st.kernel["faults:2"], ["a", "b"]);
        assert_eq!(st.rows[0].amount, 96.0);
        assert_eq!(p.json["counted"]["per_request"]["allocations"], 8.0);
        assert_eq!(p.json["id"], "a");
    }
}
