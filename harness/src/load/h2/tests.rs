//! The client against the `h2` crate's server, in process: many streams
//! on one connection under the server's stream limit, bodies beyond every
//! window, wrong answers, a reset stream, GOAWAY both ways, the server's
//! PINGs, header blocks split over CONTINUATION frames and a dynamic table
//! that keeps evicting.

use std::cell::Cell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;

use bytes::Bytes;

use super::*;
use crate::load::{Endpoint, Expect, LoadSpec, Protocol};

#[derive(Clone)]
struct Answer {
    status: u16,
    content_type: &'static str,
    body: Bytes,
    /// Reset the stream with this code instead of answering.
    reset: Option<h2::Reason>,
    /// One more response header, `x-pad`, this long: past 16 KiB the
    /// server splits the header block into HEADERS + CONTINUATION.
    pad: usize,
}

fn ok(body: impl Into<Bytes>) -> Answer {
    Answer {
        status: 200,
        content_type: "text/plain",
        body: body.into(),
        reset: None,
        pad: 0,
    }
}

#[derive(Default)]
struct ServerOpts {
    max_streams: Option<u32>,
    /// Say GOAWAY (gracefully) when this many requests have come.
    goaway_after: Option<u32>,
    /// PINGs the server sends on each connection, one after another's ACK.
    pings: u32,
}

/// What the server saw.
#[derive(Default)]
struct Seen {
    conns: Cell<u32>,
    requests: Cell<u32>,
    open: Cell<u32>,
    max_open: Cell<u32>,
    /// Connections whose client went away with GOAWAY and a clean close.
    clean_ends: Cell<u32>,
    /// PING ACKs the server received.
    pongs: Cell<u32>,
}

/// An h2 server on this thread's `LocalSet`, answering request i with
/// `answers[i % len]`.
fn serve(answers: Vec<Answer>, opts: ServerOpts) -> (SocketAddr, Rc<Seen>) {
    let std = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    std.set_nonblocking(true).unwrap();
    let addr = std.local_addr().unwrap();
    let seen = Rc::new(Seen::default());
    let (s, answers, opts) = (seen.clone(), Rc::new(answers), Rc::new(opts));
    tokio::task::spawn_local(async move {
        let l = tokio::net::TcpListener::from_std(std).unwrap();
        while let Ok((tcp, _)) = l.accept().await {
            s.conns.set(s.conns.get() + 1);
            let (s, answers, opts) = (s.clone(), answers.clone(), opts.clone());
            tokio::task::spawn_local(server_conn(tcp, s, answers, opts));
        }
    });
    (addr, seen)
}

async fn server_conn(
    tcp: tokio::net::TcpStream,
    seen: Rc<Seen>,
    answers: Rc<Vec<Answer>>,
    opts: Rc<ServerOpts>,
) {
    let mut b = h2::server::Builder::new();
    if let Some(m) = opts.max_streams {
        b.max_concurrent_streams(m);
    }
    let Ok(mut conn) = b.handshake::<_, Bytes>(tcp).await else {
        return;
    };
    if opts.pings > 0 {
        let mut pp = conn.ping_pong().expect("taken once");
        let (seen, n) = (seen.clone(), opts.pings);
        tokio::task::spawn_local(async move {
            for _ in 0..n {
                if pp.ping(h2::Ping::opaque()).await.is_err() {
                    return;
                }
                seen.pongs.set(seen.pongs.get() + 1);
            }
        });
    }
    let mut served = 0;
    loop {
        let Some(r) = conn.accept().await else {
            seen.clean_ends.set(seen.clean_ends.get() + 1);
            return;
        };
        let Ok((_req, mut respond)) = r else { return };
        let i = seen.requests.get();
        seen.requests.set(i + 1);
        served += 1;
        if opts.goaway_after == Some(served) {
            conn.graceful_shutdown();
        }
        let a = answers[i as usize % answers.len()].clone();
        let seen = seen.clone();
        tokio::task::spawn_local(async move {
            seen.open.set(seen.open.get() + 1);
            seen.max_open.set(seen.max_open.get().max(seen.open.get()));
            // Let the other streams' requests arrive meanwhile.
            for _ in 0..3 {
                tokio::task::yield_now().await;
            }
            seen.open.set(seen.open.get() - 1);
            if let Some(r) = a.reset {
                respond.send_reset(r);
                return;
            }
            // A pad unlike the last one, so that HPACK's dynamic table
            // keeps changing (and evicting) between responses.
            let pad = format!("{i}-").repeat(a.pad.div_ceil(2))[..a.pad].to_string();
            let mut resp = http::Response::builder()
                .status(a.status)
                .header("content-type", a.content_type);
            if a.pad > 0 {
                resp = resp.header("x-pad", pad);
            }
            let resp = resp.body(()).unwrap();
            if let Ok(mut send) = respond.send_response(resp, false) {
                send_body(&mut send, a.body).await;
            }
        });
    }
}

