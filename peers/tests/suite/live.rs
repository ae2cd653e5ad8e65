//! `--live`: WebSocket echo, server-sent events and TCP echo on the one
//! port, the fixed routes still served, and `--wrong-echo`.

use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_tungstenite::tungstenite::Message;

use super::*;

async fn connect(port: u16) -> TcpStream {
    TcpStream::connect(("127.0.0.1", port)).await.unwrap()
}

/// Read until `n` blank-line-ended events (chunk framing included) came.
async fn read_until(s: &mut TcpStream, needle: &str, n: usize) -> String {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while String::from_utf8_lossy(&got).matches(needle).count() < n {
        let k = s.read(&mut buf).await.unwrap();
        assert!(k > 0, "closed early: {}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..k]);
    }
    String::from_utf8_lossy(&got).into_owned()
}

#[tokio::test]
async fn live_mode_echoes_tcp_and_websocket_and_streams_events() {
    let peer = Peer::start(&["--live", "--sse-interval-ms", "5000"]);
    // TCP echo: a connection that does not open with an HTTP request.
    let mut t = connect(peer.port).await;
    t.write_all(b"c1 n0 s1\nc1 n0 s2\n").await.unwrap();
    assert_eq!(read_until(&mut t, "\n", 2).await, "c1 n0 s1\nc1 n0 s2\n");
    t.shutdown().await.unwrap();
    let mut rest = Vec::new();
    t.read_to_end(&mut rest).await.unwrap();
    assert!(rest.is_empty(), "the echo closes after our end of stream");

    // WebSocket echo.
    let s = connect(peer.port).await;
    let url = format!("ws://127.0.0.1:{}/ws", peer.port);
    let (mut ws, resp) = tokio_tungstenite::client_async(url, s).await.unwrap();
    assert_eq!(resp.status(), 101);
    ws.send(Message::text("c2 n7 s1")).await.unwrap();
    assert_eq!(ws.next().await.unwrap().unwrap(), Message::text("c2 n7 s1"));
    ws.close(None).await.unwrap();

    // SSE: the open event at once; the query sets the heartbeat interval.
    let mut e = connect(peer.port).await;
    e.write_all(b"GET /sse?interval_ms=20 HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let got = read_until(&mut e, "\n\n", 3).await;
    assert!(got.starts_with("HTTP/1.1 200 OK\r\n"), "{got}");
    assert!(got.contains("content-type: text/event-stream\r\n"), "{got}");
    assert!(got.contains("event: open\ndata: rig-peer\n\n"), "{got}");
    assert!(got.contains("event: heartbeat\ndata: 1\n\n"), "{got}");

    // The fixed routes, as in the default mode.
    let mut h = connect(peer.port).await;
    h.write_all(b"GET /plain HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut resp = String::new();
    h.read_to_string(&mut resp).await.unwrap();
    assert!(resp.starts_with("HTTP/1.1 200 OK\r\n"), "{resp}");
    assert!(resp.ends_with("\r\n\r\nhello"), "{resp}");
}

#[tokio::test]
async fn wrong_echo_puts_an_x_in_front_of_every_echo() {
    let peer = Peer::start(&["--live", "--wrong-echo"]);
    let mut t = connect(peer.port).await;
    t.write_all(b"c1 n0 s1\n").await.unwrap();
    assert_eq!(read_until(&mut t, "\n", 1).await, "xc1 n0 s1\n");
    let s = connect(peer.port).await;
    let url = format!("ws://127.0.0.1:{}/ws", peer.port);
    let (mut ws, _) = tokio_tungstenite::client_async(url, s).await.unwrap();
    ws.send(Message::text("c1 n1 s1")).await.unwrap();
    assert_eq!(
        ws.next().await.unwrap().unwrap(),
        Message::text("xc1 n1 s1")
    );
}
