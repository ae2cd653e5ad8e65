//! A [`Case`] as one flat JSON object, the shape `cases.jsonl` has always
//! had.

use serde::Serialize;

use super::*;

/// The flat JSON form of a [`Case`]: fields a kind does not have are
/// null (`keepalive` is true for memory cases, as it always was).
#[derive(Serialize)]
pub(super) struct FlatCase {
    id: String,
    suite: String,
    kind: SuiteKind,
    target: usize,
    target_name: String,
    repeat: u32,
    protocol: Option<Proto>,
    path: Option<String>,
    load: Option<LoadShape>,
    topology: Option<Topology>,
    keepalive: bool,
    /// Memslope cases: the tiers of open connections.
    #[serde(skip_serializing_if = "Option::is_none")]
    connections: Option<Vec<usize>>,
    /// Recovery cases: cycles and how each closes.
    #[serde(skip_serializing_if = "Option::is_none")]
    cycles: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    close: Option<CloseKind>,
    /// Soak cases: one interval.
    #[serde(skip_serializing_if = "Option::is_none")]
    interval_ms: Option<u64>,
    /// Live cases: the connections' protocol (`live` is the pass's
    /// results) and ms between messages.
    #[serde(skip_serializing_if = "Option::is_none")]
    live_protocol: Option<LiveProto>,
    #[serde(skip_serializing_if = "Option::is_none")]
    message_ms: Option<u64>,
    warmup_ms: u64,
    duration_ms: u64,
    counted_requests: u64,
    settle_ms: u64,
    request_timeout_ms: u64,
    case_timeout_ms: u64,
}

impl From<Case> for FlatCase {
    fn from(c: Case) -> FlatCase {
        let protocol = c.what.listener_protocol();
        let kind = c.what.suite_kind();
        let (mut cycles, mut close, mut interval_ms) = (None, None, None);
        let (mut live_protocol, mut message_ms) = (None, None);
        let fixed_rate = |path, rate, topology| {
            let load = LoadShape::Open { rate };
            (Some(path), Some(load), Some(topology), true, None)
        };
        let (path, load, topology, keepalive, connections) = match c.what {
            CaseKind::Memory { .. } => (None, None, None, true, None),
            CaseKind::Recovery(r) => {
                cycles = Some(r.cycles);
                close = Some(r.close);
                fixed_rate(r.path, r.rate, r.topology)
            }
            CaseKind::Soak(k) => {
                interval_ms = Some(k.interval_ms);
                fixed_rate(k.path, k.rate, k.topology)
            }
            CaseKind::Http(h) => (
                Some(h.path),
                Some(h.load),
                Some(h.topology),
                h.keepalive,
                None,
            ),
            CaseKind::MemSlope(m) => match m.conn {
                MemSlopeConn::Http { path, .. } => (Some(path), None, None, true, Some(m.tiers)),
                MemSlopeConn::Live(p) => {
                    live_protocol = Some(p);
                    (None, None, None, true, Some(m.tiers))
                }
            },
            CaseKind::Live(l) => {
                cycles = Some(l.cycles);
                live_protocol = Some(l.protocol);
                message_ms = Some(l.message_ms);
                (None, None, None, true, Some(vec![l.connections]))
            }
        };
        FlatCase {
            id: c.id,
            suite: c.suite,
            kind,
            target: c.target,
            target_name: c.target_name,
            repeat: c.repeat,
            protocol,
            path,
            load,
            topology,
            keepalive,
            connections,
            cycles,
            close,
            interval_ms,
            live_protocol,
            message_ms,
            warmup_ms: c.warmup_ms,
            duration_ms: c.duration_ms,
            counted_requests: c.counted_requests,
            settle_ms: c.settle_ms,
            request_timeout_ms: c.request_timeout_ms,
            case_timeout_ms: c.case_timeout_ms,
        }
    }
}
