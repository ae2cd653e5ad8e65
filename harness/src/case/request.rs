//! The load of a case: its request, expected response and shape, and the
//! checks of what the generator reported.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use crate::launch::spec::{Body, TargetSpec};
use crate::load::{
    Endpoint as LoadEndpoint, Expect, ExpectBody, LoadReport, LoadSpec, Mode, Protocol,
};
use crate::scenario::{Case, LoadShape, Proto};

use super::*;

pub(super) fn load_spec(
    rs: &RunSettings,
    case: &Case,
    spec: &TargetSpec,
    port: u16,
) -> Result<LoadSpec, Fail> {
    let path = case
        .path
        .clone()
        .ok_or_else(|| Fail("http case without a path".into()))?;
    let ep = spec
        .endpoints
        .iter()
        .find(|e| e.path == path)
        .ok_or_else(|| Fail(format!("no endpoint {path}")))?;
    let body = match &ep.body {
        None => ExpectBody::Any,
        Some(Body::Literal(s)) => ExpectBody::Exact(s.clone().into_bytes().into()),
        Some(Body::File(f)) => ExpectBody::Exact(
            std::fs::read(f)
                .map_err(|e| Fail(format!("endpoint {path}: body file {}: {e}", f.display())))?
                .into(),
        ),
        Some(Body::Sha256(hex)) => {
            let mut h = [0u8; 32];
            for (i, b) in h.iter_mut().enumerate() {
                *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16)
                    .map_err(|_| Fail(format!("endpoint {path}: bad sha256")))?;
            }
            ExpectBody::Sha256(h)
        }
    };
    let protocol = match case.protocol {
        Some(Proto::H1) => Protocol::H1 {
            keepalive: case.keepalive,
        },
        Some(Proto::H2c) => Protocol::H2c,
        Some(Proto::H2Tls) => {
            let t = spec.protocols.h2_tls.as_ref().expect("checked by spec_for");
            Protocol::H2Tls {
                ca_pem: t.ca.clone().unwrap_or_default(),
                server_name: t.server_name.clone(),
                insecure: t.insecure,
            }
        }
        None => return Err(Fail("http case without a protocol".into())),
    };
    let topo = case
        .topology
        .ok_or_else(|| Fail("http case without a topology".into()))?;
    Ok(LoadSpec {
        addr: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port),
        protocol,
        endpoint: LoadEndpoint {
            path,
            expect: Expect {
                status: ep.status,
                content_type: ep.content_type.clone(),
                body,
            },
        },
        connections: topo.connections,
        streams: topo.streams,
        client_cpus: rs.client_cpus.clone(),
        threads: None,
    })
}

/// A keep-alive topology of C connections must have made exactly C TCP
/// handshakes (and C TLS / h2 handshakes where the protocol has them) before
/// any load: otherwise the topology measured is not the one asked for.
pub(super) fn handshake_mismatch(ls: &LoadSpec, hs: crate::load::Handshakes) -> Option<String> {
    let c = ls.connections as u64;
    let want = match &ls.protocol {
        Protocol::H1 { keepalive: false } => return None,
        Protocol::H1 { keepalive: true } => (c, 0, 0),
        Protocol::H2c => (c, 0, c),
        Protocol::H2Tls { .. } => (c, c, c),
        Protocol::H1Tls { .. } => (c, c, 0),
    };
    let got = (hs.tcp, hs.tls, hs.h2);
    (got != want).then(|| {
        format!(
            "topology {}x{}: expected {want:?} (tcp, tls, h2) handshakes, made {got:?}",
            ls.connections, ls.streams
        )
    })
}

/// Failed responses and broken accounting make a pass fail, with the reason.
pub(super) fn check_load(pass: &str, r: &LoadReport) -> Vec<String> {
    let mut reasons = Vec::new();
    if r.errors_total() > 0 {
        let kinds = r
            .errors
            .iter()
            .map(|(k, v)| format!("{k}: {v}"))
            .collect::<Vec<_>>()
            .join(", ");
        reasons.push(format!(
            "{pass} pass: {} of {} responses failed validation or transport ({kinds})",
            r.errors_total(),
            r.sent
        ));
    }
    if let Err(e) = r.check_invariants() {
        reasons.push(format!("{pass} pass: load accounting does not add up: {e}"));
    }
    if r.succeeded == 0 {
        reasons.push(format!("{pass} pass: no successful request"));
    }
    reasons
}

pub(super) fn shape_mode(case: &Case, d: Duration) -> Mode {
    match case.load {
        Some(LoadShape::Open { rate }) => Mode::Open { rate, duration: d },
        _ => Mode::Closed { duration: d },
    }
}

/// Signs that the load generator, not the server, set the pace.
pub(super) fn saturation(r: &LoadReport, threads: usize) -> Option<String> {
    let mut why = Vec::new();
    if r.dropped_capacity > 0 {
        why.push(format!(
            "{} send slots dropped for lack of a free connection/stream",
            r.dropped_capacity
        ));
    }
    if r.expired > 0 {
        why.push(format!("{} requests expired before dispatch", r.expired));
    }
    let busy = r.client_cpu_ns as f64 / (r.elapsed_ns.max(1) as f64 * threads.max(1) as f64);
    if busy > 0.9 {
        why.push(format!("generator threads {:.0}% busy", busy * 100.0));
    }
    if matches!(r.mode, Mode::Open { .. }) && r.dispatch_lag.p99_ns > 1_000_000 {
        why.push(format!(
            "dispatch lag p99 {:.0} µs",
            r.dispatch_lag.p99_ns as f64 / 1e3
        ));
    }
    (!why.is_empty()).then(|| why.join("; "))
}
