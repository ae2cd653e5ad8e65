//! An A/B report as Bencher Metric Format JSON (`ab.bmf.json`): every
//! metric of every case, per arm, as the median of its runs with their
//! minimum and maximum (`ab.md` is the markdown summary).

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use super::AbReport;

/// `{"<case> [<arm>]": {"<metric>": {value, lower_value, upper_value}}}`.
pub fn bmf(r: &AbReport) -> Value {
    let mut out: BTreeMap<String, Map<String, Value>> = BTreeMap::new();
    for m in &r.metrics {
        let v = &m.values;
        for (arm, values) in r.arms.iter().zip(&v.values) {
            let finite: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
            let Some(median) = crate::stats::median(&finite) else {
                continue;
            };
            let lo = finite.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = finite.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            out.entry(format!("{} [{arm}]", v.case))
                .or_default()
                .insert(
                    v.metric.clone(),
                    json!({"value": median, "lower_value": lo, "upper_value": hi}),
                );
        }
    }
    json!(out)
}
