//! `gate.json` read back: what report.html reads of a
//! `gate::GateReport`, as a typed view.
//!
//! In: `gate.json` parsed as JSON. Out: a [`GateView`] borrowing its
//! strings from it. Every field is optional (an older rig); fields the
//! page only shows stay JSON.

use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct GateView<'a> {
    pub baseline: Value,
    pub target: Value,
    pub binary: Value,
    pub repeats: Value,
    pub requests: Value,
    #[serde(borrow)]
    pub observed: Vec<Observed<'a>>,
    #[serde(borrow)]
    pub rows: Vec<Row<'a>>,
    #[serde(borrow)]
    pub breaches: Option<Vec<&'a str>>,
}

/// `gate::compare::Observed`.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct Observed<'a> {
    #[serde(borrow)]
    pub name: Option<&'a str>,
    /// One per run.
    pub values: Vec<Option<f64>>,
    pub deterministic: Value,
}

/// `gate::compare::Row`.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct Row<'a> {
    #[serde(borrow)]
    pub counter: Option<&'a str>,
    pub baseline: Option<f64>,
    pub now: Option<f64>,
    pub limit: Value,
    #[serde(borrow)]
    pub verdict: Option<&'a str>,
    pub note: Value,
}
