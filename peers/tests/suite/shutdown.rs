//! SIGTERM/SIGINT: stop accepting, finish what is in flight, exit 0.
//!
//! "Promptly" is checked without a clock: the server reports on stderr when
//! its 5 s grace period ran out, so a clean exit without that line means the
//! open connections closed by themselves. The wait limit only stops a hung
//! test.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;

const HUNG: Duration = Duration::from_secs(30);

async fn exits_zero_on(sig: libc::c_int) {
    let mut peer = Peer::start(&[]);
    // An idle keep-alive connection must not hold the shutdown open.
    let mut sender = h1(tcp(peer.port).await).await;
    let got = read(
        sender
            .send_request(get("/plain", Version::HTTP_11))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(got.body, &b"hello"[..]);
    peer.signal(sig);
    let (status, stderr) = tokio::task::block_in_place(|| peer.wait(HUNG));
    assert_eq!(status.code(), Some(0), "stderr: {stderr}");
    assert!(!stderr.contains("grace period"), "stderr: {stderr}");
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_exits_zero_without_waiting_out_the_grace_period() {
    exits_zero_on(libc::SIGTERM).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn sigint_exits_zero_without_waiting_out_the_grace_period() {
    exits_zero_on(libc::SIGINT).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_stops_accepting_but_finishes_a_request_in_flight() {
    let mut peer = Peer::start(&[]);
    let mut conn = tcp(peer.port).await;
    // Half a request: the connection is busy, not idle, when the signal lands.
    conn.write_all(b"GET /plain HTTP/1.1\r\nhost: localhost\r\n")
        .await
        .unwrap();
    // Let the server read those bytes first: only then is it committed to
    // HTTP/1.1 with a request under way. A connection still sniffing for the
    // h2 preface at the signal is closed, like an idle one.
    tokio::time::sleep(Duration::from_millis(500)).await;
    peer.signal(libc::SIGTERM);
    // The listener closing is the sign the signal was handled.
    let refused = async {
        loop {
            match TcpStream::connect(("127.0.0.1", peer.port)).await {
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => break,
                _ => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        }
    };
    tokio::time::timeout(HUNG, refused)
        .await
        .expect("rig-peer kept accepting after SIGTERM");
    conn.write_all(b"\r\n").await.unwrap();
    let mut response = Vec::new();
    conn.read_to_end(&mut response).await.unwrap();
    let response = String::from_utf8(response).unwrap();
    assert!(response.starts_with("HTTP/1.1 200 OK\r\n"), "{response}");
    assert!(response.contains("\r\nconnection: close\r\n"), "{response}");
    assert!(response.ends_with("\r\n\r\nhello"), "{response}");
    let (status, stderr) = tokio::task::block_in_place(|| peer.wait(HUNG));
    assert_eq!(status.code(), Some(0), "stderr: {stderr}");
}
