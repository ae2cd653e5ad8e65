//! Latency histograms: HDR, 1 ns to 100 s at 3 significant digits, merged
//! across threads and serialized (base64 of the V2 encoding) so that
//! repeats can be merged too. Percentiles of merged histograms, never
//! averages of percentiles.

use base64::Engine;
use hdrhistogram::serialization::{Deserializer, Serializer, V2Serializer};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

const HIGHEST_NS: u64 = 100_000_000_000;

pub fn new_hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, HIGHEST_NS, 3).expect("valid HDR bounds")
}

/// The histograms of a run.
pub(crate) struct Hists {
    pub latency: Histogram<u64>,
    pub request_latency: Histogram<u64>,
    pub dispatch_lag: Histogram<u64>,
    pub queue_delay: Histogram<u64>,
}

impl Hists {
    pub fn new() -> Hists {
        Hists {
            latency: new_hist(),
            request_latency: new_hist(),
            dispatch_lag: new_hist(),
            queue_delay: new_hist(),
        }
    }

    pub fn merge(&mut self, o: &Hists) {
        // Same bounds on both sides: adding cannot fail.
        self.latency.add(&o.latency).expect("same bounds");
        self.request_latency
            .add(&o.request_latency)
            .expect("same bounds");
        self.dispatch_lag.add(&o.dispatch_lag).expect("same bounds");
        self.queue_delay.add(&o.queue_delay).expect("same bounds");
    }

    pub fn encode(&self) -> EncodedHists {
        EncodedHists {
            latency: encode(&self.latency),
            request_latency: encode(&self.request_latency),
            dispatch_lag: encode(&self.dispatch_lag),
            queue_delay: encode(&self.queue_delay),
        }
    }
}

/// Serialized histograms: base64 of the HdrHistogram V2 encoding (the format
/// HdrHistogram's other implementations read too).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct EncodedHists {
    pub latency: String,
    pub request_latency: String,
    pub dispatch_lag: String,
    /// Absent in runs written before queueing existed.
    #[serde(default)]
    pub queue_delay: String,
}

/// Percentiles of one histogram, in nanoseconds.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct HistSummary {
    pub count: u64,
    pub min_ns: u64,
    pub mean_ns: f64,
    pub p50_ns: u64,
    pub p90_ns: u64,
    pub p99_ns: u64,
    pub p999_ns: u64,
    pub max_ns: u64,
}

pub fn summarize(h: &Histogram<u64>) -> HistSummary {
    if h.is_empty() {
        return HistSummary::default();
    }
    HistSummary {
        count: h.len(),
        min_ns: h.min(),
        mean_ns: h.mean(),
        p50_ns: h.value_at_quantile(0.5),
        p90_ns: h.value_at_quantile(0.9),
        p99_ns: h.value_at_quantile(0.99),
        p999_ns: h.value_at_quantile(0.999),
        max_ns: h.max(),
    }
}

pub fn encode(h: &Histogram<u64>) -> String {
    let mut buf = Vec::new();
    V2Serializer::new()
        .serialize(h, &mut buf)
        .expect("serializing to memory");
    base64::engine::general_purpose::STANDARD.encode(buf)
}

pub fn decode(s: &str) -> Result<Histogram<u64>, String> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(s)
        .map_err(|e| format!("histogram is not base64: {e}"))?;
    Deserializer::new()
        .deserialize(&mut &bytes[..])
        .map_err(|e| format!("histogram does not decode: {e:?}"))
}

/// Merge serialized histograms (e.g. the `latency` of every repeat).
pub fn merge_encoded<'a>(all: impl IntoIterator<Item = &'a str>) -> Result<Histogram<u64>, String> {
    let mut total = new_hist();
    for s in all {
        total
            .add(decode(s)?)
            .map_err(|e| format!("histogram bounds differ: {e:?}"))?;
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoded_histograms_merge_to_the_union() {
        let mut a = new_hist();
        let mut b = new_hist();
        for v in 1..=1000u64 {
            a.record(v * 1000).unwrap();
        }
        b.record(5_000_000_000).unwrap();
        let m = merge_encoded([encode(&a).as_str(), encode(&b).as_str()]).unwrap();
        assert_eq!(m.len(), 1001);
        assert!(m.equivalent(m.max(), 5_000_000_000));
        let s = summarize(&m);
        assert!(m.equivalent(s.p50_ns, 501_000), "{s:?}");
        assert_eq!(summarize(&new_hist()), HistSummary::default());
    }
}
