//! The load generator against in-process servers whose answers are known:
//! a hand-written HTTP/1.1 server and an `h2` server, plain or over TLS with
//! a throwaway CA made here. Counts are asserted exactly; nothing about time.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use rig::load::{
    hist, Client, Endpoint, Expect, ExpectBody, LoadError, LoadReport, LoadSpec, Mode, Protocol,
};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;

const BODY: &str = "Hello, World!";

/// One response of the test server.
#[derive(Clone)]
struct Answer {
    status: u16,
    content_type: &'static str,
    body: &'static str,
    chunked: bool,
}

const OK: Answer = Answer {
    status: 200,
    content_type: "text/plain",
    body: BODY,
    chunked: false,
};

/// How the server behaves.
#[derive(Clone)]
struct Behaviour {
    /// Answers in turn, per connection.
    answers: Vec<Answer>,
    /// h1: drop the connection (no `Connection: close`) after this many
    /// responses on it.
    close_after: Option<u64>,
    /// Close every connection right after accepting it.
    slam: bool,
    delay: Duration,
}

impl Behaviour {
    fn ok() -> Behaviour {
        Behaviour {
            answers: vec![OK],
            close_after: None,
            slam: false,
            delay: Duration::ZERO,
        }
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Wire {
    H1,
    H2,
}

struct Tls {
    dir: PathBuf,
    ca: PathBuf,
    server: Arc<rustls::ServerConfig>,
}

/// A throwaway CA and a `localhost` certificate signed by it.
fn tls(alpn: &str) -> Tls {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, format!("rig test CA {n}"));
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec!["localhost".into()])
        .unwrap()
        .signed_by(&key, &ca, &ca_key)
        .unwrap();
    let dir = std::env::temp_dir().join(format!("rig-load-tls-{}-{n}", std::process::id(),));
    std::fs::create_dir_all(&dir).unwrap();
    let ca_path = dir.join("ca.pem");
    std::fs::write(&ca_path, ca.pem()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut server = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![leaf.der().clone()],
            rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
        )
        .unwrap();
    server.alpn_protocols = vec![alpn.as_bytes().to_vec()];
    Tls {
        dir,
        ca: ca_path,
        server: Arc::new(server),
    }
}

static NEXT: AtomicU64 = AtomicU64::new(0);

impl Drop for Tls {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A running test server and what it saw.
struct Server {
    addr: SocketAddr,
    accepted: Arc<AtomicU64>,
}

fn serve(wire: Wire, behaviour: Behaviour, tls: Option<Arc<rustls::ServerConfig>>) -> Server {
    let std_listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    std_listener.set_nonblocking(true).unwrap();
    let addr = std_listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicU64::new(0));
    let counter = accepted.clone();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let local = tokio::task::LocalSet::new();
        local.block_on(&rt, async move {
            let listener = TcpListener::from_std(std_listener).unwrap();
            let acceptor = tls.map(tokio_rustls::TlsAcceptor::from);
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    return;
                };
                counter.fetch_add(1, Ordering::Relaxed);
                if behaviour.slam {
                    drop(tcp);
                    continue;
                }
                let _ = tcp.set_nodelay(true);
                let b = behaviour.clone();
                let acceptor = acceptor.clone();
                tokio::task::spawn_local(async move {
                    match acceptor {
                        Some(a) => {
                            // A client that rejects our certificate ends here.
                            if let Ok(s) = a.accept(tcp).await {
                                conn(wire, s, b).await;
                            }
                        }
                        None => conn(wire, tcp, b).await,
                    }
                });
            }
        });
    });
    Server { addr, accepted }
}

async fn conn<S: AsyncRead + AsyncWrite + Unpin + 'static>(wire: Wire, s: S, b: Behaviour) {
    match wire {
        Wire::H1 => h1_conn(s, b).await,
        Wire::H2 => h2_conn(s, b).await,
    }
}

