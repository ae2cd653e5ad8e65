//! `--h3`: HTTP/3 over QUIC on the TLS port number, the same routes and
//! bytes as over TCP, and the drain on SIGTERM.

use std::net::SocketAddr;

use bytes::{Buf, BytesMut};
use quinn::crypto::rustls::QuicClientConfig;
use tokio::sync::Barrier;

use super::*;

const HUNG: Duration = Duration::from_secs(30);

type SendRequest = h3::client::SendRequest<h3_quinn::OpenStreams, Bytes>;
type RequestStream = h3::client::RequestStream<h3_quinn::BidiStream<Bytes>, Bytes>;

/// One QUIC connection to rig-peer, verified against the fixture CA as
/// `localhost`, with its h3 driver running on a task.
struct H3 {
    // Kept so the connection's UDP socket outlives the test body.
    _endpoint: quinn::Endpoint,
    quic: quinn::Connection,
    send: SendRequest,
}

fn client_endpoint(stream_window: Option<u32>) -> quinn::Endpoint {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_root_certificates(fixture_roots())
        .with_no_client_auth();
    tls.alpn_protocols = vec![b"h3".to_vec()];
    let mut config = quinn::ClientConfig::new(Arc::new(QuicClientConfig::try_from(tls).unwrap()));
    if let Some(window) = stream_window {
        let mut transport = quinn::TransportConfig::default();
        transport.stream_receive_window(window.into());
        config.transport_config(Arc::new(transport));
    }
    let mut endpoint = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
    endpoint.set_default_client_config(config);
    endpoint
}

async fn quic_connect(
    endpoint: &quinn::Endpoint,
    port: u16,
) -> Result<quinn::Connection, quinn::ConnectionError> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    endpoint.connect(addr, "localhost").unwrap().await
}

async fn h3(port: u16, stream_window: Option<u32>) -> H3 {
    let endpoint = client_endpoint(stream_window);
    let quic = quic_connect(&endpoint, port)
        .await
        .expect("QUIC handshake with rig-peer (ALPN h3, fixture CA)");
    assert_eq!(
        quic.handshake_data()
            .unwrap()
            .downcast::<quinn::crypto::rustls::HandshakeData>()
            .unwrap()
            .protocol
            .as_deref(),
        Some(&b"h3"[..])
    );
    let (mut driver, send) = h3::client::new(h3_quinn::Connection::new(quic.clone()))
        .await
        .unwrap();
    tokio::spawn(async move { std::future::poll_fn(|cx| driver.poll_close(cx)).await });
    H3 {
        _endpoint: endpoint,
        quic,
        send,
    }
}

/// Sends `GET path` and reads the response head.
async fn start_get(send: &mut SendRequest, path: &str) -> (RequestStream, http::Response<()>) {
    let req = http::Request::get(format!("https://localhost{path}"))
        .body(())
        .unwrap();
    let mut stream = send.send_request(req).await.unwrap();
    stream.finish().await.unwrap();
    let head = stream.recv_response().await.unwrap();
    (stream, head)
}

async fn read_body(stream: &mut RequestStream) -> Bytes {
    let mut body = BytesMut::new();
    while let Some(mut chunk) = stream.recv_data().await.unwrap() {
        body.extend_from_slice(&chunk.copy_to_bytes(chunk.remaining()));
    }
    body.freeze()
}

/// `GET path`: the response with its body read in full.
async fn get3(send: &mut SendRequest, path: &str) -> Got {
    let (mut stream, head) = start_get(send, path).await;
    let header = |name| {
        head.headers()
            .get(name)
            .map(|v: &http::HeaderValue| v.to_str().unwrap().to_owned())
    };
    let content_length = header(http::header::CONTENT_LENGTH);
    let got = Got {
        version: head.version(),
        status: head.status().as_u16(),
        content_type: header(http::header::CONTENT_TYPE).unwrap_or_default(),
        connection: header(http::header::CONNECTION),
        body: read_body(&mut stream).await,
    };
    assert_eq!(
        content_length,
        Some(got.body.len().to_string()),
        "{path}: content-length, as hyper sets it on h1 and h2"
    );
    got
}

