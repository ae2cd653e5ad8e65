//! `ab.json` read back: what report.html reads of an `ab::AbReport`,
//! as a typed view.
//!
//! In: `ab.json` parsed as JSON. Out: an [`AbView`] borrowing its strings
//! from it. Every field is optional (an interrupted session, an older
//! rig); a median of no runs is written as `null` (NaN) and reads as
//! `None`. Fields the page only shows stay JSON.

use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct AbView<'a> {
    #[serde(borrow)]
    pub arms: Vec<&'a str>,
    pub rounds: Value,
    pub order: Value,
    pub interrupted: Value,
    pub failed_runs: Value,
    pub equality: Value,
    pub evidence: Value,
    #[serde(borrow)]
    pub metrics: Vec<Metric<'a>>,
    pub code_differences: Vec<CodeDifference>,
    pub drift: Value,
    pub verdict: Value,
}

/// `ab::MetricComparison`.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct Metric<'a> {
    pub case: Value,
    #[serde(borrow)]
    pub metric: Option<&'a str>,
    pub unit: Value,
    pub exact: Value,
    pub control: Value,
    /// Each arm's values, in run order.
    pub values: Vec<Vec<Option<f64>>>,
    /// Arm i (i ≥ 1) against arm 0.
    pub vs_first: Vec<Comparison>,
}

/// `stats::Comparison`.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct Comparison {
    pub a_median: Option<f64>,
    pub b_median: Option<f64>,
    pub diff_median: Option<f64>,
    pub rel: Option<f64>,
    pub ci: Option<Interval>,
    pub p_value: Option<f64>,
    pub verdict: Value,
    pub reason: Value,
}

/// `stats::Interval`.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct Interval {
    pub lo: Option<f64>,
    pub hi: Option<f64>,
}

/// `ab::CodeDifference`: `(site, arm medians)` per site.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct CodeDifference {
    pub case: Value,
    pub sites: Vec<(Value, Vec<Option<f64>>)>,
}
