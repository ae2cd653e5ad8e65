//! `--live`: long-lived connections on the one port — WebSocket echo,
//! server-sent events and raw TCP echo — for rig's `live` suite.
//!
//! A separate mode, not three more routes of the default server: the
//! default server's per-request costs are a gate (`config/gates/peer.toml`,
//! exact allocations and copied bytes per request), and a streaming body or
//! an upgrade path would change the types its hot path moves around. In
//! `--live` mode the fixed routes are still served (through a boxed body, so
//! their costs here are not the gate's), plus:
//!
//! - `GET /ws`: an HTTP/1.1 upgrade to WebSocket; every text or binary
//!   message comes back unchanged; a close frame is answered and the
//!   connection closed.
//! - `GET /sse[?interval_ms=N]`: `text/event-stream`: at once the event
//!   `event: open` / `data: rig-peer`, then `event: heartbeat` / `data: <n>`
//!   (n = 1, 2, …) every N ms (default `--sse-interval-ms`).
//! - any connection whose first four bytes are neither `GET ` nor `PRI `
//!   (the h2 preface) is a TCP echo: every byte comes back as it came.
//!
//! `--wrong-echo` (for rig's own negative tests) answers every WebSocket
//! message, and every line of a TCP echo, with an `x` in front.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;

use anyhow::Context;
use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use http_body_util::{combinators::BoxBody, BodyExt, Full};
use hyper::body::{Body, Frame, Incoming};
use hyper::header::{HeaderValue, CONNECTION, CONTENT_TYPE, SEC_WEBSOCKET_ACCEPT, UPGRADE};
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::signal::unix::{signal, SignalKind};
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::Role;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

/// What `--live` serves besides the fixed routes.
#[derive(Clone, Copy, Debug)]
pub struct LiveOptions {
    pub sse_interval: Duration,
    pub wrong_echo: bool,
}

type LiveBody = BoxBody<Bytes, Infallible>;

pub async fn serve(addr: SocketAddr, opts: LiveOptions) -> anyhow::Result<()> {
    let mut sigterm = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let mut sigint = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    let listener = TcpListener::bind(addr)
        .await
        .with_context(|| format!("--addr {} --port {}: bind", addr.ip(), addr.port()))?;
    let port = listener
        .local_addr()
        .context("reading the bound port")?
        .port();
    {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        writeln!(out, "READY port={port}").context("writing READY to stdout")?;
        out.flush().context("flushing READY to stdout")?;
    }
    let builder = Arc::new(Builder::new(TokioExecutor::new()));
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(err) => {
                    eprintln!("rig-peer: accept: {err}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            // Live connections are not drained: a hold is open-ended, so
            // waiting for it would only delay the exit.
            _ = sigterm.recv() => return Ok(()),
            _ = sigint.recv() => return Ok(()),
        };
        let _ = stream.set_nodelay(true);
        let builder = Arc::clone(&builder);
        tokio::spawn(async move {
            if is_http(&stream).await {
                let service = service_fn(move |req| handle(req, opts));
                let _ = builder
                    .serve_connection_with_upgrades(TokioIo::new(stream), service)
                    .await;
            } else {
                let _ = echo(stream, opts.wrong_echo).await;
            }
        });
    }
}

/// Whether the connection opens with `GET ` or `PRI ` (HTTP/1.1 or the h2
/// preface): peeked, so nothing is consumed.
async fn is_http(stream: &TcpStream) -> bool {
    let mut buf = [0u8; 4];
    loop {
        let n = match stream.peek(&mut buf).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => n,
        };
        let seen = &buf[..n];
        let maybe = b"GET ".starts_with(seen) || b"PRI ".starts_with(seen);
        if !maybe {
            return false;
        }
        if n == 4 {
            return true;
        }
        // A prefix so far: wait for more bytes before deciding.
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

async fn echo(stream: TcpStream, wrong: bool) -> std::io::Result<()> {
    let (r, mut w) = stream.into_split();
    if !wrong {
        let mut r = r;
        tokio::io::copy(&mut r, &mut w).await?;
        return w.shutdown().await;
    }
    let mut lines = BufReader::new(r);
    let mut line = Vec::new();
    loop {
        line.clear();
        if lines.read_until(b'\n', &mut line).await? == 0 {
            return w.shutdown().await;
        }
        w.write_all(b"x").await?;
        w.write_all(&line).await?;
    }
}

async fn handle(
    mut req: Request<Incoming>,
    opts: LiveOptions,
) -> Result<Response<LiveBody>, Infallible> {
    match req.uri().path() {
        "/ws" => Ok(upgrade(&mut req, opts.wrong_echo)),
        "/sse" => {
            let interval = interval_of(req.uri().query()).unwrap_or(opts.sse_interval);
            let mut r = Response::new(Sse::new(interval).boxed());
            r.headers_mut()
                .insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
            r.headers_mut()
                .insert("cache-control", HeaderValue::from_static("no-cache"));
            Ok(r)
        }
        _ => {
            let (status, ct, body) = crate::routes::fixed(req.method(), req.uri().path());
            let mut r = Response::new(Full::new(Bytes::from_static(body)).boxed());
            *r.status_mut() = status;
            r.headers_mut()
                .insert(CONTENT_TYPE, HeaderValue::from_static(ct));
            Ok(r)
        }
    }
}

/// `interval_ms=N` of a query string, N ≥ 1.
fn interval_of(query: Option<&str>) -> Option<Duration> {
    query?
        .split('&')
        .find_map(|kv| kv.strip_prefix("interval_ms="))
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|&ms| ms > 0)
        .map(Duration::from_millis)
}