async fn h1_conn<S: AsyncRead + AsyncWrite + Unpin>(mut s: S, b: Behaviour) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let mut served = 0u64;
    loop {
        let end = loop {
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            match s.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        };
        let close = String::from_utf8_lossy(&buf[..end])
            .to_ascii_lowercase()
            .contains("connection: close");
        buf.drain(..end);
        let a = &b.answers[(served % b.answers.len() as u64) as usize];
        served += 1;
        if !b.delay.is_zero() {
            tokio::time::sleep(b.delay).await;
        }
        let mut r = format!(
            "HTTP/1.1 {} X\r\nContent-Type: {}\r\n",
            a.status, a.content_type
        );
        if a.chunked {
            let (x, y) = a.body.split_at(a.body.len() / 2);
            r.push_str("Transfer-Encoding: chunked\r\n");
            if close {
                r.push_str("Connection: close\r\n");
            }
            r.push_str(&format!(
                "\r\n{:x}\r\n{x}\r\n{:x}\r\n{y}\r\n0\r\n\r\n",
                x.len(),
                y.len()
            ));
        } else {
            if close {
                r.push_str("Connection: close\r\n");
            }
            r.push_str(&format!(
                "Content-Length: {}\r\n\r\n{}",
                a.body.len(),
                a.body
            ));
        }
        if s.write_all(r.as_bytes()).await.is_err() || s.flush().await.is_err() {
            return;
        }
        if close || b.close_after.is_some_and(|n| served >= n) {
            let _ = s.shutdown().await;
            return;
        }
    }
}

async fn h2_conn<S: AsyncRead + AsyncWrite + Unpin + 'static>(s: S, b: Behaviour) {
    let Ok(mut conn) = h2::server::handshake(s).await else {
        return;
    };
    let served = Arc::new(AtomicU64::new(0));
    while let Some(Ok((req, mut respond))) = conn.accept().await {
        drop(req);
        let i = served.fetch_add(1, Ordering::Relaxed);
        let a = b.answers[(i % b.answers.len() as u64) as usize].clone();
        let delay = b.delay;
        tokio::task::spawn_local(async move {
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            let resp = http::Response::builder()
                .status(a.status)
                .header("content-type", a.content_type)
                .body(())
                .unwrap();
            if let Ok(mut send) = respond.send_response(resp, false) {
                let _ = send.send_data(Bytes::from_static(a.body.as_bytes()), true);
            }
        });
    }
}

fn expect_ok() -> Expect {
    Expect::ok_exact(Some("text/plain"), BODY)
}

fn spec(addr: SocketAddr, protocol: Protocol, connections: usize, streams: usize) -> LoadSpec {
    LoadSpec {
        addr,
        protocol,
        endpoint: Endpoint {
            path: "/plain".into(),
            expect: expect_ok(),
        },
        connections,
        streams,
        client_cpus: None,
        threads: Some(2),
        spin: None,
        request_timeout: rig::load::REQUEST_TIMEOUT,
        deadline: None,
    }
}

fn run(client: &mut Client, mode: Mode) -> LoadReport {
    let r = client.run(&mode);
    r.check_invariants().unwrap();
    r
}

fn fixed(n: u64) -> Mode {
    Mode::FixedCount { requests: n }
}

fn tls_h2(ca: &std::path::Path) -> Protocol {
    Protocol::H2Tls {
        ca_pem: ca.to_path_buf(),
        server_name: "localhost".into(),
        insecure: false,
    }
}

#[test]
fn h1_keepalive_fixed_count_succeeds_exactly_on_the_connections_it_made() {
    let s = serve(Wire::H1, Behaviour::ok(), None);
    let mut c = Client::connect(&spec(s.addr, Protocol::H1 { keepalive: true }, 5, 1)).unwrap();
    assert_eq!(c.handshakes().tcp, 5);
    let r = run(&mut c, fixed(1001));
    assert_eq!((r.sent, r.succeeded, r.errors_total()), (1001, 1001, 0));
    assert_eq!(r.handshakes.tcp, 0, "no new connections during the run");
    // A second run on the same client: same connections.
    let r = run(&mut c, fixed(10));
    assert_eq!(r.succeeded, 10);
    assert_eq!(s.accepted.load(Ordering::Relaxed), 5);
    assert_eq!(c.handshakes().tcp, 5);
}