/// Send `body` as flow control allows.
async fn send_body(send: &mut h2::SendStream<Bytes>, mut body: Bytes) {
    while !body.is_empty() {
        send.reserve_capacity(body.len());
        let Some(Ok(n)) = poll_fn(|cx| send.poll_capacity(cx)).await else {
            return;
        };
        let chunk = body.split_to(n.min(body.len()));
        if send.send_data(chunk, body.is_empty()).is_err() {
            return;
        }
    }
    let _ = send.send_data(Bytes::new(), true);
}

fn setup(addr: SocketAddr, streams: usize, body: Bytes) -> Arc<Setup> {
    let spec = LoadSpec {
        addr,
        protocol: Protocol::H2c,
        endpoint: Endpoint {
            path: "/plain".into(),
            expect: Expect::ok_exact(Some("text/plain"), body),
        },
        connections: 1,
        streams,
        client_cpus: None,
        threads: Some(1),
        spin: None,
        request_timeout: crate::load::REQUEST_TIMEOUT,
        deadline: None,
    };
    Arc::new(Setup::new(&spec).unwrap())
}

/// Run `f` on a current-thread runtime inside a `LocalSet`. A client that
/// stalls (a window never given back) fails here instead of hanging.
fn local<F: std::future::Future<Output = ()>>(f: F) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let bounded = async { tokio::time::timeout(Duration::from_secs(60), f).await };
    tokio::task::LocalSet::new()
        .block_on(&rt, bounded)
        .expect("the client finished within 60 s");
}

/// `per_stream` requests on each stream of one connection, concurrently;
/// the errors by kind, and the streams back.
async fn drive(
    setup: &Arc<Setup>,
    stats: &Rc<Stats>,
    per_stream: usize,
) -> (BTreeMap<String, u32>, Vec<H2Stream>) {
    let (wire, driver) = handshake(setup, stats).await.unwrap();
    let conn = H2Conn::new(setup.clone(), wire, driver);
    let streams = (0..setup.streams).map(|i| H2Stream::new(conn.clone(), i));
    run_on(streams.collect(), stats, per_stream).await
}

async fn run_on(
    streams: Vec<H2Stream>,
    stats: &Rc<Stats>,
    per_stream: usize,
) -> (BTreeMap<String, u32>, Vec<H2Stream>) {
    let tasks: Vec<_> = streams
        .into_iter()
        .map(|mut s| {
            let stats = stats.clone();
            tokio::task::spawn_local(async move {
                let mut errors = BTreeMap::new();
                for _ in 0..per_stream {
                    if let Err(k) = s.request(&stats).await {
                        *errors.entry(k).or_insert(0) += 1;
                    }
                }
                (errors, s)
            })
        })
        .collect();
    let mut errors = BTreeMap::new();
    let mut streams = Vec::new();
    for t in tasks {
        let (e, s) = t.await.unwrap();
        for (k, n) in e {
            *errors.entry(k).or_insert(0) += n;
        }
        streams.push(s);
    }
    (errors, streams)
}

