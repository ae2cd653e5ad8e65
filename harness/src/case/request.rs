//! The load of a case: its request, expected response and shape, and the
//! checks of what the generator reported.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use crate::launch::spec::{Body, TargetSpec};
use crate::load::{
    Endpoint as LoadEndpoint, Expect, ExpectBody, LoadReport, LoadSpec, Mode, Protocol,
};
use crate::scenario::{HttpCase, LoadShape, Proto};

use super::*;

pub(super) fn load_spec(
    rs: &RunSettings,
    case: &HttpCase,
    spec: &TargetSpec,
    port: u16,
) -> Result<LoadSpec, Fail> {
    let path = case.path.clone();
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
        Proto::H1 => Protocol::H1 {
            keepalive: case.keepalive,
        },
        Proto::H2c => Protocol::H2c,
        Proto::H2Tls => {
            let t = spec.protocols.h2_tls.as_ref().expect("checked by spec_for");
            Protocol::H2Tls {
                ca_pem: t.ca.clone().unwrap_or_default(),
                server_name: t.server_name.clone(),
                insecure: t.insecure,
            }
        }
        Proto::H3 => {
            let t = spec.protocols.h3.as_ref().expect("checked by spec_for");
            Protocol::H3 {
                ca_pem: t.ca.clone().unwrap_or_default(),
                server_name: t.server_name.clone(),
                insecure: t.insecure,
            }
        }
    };
    let topo = case.topology;
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
        spin: rs.spin,
        request_timeout: limits().map_or(crate::load::REQUEST_TIMEOUT, |l| l.request_timeout),
        deadline: limits().map(|l| l.deadline),
    })
}

/// A keep-alive topology of C connections must have made exactly C TCP
/// handshakes (and C TLS / h2 handshakes where the protocol has them) before
/// any load: otherwise the topology measured is not the one asked for.
pub(super) fn handshake_mismatch(ls: &LoadSpec, hs: crate::load::Handshakes) -> Option<String> {
    let c = ls.connections as u64;
    if let Protocol::H3 { .. } = &ls.protocol {
        let got = (hs.udp, hs.quic, hs.h3);
        return (got != (c, c, c) || hs.tcp != 0).then(|| {
            format!(
                "topology {}x{}: expected {:?} (udp, quic, h3) handshakes and no tcp, made {got:?} and {} tcp",
                ls.connections,
                ls.streams,
                (c, c, c),
                hs.tcp
            )
        });
    }
    let want = match &ls.protocol {
        Protocol::H1 { keepalive: false } => return None,
        Protocol::H1 { keepalive: true } => (c, 0, 0),
        Protocol::H2c => (c, 0, c),
        Protocol::H2Tls { .. } => (c, c, c),
        Protocol::H1Tls { .. } => (c, c, 0),
        Protocol::H3 { .. } => unreachable!("checked above"),
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
    let kinds = |m: &std::collections::BTreeMap<String, u64>| {
        m.iter()
            .map(|(k, v)| format!("{k}: {v}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    if r.errors_total() > 0 {
        let kinds = kinds(&r.errors);
        reasons.push(format!(
            "{pass} pass: {} of {} responses failed validation or transport ({kinds})",
            r.errors_total(),
            r.sent
        ));
    }
    if r.not_sent_total() > 0 {
        let kinds = kinds(&r.not_sent);
        reasons.push(format!(
            "{pass} pass: {} of {} requests were never sent ({kinds})",
            r.not_sent_total(),
            r.scheduled
        ));
    }
    if r.expired > 0 {
        reasons.push(format!(
            "{pass} pass: {} of {} scheduled requests expired (queued longer than {} s without a free connection/stream)",
            r.expired,
            r.scheduled,
            crate::load::EXPIRE_AFTER.as_secs_f64()
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

pub(super) fn shape_mode(case: &HttpCase, d: Duration) -> Mode {
    match case.load {
        LoadShape::Open { rate } => Mode::Open { rate, duration: d },
        LoadShape::Closed => Mode::Closed { duration: d },
    }
}

/// Share of the generator threads' time spent working, 0 to 1: spinning
/// toward send times keeps a thread busy by design, so only work counts.
pub(super) fn generator_busy(r: &LoadReport, threads: usize) -> f64 {
    let work = r.client_cpu_ns.saturating_sub(r.client_spin_ns);
    work as f64 / (r.elapsed_ns.max(1) as f64 * threads.max(1) as f64)
}

/// `Some(why)` when more than 1% of the scheduled requests were late because
/// of the generator: the case is `limited`, not `ok`.
pub(super) fn limited(r: &LoadReport) -> Option<String> {
    r.generator_limited().then(|| {
        format!(
            "limited: {} of {} scheduled requests ({:.1}%) were sent more than {} µs after they could go (dispatch lag p99 {:.0} µs): the generator, not the server, added that latency",
            r.generator_late,
            r.scheduled,
            100.0 * r.generator_late as f64 / r.scheduled as f64,
            crate::load::LATE_AFTER.as_micros(),
            r.dispatch_lag.p99_ns as f64 / 1e3
        )
    })
}