#[test]
fn h1_chunked_responses_are_decoded_and_validated() {
    let mut b = Behaviour::ok();
    b.answers[0].chunked = true;
    let s = serve(Wire::H1, b, None);
    let mut c = Client::connect(&spec(s.addr, Protocol::H1 { keepalive: true }, 2, 1)).unwrap();
    let r = run(&mut c, fixed(100));
    assert_eq!(r.succeeded, 100, "{:?}", r.errors);
}

#[test]
fn h1_without_keepalive_makes_one_tcp_handshake_per_request() {
    let s = serve(Wire::H1, Behaviour::ok(), None);
    let mut c = Client::connect(&spec(s.addr, Protocol::H1 { keepalive: false }, 3, 1)).unwrap();
    assert_eq!(c.handshakes().tcp, 0);
    let r = run(&mut c, fixed(200));
    assert_eq!(r.succeeded, 200, "{:?}", r.errors);
    assert_eq!(r.handshakes.tcp, 200);
    assert_eq!(s.accepted.load(Ordering::Relaxed), 200);
}

fn bad_answers() -> Behaviour {
    let mut b = Behaviour::ok();
    b.answers = vec![
        OK,
        Answer { status: 500, ..OK },
        Answer {
            content_type: "text/html",
            ..OK
        },
        Answer {
            body: "Hello, World?",
            ..OK
        },
    ];
    b
}

fn assert_counted_by_kind(r: &LoadReport) {
    assert_eq!(r.succeeded, 25);
    assert_eq!(r.errors.get("status 500"), Some(&25));
    assert_eq!(r.errors.get("content-type"), Some(&25));
    assert_eq!(r.errors.get("body mismatch"), Some(&25));
    assert_eq!(r.errors.len(), 3, "{:?}", r.errors);
}

#[test]
fn wrong_status_content_type_and_body_are_each_counted_under_their_kind_h1() {
    let s = serve(Wire::H1, bad_answers(), None);
    let mut c = Client::connect(&spec(s.addr, Protocol::H1 { keepalive: true }, 1, 1)).unwrap();
    assert_counted_by_kind(&run(&mut c, fixed(100)));
}

#[test]
fn wrong_status_content_type_and_body_are_each_counted_under_their_kind_h2() {
    let s = serve(Wire::H2, bad_answers(), None);
    let mut c = Client::connect(&spec(s.addr, Protocol::H2c, 1, 1)).unwrap();
    assert_counted_by_kind(&run(&mut c, fixed(100)));
}

#[test]
fn sha256_bodies_are_checked() {
    use sha2::Digest;
    let s = serve(Wire::H1, Behaviour::ok(), None);
    let mut sp = spec(s.addr, Protocol::H1 { keepalive: true }, 1, 1);
    sp.endpoint.expect.body = ExpectBody::Sha256(sha2::Sha256::digest(BODY).into());
    let r = run(&mut Client::connect(&sp).unwrap(), fixed(10));
    assert_eq!(r.succeeded, 10);
    sp.endpoint.expect.body = ExpectBody::Sha256([0; 32]);
    let r = run(&mut Client::connect(&sp).unwrap(), fixed(10));
    assert_eq!(r.errors.get("body mismatch"), Some(&10));
}