use std::collections::BTreeMap;

#[test]
fn many_streams_share_one_connection_within_the_servers_stream_limit() {
    local(async {
        let opts = ServerOpts {
            max_streams: Some(4),
            ..ServerOpts::default()
        };
        let (addr, seen) = serve(vec![ok("hello")], opts);
        let setup = setup(addr, 16, Bytes::from_static(b"hello"));
        let stats = Rc::new(Stats::new());
        let (errors, _) = drive(&setup, &stats, 50).await;
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(seen.requests.get(), 16 * 50);
        assert_eq!(seen.conns.get(), 1);
        assert_eq!(seen.max_open.get(), 4);
        assert_eq!(stats.handshakes.borrow().h2, 1);
    });
}

#[test]
fn bodies_beyond_the_stream_and_connection_windows_arrive_whole() {
    // 64 KiB + 1 is past the 65 535 bytes every window starts with; 3 MiB
    // is past the 1 MiB stream window, and 8 of them past the 16 MiB
    // connection window.
    for len in [64 * 1024 + 1, 3 << 20] {
        local(async move {
            let body: Bytes = (0..len).map(|i| (i % 251) as u8).collect::<Vec<_>>().into();
            let (addr, seen) = serve(vec![ok(body.clone())], ServerOpts::default());
            let setup = setup(addr, 2, body);
            let stats = Rc::new(Stats::new());
            let (errors, _) = drive(&setup, &stats, 4).await;
            assert!(errors.is_empty(), "{len}: {errors:?}");
            assert_eq!(seen.requests.get(), 8);
        });
    }
}

#[test]
fn a_wrong_status_content_type_or_body_is_counted_under_its_kind() {
    local(async {
        let answers = vec![
            ok("hello"),
            Answer {
                status: 503,
                ..ok("hello")
            },
            Answer {
                content_type: "text/html",
                ..ok("hello")
            },
            ok("hellO"),
            ok("hello, and more"),
        ];
        let (addr, _) = serve(answers, ServerOpts::default());
        let setup = setup(addr, 1, Bytes::from_static(b"hello"));
        let stats = Rc::new(Stats::new());
        let (errors, _) = drive(&setup, &stats, 10).await;
        let want: BTreeMap<String, u32> = [
            ("status 503".to_string(), 2),
            ("content-type".to_string(), 2),
            ("body mismatch".to_string(), 4),
        ]
        .into();
        assert_eq!(errors, want);
        // Wrong answers are the requests' failures, not the connection's.
        assert_eq!(stats.handshakes.borrow().h2, 1);
    });
}

#[test]
fn a_reset_stream_fails_its_request_only() {
    local(async {
        let answers = vec![
            ok("hello"),
            Answer {
                reset: Some(h2::Reason::INTERNAL_ERROR),
                ..ok("hello")
            },
        ];
        let (addr, seen) = serve(answers, ServerOpts::default());
        let setup = setup(addr, 1, Bytes::from_static(b"hello"));
        let stats = Rc::new(Stats::new());
        let (errors, _) = drive(&setup, &stats, 10).await;
        let want: BTreeMap<String, u32> = [("h2: reset INTERNAL_ERROR".to_string(), 5)].into();
        assert_eq!(errors, want);
        assert_eq!(seen.conns.get(), 1);
    });
}

#[test]
fn a_servers_goaway_moves_the_next_requests_to_a_new_connection() {
    local(async {
        let opts = ServerOpts {
            goaway_after: Some(10),
            ..ServerOpts::default()
        };
        let (addr, seen) = serve(vec![ok("hello")], opts);
        let setup = setup(addr, 1, Bytes::from_static(b"hello"));
        let stats = Rc::new(Stats::new());
        let (errors, _) = drive(&setup, &stats, 25).await;
        assert!(errors.is_empty(), "{errors:?}");
        // 10, 10 and 5 requests on three connections.
        assert_eq!(seen.requests.get(), 25);
        assert_eq!(seen.conns.get(), 3);
        assert_eq!(stats.handshakes.borrow().h2, 3);
    });
}

