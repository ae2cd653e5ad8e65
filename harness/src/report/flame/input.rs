//! The whole stacks of one window as flamegraphs read them: the `stacks`
//! and `window` parts of an attribution, deserialized from the JSON rig
//! writes (`rig attach --json`, the `counted.attribution` of a
//! `cases.jsonl` line). A live `Attribution` goes through the same JSON, so
//! rendering from recorded results and from a window just measured is one
//! code path.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

use crate::probe::Family;
use crate::report::Attribution;
use crate::symbolize::Site;

/// One user stack, innermost frame first (`report::stacks::StackFrames`).
#[derive(Clone, Debug, Deserialize)]
pub struct Stack {
    pub frames: Vec<Site>,
    pub user_site: usize,
    #[serde(default)]
    pub incomplete: Vec<String>,
}

/// Exact count (and bytes or ns) of one event at one stack
/// (`report::stacks::StackRow`).
#[derive(Clone, Debug, Deserialize)]
pub struct Row {
    pub family: Family,
    pub event: String,
    #[serde(default)]
    pub size_class: Option<u32>,
    pub pid: u32,
    pub count: u64,
    pub amount: u64,
    pub stack: Option<String>,
    pub kernel_stack: Option<String>,
    #[serde(default)]
    pub inner: bool,
    /// `report::stacks::StackRow::rig_probes`.
    #[serde(default)]
    pub rig_probes: bool,
}

/// `report::stacks::StackSection`.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct Stacks {
    pub enabled: bool,
    pub stacks: BTreeMap<String, Stack>,
    pub kernel: BTreeMap<String, Vec<String>>,
    pub rows: Vec<Row>,
    #[serde(default)]
    pub incomplete_events: BTreeMap<Family, u64>,
    #[serde(default)]
    pub stack_failures: BTreeMap<Family, u64>,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct WindowPart {
    pub elapsed_ns: u64,
    pub requests: Option<u64>,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct CpuPart {
    pub period_ns: u64,
}

/// What a flamegraph needs of an attribution.
#[derive(Clone, Debug, Deserialize)]
pub struct Recorded {
    pub pid: u32,
    #[serde(default)]
    pub command: String,
    pub families: Vec<Family>,
    pub window: WindowPart,
    pub stacks: Stacks,
    #[serde(default)]
    pub cpu: CpuPart,
}

impl Recorded {
    /// `pid 4242 (nginx)`: how a window without a case id is named.
    pub fn label(&self) -> String {
        format!("pid {} ({})", self.pid, crate::report::role(&self.command))
    }

    /// The window just measured.
    pub fn of(a: &Attribution) -> Recorded {
        let v = serde_json::to_value(a).expect("an attribution serializes");
        serde_json::from_value(v).expect("an attribution reads back as written")
    }
}

#[derive(Debug, thiserror::Error)]
pub enum InputError {
    #[error("{path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: line {line}: not rig's JSON: {source}")]
    Json {
        path: String,
        line: usize,
        source: serde_json::Error,
    },
    #[error("{path}: no case {case:?}; cases with a counted pass: {known}")]
    NoCase {
        path: String,
        case: String,
        known: String,
    },
    #[error("{path} holds {n} cases with a counted pass; name one with --case: {known}")]
    WhichCase {
        path: String,
        n: usize,
        known: String,
    },
    #[error("{path}: case {case} has no counted pass (no probes ran in it)")]
    NotCounted { path: String, case: String },
}

/// One recorded window and the name it was recorded under (a case id, or
/// `pid N` for an attach JSON).
pub struct Found {
    pub id: String,
    pub recorded: Recorded,
}

/// Read the window named `case` from `path`: the JSON of `rig attach
/// --json` (one window; `case` may be omitted), or a `cases.jsonl` of `rig
/// run`, `rig ab` or `rig gate` (a case id, or its `Case::slug`, computed
/// by `slug`).
pub fn load(
    path: &Path,
    case: Option<&str>,
    slug: fn(&str) -> String,
) -> Result<Found, InputError> {
    let p = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| InputError::Read {
        path: p.clone(),
        source,
    })?;
    // A whole-file JSON object: the attach JSON (pretty-printed, so not one
    // object per line).
    if let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) {
        if v.get("stacks").is_some() {
            let recorded: Recorded =
                serde_json::from_value(v).map_err(|source| InputError::Json {
                    path: p.clone(),
                    line: 1,
                    source,
                })?;
            return Ok(Found {
                id: recorded.label(),
                recorded,
            });
        }
    }
    let cases = case_lines(&text, &p)?;
    let (id, mut v) = pick_case(cases, case, slug, &p)?;
    let a = v
        .pointer_mut("/counted/attribution")
        .map(serde_json::Value::take)
        .ok_or_else(|| InputError::NotCounted {
            path: p.clone(),
            case: id.clone(),
        })?;
    let recorded = serde_json::from_value(a).map_err(|source| InputError::Json {
        path: p,
        line: 0,
        source,
    })?;
    Ok(Found { id, recorded })
}

/// The lines of a `cases.jsonl` (`p`, its path for errors), each with its
/// case id (`?` when it has none).
fn case_lines(text: &str, p: &str) -> Result<Vec<(String, serde_json::Value)>, InputError> {
    let mut cases = Vec::new();
    let mut lines = text.lines().enumerate().peekable();
    while let Some((i, line)) = lines.next() {
        if line.trim().is_empty() {
            continue;
        }
        let v: serde_json::Value = match serde_json::from_str(line) {
            Ok(v) => v,
            // The last line cut short by a crash is dropped, said, as
            // `rig report` does: the cases before it survived.
            Err(e) if lines.peek().is_none() => {
                crate::errln!(
                    "rig: warning: {p}:{}: the last line is cut short ({e}): dropped; the {} \
                     case(s) before it are kept",
                    i + 1,
                    cases.len()
                );
                continue;
            }
            Err(source) => {
                return Err(InputError::Json {
                    path: p.to_string(),
                    line: i + 1,
                    source,
                })
            }
        };
        let id = v
            .get("id")
            .and_then(|x| x.as_str())
            .unwrap_or("?")
            .to_string();
        cases.push((id, v));
    }
    Ok(cases)
}

/// The case named `case` (by id or slug), or without a name the one case
/// that has a counted pass.
fn pick_case(
    cases: Vec<(String, serde_json::Value)>,
    case: Option<&str>,
    slug: fn(&str) -> String,
    p: &str,
) -> Result<(String, serde_json::Value), InputError> {
    let counted = |v: &serde_json::Value| v.pointer("/counted/attribution").is_some();
    let known = cases
        .iter()
        .filter(|(_, v)| counted(v))
        .map(|(id, _)| id.as_str())
        .collect::<Vec<_>>()
        .join(", ");
    match case {
        Some(c) => cases
            .into_iter()
            .find(|(id, _)| id == c || slug(id) == c)
            .ok_or_else(|| InputError::NoCase {
                path: p.to_string(),
                case: c.to_string(),
                known,
            }),
        None => {
            let mut with: Vec<_> = cases.into_iter().filter(|(_, v)| counted(v)).collect();
            if with.len() != 1 {
                return Err(InputError::WhichCase {
                    path: p.to_string(),
                    n: with.len(),
                    known,
                });
            }
            Ok(with.remove(0))
        }
    }
}