#[test]
fn h2c_topology_makes_exactly_one_handshake_per_connection() {
    let s = serve(Wire::H2, Behaviour::ok(), None);
    let mut c = Client::connect(&spec(s.addr, Protocol::H2c, 3, 4)).unwrap();
    let h = c.handshakes();
    assert_eq!((h.tcp, h.tls, h.h2), (3, 0, 3));
    let r = run(&mut c, fixed(999));
    assert_eq!((r.sent, r.succeeded), (999, 999), "{:?}", r.errors);
    let r = run(
        &mut c,
        Mode::Closed {
            duration: Duration::from_millis(200),
        },
    );
    assert_eq!(r.errors_total(), 0, "{:?}", r.errors);
    assert_eq!(r.handshakes, Default::default());
    assert_eq!(s.accepted.load(Ordering::Relaxed), 3);
}

#[test]
fn h2_over_tls_verifies_the_ca_and_counts_every_layer_once_per_connection() {
    let t = tls("h2");
    let s = serve(Wire::H2, Behaviour::ok(), Some(t.server.clone()));
    let mut c = Client::connect(&spec(s.addr, tls_h2(&t.ca), 2, 8)).unwrap();
    let h = c.handshakes();
    assert_eq!((h.tcp, h.tls, h.h2), (2, 2, 2));
    let r = run(&mut c, fixed(500));
    assert_eq!(r.succeeded, 500, "{:?}", r.errors);
    assert_eq!(s.accepted.load(Ordering::Relaxed), 2);
}

#[test]
fn h1_over_tls_succeeds_exactly() {
    let t = tls("http/1.1");
    let s = serve(Wire::H1, Behaviour::ok(), Some(t.server.clone()));
    let p = Protocol::H1Tls {
        ca_pem: t.ca.clone(),
        server_name: "localhost".into(),
        insecure: false,
    };
    let mut c = Client::connect(&spec(s.addr, p, 3, 1)).unwrap();
    let r = run(&mut c, fixed(300));
    assert_eq!(r.succeeded, 300, "{:?}", r.errors);
    assert_eq!(c.handshakes().tls, 3);
}

#[test]
fn tls_with_the_wrong_ca_fails_verification() {
    let t = tls("h2");
    let other = tls("h2");
    let s = serve(Wire::H2, Behaviour::ok(), Some(t.server.clone()));
    let e = Client::connect(&spec(s.addr, tls_h2(&other.ca), 2, 1))
        .err()
        .expect("a certificate from another CA is refused");
    match &e {
        LoadError::Handshake { kind, .. } => {
            assert_eq!(kind, "tls: invalid peer certificate: UnknownIssuer")
        }
        _ => panic!("{e}"),
    }
    // The right CA but the wrong name is refused too.
    let p = Protocol::H2Tls {
        ca_pem: t.ca.clone(),
        server_name: "example.com".into(),
        insecure: false,
    };
    let e = Client::connect(&spec(s.addr, p, 1, 1)).err().unwrap();
    assert!(e.to_string().contains("not valid for name"), "{e}");
}

#[test]
fn a_connection_the_server_drops_is_re_established_and_counted() {
    let mut b = Behaviour::ok();
    b.close_after = Some(10);
    let s = serve(Wire::H1, b, None);
    let mut c = Client::connect(&spec(s.addr, Protocol::H1 { keepalive: true }, 1, 1)).unwrap();
    let r = run(&mut c, fixed(100));
    assert_eq!(r.succeeded, 100, "{:?}", r.errors);
    assert_eq!(r.handshakes.tcp, 9);
    assert_eq!(s.accepted.load(Ordering::Relaxed), 10);
}

#[test]
fn a_connection_that_keeps_failing_is_given_up_and_its_requests_still_counted() {
    let mut b = Behaviour::ok();
    b.slam = true;
    let s = serve(Wire::H1, b, None);
    let mut c = Client::connect(&spec(s.addr, Protocol::H1 { keepalive: true }, 1, 1)).unwrap();
    let r = run(&mut c, fixed(10));
    assert_eq!(r.succeeded, 0);
    // Two requests went out and failed; the slot was given up then, and
    // the other eight were never sent (not sent and failed).
    assert_eq!(r.sent, 2, "{r:?}");
    assert_eq!(r.errors_total(), 2, "{:?}", r.errors);
    assert_eq!(
        r.not_sent.get("connection lost"),
        Some(&8),
        "{:?}",
        r.not_sent
    );
    assert_eq!(r.sent + r.not_sent_total(), 10);
    r.check_invariants().unwrap();
}