#[test]
fn go_away_sends_goaway_and_the_server_sees_a_clean_end() {
    local(async {
        let (addr, seen) = serve(vec![ok("hello")], ServerOpts::default());
        let setup = setup(addr, 4, Bytes::from_static(b"hello"));
        let stats = Rc::new(Stats::new());
        let (errors, streams) = drive(&setup, &stats, 5).await;
        assert!(errors.is_empty(), "{errors:?}");
        let conn = streams.into_iter().map(|mut s| s.release()).last().unwrap();
        assert!(conn.go_away(Duration::from_secs(5)).await);
        // The server's connection ends without an error once it has read
        // the GOAWAY and the close.
        for _ in 0..1000 {
            if seen.clean_ends.get() == 1 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        assert_eq!(seen.clean_ends.get(), 1);
    });
}

#[test]
fn the_request_block_decodes_to_the_four_pseudo_headers() {
    let long = format!("/{}", "x".repeat(300));
    for (https, path) in [(false, "/plain"), (true, "/"), (false, long.as_str())] {
        let mut block = request_block(https, "127.0.0.1:8080", path);
        let mut fields = Vec::new();
        httlib_hpack::Decoder::default()
            .decode(&mut block, &mut fields)
            .unwrap();
        let got: Vec<(Vec<u8>, Vec<u8>)> = fields.into_iter().map(|(n, v, _)| (n, v)).collect();
        let scheme: &[u8] = if https { b"https" } else { b"http" };
        let want: Vec<(Vec<u8>, Vec<u8>)> = [
            (&b":method"[..], &b"GET"[..]),
            (b":scheme", scheme),
            (b":path", path.as_bytes()),
            (b":authority", b"127.0.0.1:8080"),
        ]
        .iter()
        .map(|(n, v)| (n.to_vec(), v.to_vec()))
        .collect();
        assert_eq!(got, want, "{path}");
    }
}

#[test]
fn header_blocks_split_into_continuation_frames_and_a_changing_dynamic_table_decode() {
    local(async {
        // 40 000 B of header: HEADERS and two CONTINUATIONs at h2's 16 KiB
        // frames; 1 500 B pads that differ per response: indexed, then
        // evicted from the 4 096 B dynamic table two responses later.
        let answers = vec![
            Answer {
                pad: 40_000,
                ..ok("hello")
            },
            Answer {
                pad: 1_500,
                ..ok("hello")
            },
            ok("hello"),
        ];
        let (addr, seen) = serve(answers, ServerOpts::default());
        let setup = setup(addr, 4, Bytes::from_static(b"hello"));
        let stats = Rc::new(Stats::new());
        let (errors, _) = drive(&setup, &stats, 30).await;
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(seen.requests.get(), 4 * 30);
        assert_eq!(stats.handshakes.borrow().h2, 1);
    });
}

#[test]
fn the_servers_pings_are_acknowledged_while_requests_run_and_after() {
    local(async {
        let opts = ServerOpts {
            pings: 5,
            ..ServerOpts::default()
        };
        let (addr, seen) = serve(vec![ok("hello")], opts);
        let setup = setup(addr, 2, Bytes::from_static(b"hello"));
        let stats = Rc::new(Stats::new());
        let (errors, _streams) = drive(&setup, &stats, 20).await;
        assert!(errors.is_empty(), "{errors:?}");
        // The connection stays open with the streams: pings still in
        // flight when the requests ended are answered by the idle driver.
        // (Bounded by `local`'s 60 s: a PING never answered fails there.)
        while seen.pongs.get() < 5 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        assert_eq!(seen.pongs.get(), 5);
        assert_eq!(seen.conns.get(), 1);
    });
}