fn plain(status: StatusCode, text: &'static str) -> Response<LiveBody> {
    let mut r = Response::new(Full::new(Bytes::from_static(text.as_bytes())).boxed());
    *r.status_mut() = status;
    r
}

/// Answer the upgrade request with 101 and serve the WebSocket once hyper
/// hands the connection over.
fn upgrade(req: &mut Request<Incoming>, wrong: bool) -> Response<LiveBody> {
    let key = match req.headers().get("sec-websocket-key") {
        Some(k) if has_token(req.headers().get(UPGRADE), "websocket") => k.as_bytes().to_vec(),
        _ => return plain(StatusCode::BAD_REQUEST, "expected a WebSocket upgrade"),
    };
    let on = hyper::upgrade::on(req);
    tokio::spawn(async move {
        if let Ok(upgraded) = on.await {
            let ws =
                WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, None).await;
            let _ = ws_echo(ws, wrong).await;
        }
    });
    let mut r = plain(StatusCode::SWITCHING_PROTOCOLS, "");
    let h = r.headers_mut();
    h.insert(UPGRADE, HeaderValue::from_static("websocket"));
    h.insert(CONNECTION, HeaderValue::from_static("Upgrade"));
    h.insert(
        SEC_WEBSOCKET_ACCEPT,
        HeaderValue::from_str(&derive_accept_key(&key)).expect("base64 is a header value"),
    );
    r
}

fn has_token(v: Option<&HeaderValue>, token: &str) -> bool {
    v.and_then(|v| v.to_str().ok())
        .is_some_and(|s| s.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
}

async fn ws_echo<S>(
    mut ws: WebSocketStream<S>,
    wrong: bool,
) -> Result<(), Box<dyn std::error::Error>>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    while let Some(msg) = ws.next().await {
        match msg? {
            Message::Text(t) if wrong => ws.send(Message::text(format!("x{}", t.as_str()))).await?,
            m @ (Message::Text(_) | Message::Binary(_)) => ws.send(m).await?,
            // Pings are answered and close frames echoed by tungstenite.
            _ => {}
        }
    }
    Ok(())
}

/// The event stream: the open event at once, then a heartbeat per tick.
struct Sse {
    opened: bool,
    n: u64,
    tick: tokio::time::Interval,
}

impl Sse {
    fn new(every: Duration) -> Sse {
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        // A late tick is sent late, not as a burst: the client counts
        // heartbeats, and a burst would count time it did not wait.
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        Sse {
            opened: false,
            n: 0,
            tick,
        }
    }
}

impl Body for Sse {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if !self.opened {
            self.opened = true;
            let open = Bytes::from_static(b"event: open\ndata: rig-peer\n\n");
            return Poll::Ready(Some(Ok(Frame::data(open))));
        }
        match self.tick.poll_tick(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(_) => {
                self.n += 1;
                let beat = format!("event: heartbeat\ndata: {}\n\n", self.n);
                Poll::Ready(Some(Ok(Frame::data(Bytes::from(beat)))))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interval_comes_from_the_query() {
        assert_eq!(
            interval_of(Some("a=1&interval_ms=250")),
            Some(Duration::from_millis(250))
        );
        assert_eq!(interval_of(Some("interval_ms=0")), None);
        assert_eq!(interval_of(Some("interval_ms=x")), None);
        assert_eq!(interval_of(None), None);
    }
}