fn open(rate: f64, ms: u64) -> Mode {
    Mode::Open {
        rate,
        duration: Duration::from_millis(ms),
    }
}

#[test]
fn open_loop_counts_add_up_and_schedule_rate_times_duration() {
    for (wire, protocol, streams) in [
        (Wire::H1, Protocol::H1 { keepalive: true }, 1),
        (Wire::H2, Protocol::H2c, 2),
    ] {
        let s = serve(wire, Behaviour::ok(), None);
        let mut c = Client::connect(&spec(s.addr, protocol, 4, streams)).unwrap();
        let r = run(&mut c, open(2000.0, 500));
        assert_eq!(r.scheduled, 1000);
        assert_eq!(r.dispatch_lag.count, r.sent);
        assert_eq!(r.latency.count, r.succeeded);
        let lat = hist::decode(&r.histogram.latency).unwrap();
        assert_eq!(lat.len(), r.succeeded);
    }
}

#[test]
fn open_loop_queues_requests_when_every_stream_is_busy_and_sends_them_all() {
    let mut b = Behaviour::ok();
    b.delay = Duration::from_millis(10);
    let s = serve(Wire::H1, b, None);
    let mut c = Client::connect(&spec(s.addr, Protocol::H1 { keepalive: true }, 1, 1)).unwrap();
    // 20 requests 5 ms apart on one stream whose every answer takes at least
    // 10 ms: the first finds the stream free, each later one finds it busy
    // with the one before (which started at least 10 ms after it was due
    // minus 5), so it queues. None is dropped.
    let r = run(&mut c, open(200.0, 100));
    assert_eq!(r.scheduled, 20);
    assert_eq!((r.on_time, r.late, r.expired), (1, 19, 0), "{r:?}");
    assert_eq!(r.succeeded, 20, "{:?}", r.errors);
    assert_eq!(r.queue_delay.count, 19);
    assert_eq!(r.dispatch_lag.count, 20);
    // From the scheduled time: the last is due at 95 ms and cannot finish
    // before 20 answers of 10 ms each, at 200 ms.
    assert!(r.latency.max_ns >= 105_000_000, "{:?}", r.latency);
    assert!(r.latency.min_ns >= 10_000_000, "{:?}", r.latency);
}

#[test]
fn a_queued_request_not_sent_within_the_expiry_is_expired_and_counted_at_its_wait() {
    let mut b = Behaviour::ok();
    b.delay = Duration::from_millis(1500);
    let s = serve(Wire::H1, b, None);
    let mut c = Client::connect(&spec(s.addr, Protocol::H1 { keepalive: true }, 1, 1)).unwrap();
    // Due at 0, 100 and 200 ms; the one stream is busy until 1500 ms, so
    // the second and third wait past the 1 s expiry.
    let r = run(&mut c, open(10.0, 300));
    assert_eq!(r.scheduled, 3);
    assert_eq!((r.on_time, r.late, r.expired), (1, 0, 2), "{r:?}");
    assert_eq!(r.succeeded, 1);
    assert_eq!(r.latency.count, 3);
    let lat = hist::decode(&r.histogram.latency).unwrap();
    // Every expired wait is recorded at more than the 1 s expiry. The
    // histogram keeps 3 significant digits, so a wait just above 1 s shares
    // its bucket with values down to the bucket's lowest equivalent (999.8
    // ms): count only the buckets wholly below it.
    let below_expiry = lat.lowest_equivalent(1_000_000_000) - 1;
    assert_eq!(lat.count_between(0, below_expiry), 0, "{:?}", r.latency);
    assert!(r.latency.max_ns >= 1_000_000_000, "{:?}", r.latency);
}