fn check(got: &Got, path: &str, status: u16, content_type: &str, body: &[u8]) {
    assert_eq!(got.version, Version::HTTP_3, "{path}");
    assert_eq!(got.status, status, "{path}");
    assert_eq!(got.content_type, content_type, "{path}");
    assert_eq!(got.connection, None, "{path}: no connection header in h3");
    assert_eq!(got.body, body, "{path}");
}

#[tokio::test]
async fn serves_every_route_over_h3_on_the_tls_port_number_over_udp() {
    let peer = Peer::start_tls_with(&["--h3"]);
    let mut conn = h3(peer.port, None).await;
    for (path, status, content_type, body) in expected() {
        let got = get3(&mut conn.send, path).await;
        check(&got, path, status, content_type, &body);
    }
    // TCP on the same port number still serves TLS (h2 here) beside it.
    let tcp = tls(peer.port, "localhost", &[b"h2"]).await.unwrap();
    assert_eq!(tcp.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
}

#[tokio::test]
async fn answers_404_not_found_over_h3_for_other_methods_on_known_paths() {
    let peer = Peer::start_tls_with(&["--h3"]);
    let mut conn = h3(peer.port, None).await;
    let req = http::Request::post("https://localhost/plain")
        .body(())
        .unwrap();
    let mut stream = conn.send.send_request(req).await.unwrap();
    stream.finish().await.unwrap();
    let head = stream.recv_response().await.unwrap();
    assert_eq!(head.status(), 404);
    assert_eq!(head.headers()[http::header::CONTENT_TYPE], "text/plain");
    assert_eq!(read_body(&mut stream).await, &b"not found"[..]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serves_twenty_requests_over_four_concurrent_streams_of_one_h3_connection() {
    let peer = Peer::start_tls_with(&["--h3"]);
    let conn = h3(peer.port, None).await;
    let routes = expected();
    // Each round all four streams are opened before any is read, so four
    // requests are in flight on the connection at once.
    let barrier = Arc::new(Barrier::new(4));
    let mut tasks = Vec::new();
    for client in 0..4 {
        let mut send = conn.send.clone();
        let routes = routes.clone();
        let barrier = Arc::clone(&barrier);
        tasks.push(tokio::spawn(async move {
            let mut ids = Vec::new();
            for round in 0..5 {
                let (path, status, content_type, body) = &routes[(client + round) % routes.len()];
                let req = http::Request::get(format!("https://localhost{path}"))
                    .body(())
                    .unwrap();
                let mut stream = send.send_request(req).await.unwrap();
                stream.finish().await.unwrap();
                ids.push(stream.id());
                barrier.wait().await;
                let head = stream.recv_response().await.unwrap();
                assert_eq!(head.status(), *status, "{path}");
                assert_eq!(head.headers()[http::header::CONTENT_TYPE], *content_type);
                assert_eq!(read_body(&mut stream).await, &body[..], "{path}");
            }
            ids
        }));
    }
    let mut ids = Vec::new();
    for task in tasks {
        ids.extend(task.await.unwrap());
    }
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 20, "20 requests, each its own stream");
    assert!(
        conn.quic.close_reason().is_none(),
        "one connection throughout"
    );
}

#[test]
fn h3_without_tls_is_refused_naming_the_flag() {
    let out = Command::new(env!("CARGO_BIN_EXE_rig-peer"))
        .args(["--port", "0", "--h3"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "clap's usage error");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--tls"), "{stderr}");
}

/// H3_NO_ERROR (RFC 9114 §8.1), the code a clean h3 close carries.
const H3_NO_ERROR: u32 = 0x100;

fn closed_cleanly(err: &quinn::ConnectionError) -> bool {
    matches!(err, quinn::ConnectionError::ApplicationClosed(close)
        if close.error_code == quinn::VarInt::from_u32(H3_NO_ERROR))
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_closes_an_idle_h3_connection_with_goaway_and_exits_zero_promptly() {
    let mut peer = Peer::start_tls_with(&["--h3"]);
    let mut conn = h3(peer.port, None).await;
    assert_eq!(get3(&mut conn.send, "/plain").await.body, &b"hello"[..]);
    peer.signal(libc::SIGTERM);
    let closed = tokio::time::timeout(HUNG, conn.quic.closed())
        .await
        .expect("rig-peer left the idle h3 connection open after SIGTERM");
    assert!(closed_cleanly(&closed), "{closed:?}");
    let req = http::Request::get("https://localhost/plain")
        .body(())
        .unwrap();
    assert!(
        matches!(
            conn.send.send_request(req).await,
            Err(h3::error::StreamError::RemoteClosing { .. })
        ),
        "a GOAWAY came before the close"
    );
    let (status, stderr) = tokio::task::block_in_place(|| peer.wait(HUNG));
    assert_eq!(status.code(), Some(0), "stderr: {stderr}");
    assert!(!stderr.contains("grace period"), "stderr: {stderr}");
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_stops_accepting_h3_but_delivers_a_response_in_flight_whole() {
    let mut peer = Peer::start_tls_with(&["--h3"]);
    // A 4 KiB stream window: the 64 KiB /bytes body stays in flight until
    // we read it, so the server is mid-response when the signal lands.
    let mut conn = h3(peer.port, Some(4096)).await;
    let (mut bytes, head) = start_get(&mut conn.send, "/bytes").await;
    assert_eq!(head.status(), 200);
    peer.signal(libc::SIGTERM);

    // New QUIC connections are refused once the signal is handled...
    let fresh = client_endpoint(None);
    let refused = async {
        loop {
            match quic_connect(&fresh, peer.port).await {
                Err(quinn::ConnectionError::ConnectionClosed(close))
                    if close.error_code == quinn::TransportErrorCode::CONNECTION_REFUSED =>
                {
                    break
                }
                _ => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        }
    };
    tokio::time::timeout(HUNG, refused)
        .await
        .expect("rig-peer kept accepting QUIC connections after SIGTERM");
    // ...and so is TCP on the same port number.
    assert_eq!(
        TcpStream::connect(("127.0.0.1", peer.port))
            .await
            .unwrap_err()
            .kind(),
        std::io::ErrorKind::ConnectionRefused
    );
    // The open connection got a GOAWAY: no new request on it.
    let goaway = async {
        loop {
            let req = http::Request::get("https://localhost/plain")
                .body(())
                .unwrap();
            match conn.send.send_request(req).await {
                Err(h3::error::StreamError::RemoteClosing { .. }) => break,
                _ => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        }
    };
    tokio::time::timeout(HUNG, goaway)
        .await
        .expect("no GOAWAY on the open h3 connection after SIGTERM");

    // The response under way still arrives whole, then a clean close.
    let expected_bytes: Vec<u8> = (0..65536usize).map(|i| (i % 251) as u8).collect();
    assert_eq!(read_body(&mut bytes).await, expected_bytes);
    let closed = tokio::time::timeout(HUNG, conn.quic.closed())
        .await
        .expect("rig-peer left the drained h3 connection open");
    assert!(closed_cleanly(&closed), "{closed:?}");
    let (status, stderr) = tokio::task::block_in_place(|| peer.wait(HUNG));
    assert_eq!(status.code(), Some(0), "stderr: {stderr}");
    assert!(!stderr.contains("grace period"), "stderr: {stderr}");
}

#[test]
fn h3_refuses_a_udp_port_held_by_another_socket_naming_the_flag() {
    let held = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = held.local_addr().unwrap().port().to_string();
    let dir = tls_dir();
    let out = Command::new(env!("CARGO_BIN_EXE_rig-peer"))
        .args(["--port", &port, "--tls", "--h3", "--cert"])
        .arg(dir.join("localhost.pem"))
        .arg("--key")
        .arg(dir.join("localhost.key"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr: {stderr}");
    assert!(out.stdout.is_empty(), "no READY without the UDP port");
    assert!(
        stderr.contains(&format!(
            "--h3 --addr 127.0.0.1 --port {port}: UDP port(s) [{port}] already in use"
        )),
        "{stderr}"
    );
}