#[test]
fn the_ledger_must_add_up_exactly() {
    let s = serve(Wire::H1, Behaviour::ok(), None);
    let mut c = Client::connect(&spec(s.addr, Protocol::H1 { keepalive: true }, 1, 1)).unwrap();
    let good = run(&mut c, open(1000.0, 50));
    assert_eq!(good.scheduled, 50);
    let mut bad = good.clone();
    bad.on_time -= 1;
    assert!(bad.check_invariants().unwrap_err().contains("scheduled 50"));
    let mut bad = good.clone();
    bad.late += 1;
    bad.scheduled += 1;
    assert!(bad.check_invariants().unwrap_err().contains("sent 50"));
    let mut bad = good.clone();
    bad.expired += 1;
    bad.scheduled += 1;
    assert!(bad
        .check_invariants()
        .unwrap_err()
        .contains("latency histogram"));
}

#[test]
fn merged_histograms_hold_every_success_of_every_repeat() {
    let s = serve(Wire::H1, Behaviour::ok(), None);
    let mut c = Client::connect(&spec(s.addr, Protocol::H1 { keepalive: true }, 2, 1)).unwrap();
    let a = run(&mut c, fixed(300));
    let b = run(&mut c, fixed(200));
    let m =
        hist::merge_encoded([a.histogram.latency.as_str(), b.histogram.latency.as_str()]).unwrap();
    assert_eq!(m.len(), 500);
}

#[test]
fn refuses_specs_it_cannot_run() {
    let addr: SocketAddr = "127.0.0.1:9".parse().unwrap();
    let e = Client::connect(&spec(addr, Protocol::H1 { keepalive: true }, 1, 2)).err();
    assert!(matches!(e, Some(LoadError::Spec(_))));
    let e = Client::connect(&spec("10.0.0.1:80".parse().unwrap(), Protocol::H2c, 1, 1)).err();
    assert!(matches!(e, Some(LoadError::NotLoopback { .. })));
    let e = Client::connect(&spec(addr, Protocol::H1 { keepalive: true }, 0, 1)).err();
    assert!(matches!(e, Some(LoadError::Spec(_))));
}

/// An HTTP/1.1 keep-alive server on plain threads that takes exactly
/// `connections` connections (then closes its listener: a reconnect is
/// refused), answers `answers` requests in all, and then closes every
/// connection: a target that dies mid-run.
fn dying_server(connections: usize, answers: u64) -> SocketAddr {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let served = Arc::new(AtomicU64::new(0));
    std::thread::spawn(move || {
        for _ in 0..connections {
            let (mut s, _) = listener.accept().unwrap();
            let served = served.clone();
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                        match s.read(&mut chunk) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                    let end = buf.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
                    buf.drain(..end);
                    if served.fetch_add(1, Ordering::Relaxed) >= answers {
                        return;
                    }
                    let r = format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n{BODY}",
                        BODY.len()
                    );
                    if s.write_all(r.as_bytes()).is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

/// An open loop whose target dies stops scheduling once every stream is
/// given up: of a 10 s schedule at 2000 requests/s (20 000 requests), what
/// it schedules after the target's last answer is at most what 100 ms of
/// the schedule holds (200), not the rest of the window.
#[test]
fn an_open_loop_stops_scheduling_within_100_ms_of_schedule_when_its_target_is_gone() {
    const RATE: f64 = 2000.0;
    const ANSWERS: u64 = 200;
    let addr = dying_server(2, ANSWERS);
    let mut c = Client::connect(&spec(addr, Protocol::H1 { keepalive: true }, 2, 1)).unwrap();
    let r = run(&mut c, open(RATE, 10_000));
    assert_eq!(r.succeeded, ANSWERS, "{:?}", r.errors);
    let after = r.scheduled - r.succeeded;
    let bound = (RATE * 0.1) as u64;
    assert!(
        after <= bound,
        "{after} requests scheduled after the target's last answer (at most {bound}): {r:?}"
    );
    assert!(r.sent - r.succeeded <= bound, "{r:?}");
}
