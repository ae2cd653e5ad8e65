//! HTTP/3 over QUIC, on quinn (QUIC, rustls with ring) and h3 (HTTP/3 and
//! QPACK).
//!
//! A connection is its own UDP socket (a quinn client endpoint bound to an
//! ephemeral loopback port), so every connection is its own 4-tuple at the
//! server as it is for TCP: the server demultiplexes C flows, not one. The
//! handshakes it made are counted as `udp` (sockets), `quic` (QUIC
//! handshakes done, ALPN `h3` agreed) and `h3` (HTTP/3 control streams set
//! up), the QUIC-side twins of `tcp`, `tls` and `h2`.
//!
//! Streams work as for HTTP/2 ([`super::h2`]): `streams` slots share one
//! connection, each with one request in flight; a broken connection is made
//! again by the first slot that needs it, and a slot whose connection fails
//! [`MAX_CONSECUTIVE_CONN_FAILURES`](super::MAX_CONSECUTIVE_CONN_FAILURES) times in a row is given up. The
//! connection's driver (h3's control-stream task) runs on this thread as
//! request work, not dispatcher spin.

use std::cell::Cell;
use std::future::poll_fn;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes};
use tokio::task::JoinHandle;

use super::conn::{bounded, Setup, Stats};
use super::generations::Generations;
use super::validate::{check, decode_body};
use super::LoadError;

/// ALPN of HTTP/3 (RFC 9114).
pub(crate) const ALPN: &str = "h3";

/// H3_NO_ERROR: the code of a graceful close (RFC 9114 §8.1).
const H3_NO_ERROR: u32 = 0x100;

/// The client's QUIC idle limit (the server's own limit may be shorter).
const IDLE_TIMEOUT: Duration = Duration::from_secs(600);

/// The most body bytes one response may have (a runaway server's stream
/// must not grow rig without bound).
const MAX_BODY: usize = 64 << 20;

/// What every HTTP/3 connection of one client shares.
pub(crate) struct H3Setup {
    client: quinn::ClientConfig,
    server_name: String,
    /// `https://authority/path`: h3 sends the scheme, authority and path
    /// as pseudo-headers from the URI.
    uri: http::Uri,
}

impl H3Setup {
    pub fn new(
        tls: rustls::ClientConfig,
        server_name: &str,
        authority: &str,
        path: &str,
    ) -> Result<H3Setup, LoadError> {
        let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(tls).map_err(|e| {
            LoadError::Spec(format!(
                "QUIC needs TLS 1.3 with an initial cipher suite: {e}"
            ))
        })?;
        let mut client = quinn::ClientConfig::new(Arc::new(crypto));
        let mut transport = quinn::TransportConfig::default();
        // No keep-alive PINGs (they would be traffic inside a counted
        // window's quiet time) and a long idle limit, so a connection held
        // idle (memory per connection, a quiesce) lives as long as the
        // server lets it; a dead server is found by the request timeout.
        transport.keep_alive_interval(None);
        transport.max_idle_timeout(Some(
            quinn::IdleTimeout::try_from(IDLE_TIMEOUT).expect("10 min fits a varint"),
        ));
        client.transport_config(Arc::new(transport));
        let uri = format!("https://{authority}{path}")
            .parse::<http::Uri>()
            .map_err(|e| LoadError::Spec(format!("h3 request URI for `{path}`: {e}")))?;
        Ok(H3Setup {
            client,
            server_name: server_name.to_string(),
            uri,
        })
    }
}

type Sender = h3::client::SendRequest<h3_quinn::OpenStreams, Bytes>;

/// One established connection: its socket, QUIC connection, the h3 handle
/// streams clone, and its driver.
struct Live {
    endpoint: quinn::Endpoint,
    quic: quinn::Connection,
    send: Sender,
    /// Set by the driver when h3 says the connection is closed.
    closed: Rc<Cell<bool>>,
    driver: JoinHandle<()>,
}

impl Drop for Live {
    fn drop(&mut self) {
        self.driver.abort();
    }
}

/// Make one HTTP/3 connection: a UDP socket, the QUIC handshake (ALPN
/// `h3`), then h3's control streams, each step [`bounded`].
async fn handshake(setup: &Arc<Setup>, stats: &Stats) -> Result<Rc<Live>, String> {
    let h3 = setup.h3.as_ref().expect("an h3 setup for an h3 client");
    let local: SocketAddr = match setup.addr {
        SocketAddr::V4(_) => (Ipv4Addr::LOCALHOST, 0).into(),
        SocketAddr::V6(_) => (Ipv6Addr::LOCALHOST, 0).into(),
    };
    let mut endpoint =
        quinn::Endpoint::client(local).map_err(|e| format!("udp: bind: {:?}", e.kind()))?;
    stats.handshakes.borrow_mut().udp += 1;
    endpoint.set_default_client_config(h3.client.clone());
    let connecting = endpoint
        .connect(setup.addr, &h3.server_name)
        .map_err(|e| format!("quic: {e}"))?;
    let secs = setup.request_timeout.as_secs_f64();
    let quic = bounded(
        setup,
        async { connecting.await.map_err(|e| quic_kind(&e)) },
        |at_deadline| match at_deadline {
            true => format!("quic: cut at the {}", super::DEADLINE),
            false => format!(
                "quic: no handshake within {secs} s (is anything serving QUIC on UDP port {}?)",
                setup.addr.port()
            ),
        },
    )
    .await?;
    stats.handshakes.borrow_mut().quic += 1;
    let made = bounded(
        setup,
        async {
            h3::client::new(h3_quinn::Connection::new(quic.clone()))
                .await
                .map_err(|e| format!("h3: {e}"))
        },
        |_| "h3: control streams not opened in time".to_string(),
    )
    .await;
    let (mut driver, send) = match made {
        Ok(m) => m,
        Err(k) => {
            quic.close(H3_NO_ERROR.into(), b"");
            return Err(k);
        }
    };
    stats.handshakes.borrow_mut().h3 += 1;
    let closed = Rc::new(Cell::new(false));
    let flag = closed.clone();
    let driver = tokio::task::spawn_local(super::dispatch::Timed(Box::pin(async move {
        let _ = poll_fn(|cx| driver.poll_close(cx)).await;
        flag.set(true);
    })));
    Ok(Rc::new(Live {
        endpoint,
        quic,
        send,
        closed,
        driver,
    }))
}

/// A short error kind for a failed QUIC handshake (kinds are counted by
/// their text, so addresses and connection ids stay out of it).
fn quic_kind(e: &quinn::ConnectionError) -> String {
    use quinn::ConnectionError as E;
    match e {
        E::TimedOut => "quic: handshake timed out".into(),
        E::ConnectionClosed(c) => {
            let reason = String::from_utf8_lossy(&c.reason);
            format!("quic: closed by the server: {}{reason}", c.error_code)
        }
        E::ApplicationClosed(c) => format!("quic: closed by the server: code {}", c.error_code),
        E::Reset => "quic: reset by the server".into(),
        E::TransportError(t) => format!("quic: {}", t.code),
        other => format!("quic: {other}"),
    }
}

/// A connection shared by the stream slots of one HTTP/3 connection.
pub(crate) struct H3Conn {
    setup: Arc<Setup>,
    /// The current connection and its generation.
    lives: Generations<Rc<Live>>,
}

impl H3Conn {
    /// Connect once (the client's handshake before any load).
    pub async fn connect(setup: Arc<Setup>, stats: &Stats) -> Result<Rc<H3Conn>, String> {
        let live = handshake(&setup, stats).await?;
        Ok(Rc::new(H3Conn {
            setup,
            lives: Generations::new(live),
        }))
    }

    fn dead(&self) -> bool {
        self.lives.dead()
    }

    /// Close gracefully: CONNECTION_CLOSE with H3_NO_ERROR. Returns the
    /// connection's endpoint, whose `wait_idle` ends with QUIC's draining
    /// period (three probe timeouts), by which the close has reached the
    /// server or the path is gone; `None` when it was closed already.
    pub fn close_now(&self) -> Option<quinn::Endpoint> {
        let (_, live) = self.lives.take()?;
        live.quic.close(H3_NO_ERROR.into(), b"");
        Some(live.endpoint.clone())
    }

    /// The current connection, made again if it broke or closed while
    /// idle (the server's idle timeout, GOAWAY).
    async fn get(&self, stats: &Stats) -> Result<(u64, Rc<Live>), String> {
        let usable = |l: &Rc<Live>| !l.closed.get();
        self.lives
            .get(usable, || handshake(&self.setup, stats))
            .await
    }
}

/// One stream slot: one request at a time on a shared HTTP/3 connection.
pub(crate) struct H3Stream {
    conn: Rc<H3Conn>,
    /// This slot's handle on the connection it last used, and its
    /// generation.
    sender: Option<(u64, Sender, Rc<Live>)>,
    /// When the last request's HEADERS were handed to QUIC.
    pub sent_at: Instant,
}

/// How one request went wrong: on its stream only, or with its connection.
enum Failure {
    Stream(String),
    Connection(String),
}

impl H3Stream {
    pub fn new(conn: Rc<H3Conn>) -> H3Stream {
        H3Stream {
            conn,
            sender: None,
            sent_at: Instant::now(),
        }
    }

    pub fn dead(&self) -> bool {
        self.conn.dead()
    }

    pub fn setup(&self) -> &Setup {
        &self.conn.setup
    }

    pub fn setup_arc(&self) -> Arc<Setup> {
        self.conn.setup.clone()
    }

    pub fn revive(&mut self) {
        self.conn.lives.succeeded();
    }

    /// Let go of the connection (before [`H3Conn::go_away`]).
    pub fn release(&mut self) -> Rc<H3Conn> {
        self.sender = None;
        self.conn.clone()
    }

    /// A request was abandoned (timeout): its future was dropped with its
    /// stream, which quinn resets; the connection stays.
    pub fn abandon(&mut self) {}

    pub async fn request(&mut self, stats: &Stats) -> Result<(), String> {
        // Retry once when the request never left because the connection
        // had closed while idle; after it left, a failure is the request's.
        for attempt in 0..2 {
            // A connection the driver saw close (idle timeout, the server's
            // close) is made again before the request, not tried and failed.
            let stale = self
                .sender
                .as_ref()
                .is_none_or(|(g, _, l)| self.conn.lives.stale(*g) || l.closed.get());
            if stale {
                self.sender = None;
                let (g, live) = self.conn.get(stats).await?;
                self.sender = Some((g, live.send.clone(), live));
            }
            let (generation, send, live) = self.sender.as_mut().expect("set above");
            let (generation, live) = (*generation, live.clone());
            self.sent_at = Instant::now();
            let setup = self.conn.setup.clone();
            match exchange(&setup, send, &live).await {
                Ok(r) => {
                    self.conn.lives.succeeded();
                    return r;
                }
                Err(Failure::Stream(k)) => return Err(k),
                Err(Failure::Connection(k)) => {
                    self.conn.lives.broke(generation);
                    self.sender = None;
                    if attempt == 0 && k == NOT_SENT {
                        continue;
                    }
                    return Err(k);
                }
            }
        }
        unreachable!("the second attempt returns")
    }
}

/// Error kind of a request that could not be opened on its connection.
const NOT_SENT: &str = "h3: connection closed before the request";

/// One request and its validated response. `Ok(Err(kind))`: the response
/// was wrong (status, content type, body), which says nothing about the
/// connection.
async fn exchange(
    setup: &Setup,
    send: &mut Sender,
    live: &Live,
) -> Result<Result<(), String>, Failure> {
    let h3 = setup.h3.as_ref().expect("an h3 setup for an h3 client");
    let req = http::Request::get(h3.uri.clone())
        .body(())
        .expect("a GET of a parsed URI is a valid request");
    let mut stream = send
        .send_request(req)
        .await
        .map_err(|e| stream_failure(e, live, true))?;
    stream
        .finish()
        .await
        .map_err(|e| stream_failure(e, live, false))?;
    let resp = stream
        .recv_response()
        .await
        .map_err(|e| stream_failure(e, live, false))?;
    let body = match read_body(&mut stream)
        .await
        .map_err(|e| stream_failure(e, live, false))?
    {
        Ok(b) => b,
        Err(too_long) => return Ok(Err(too_long)),
    };
    let headers = resp.headers();
    let content_type = headers
        .get(http::header::CONTENT_TYPE)
        .map(|v| v.as_bytes());
    let status = resp.status().as_u16();
    let checked = match headers.get(http::header::CONTENT_ENCODING) {
        Some(enc) => match decode_body(enc.as_bytes(), &body) {
            Ok(decoded) => check(&setup.expect, status, content_type, &decoded),
            Err(kind) => Err(kind),
        },
        None => check(&setup.expect, status, content_type, &body),
    };
    Ok(checked)
}

/// A response's whole body; `Ok(Err(kind))` when it grows past
/// [`MAX_BODY`] (a runaway server must not grow rig without bound).
async fn read_body<S>(
    stream: &mut h3::client::RequestStream<S, Bytes>,
) -> Result<Result<Vec<u8>, String>, h3::error::StreamError>
where
    S: h3::quic::RecvStream,
{
    let mut body = Vec::new();
    while let Some(mut chunk) = stream.recv_data().await? {
        if body.len() + chunk.remaining() > MAX_BODY {
            return Ok(Err(format!("body longer than {} MiB", MAX_BODY >> 20)));
        }
        while chunk.has_remaining() {
            let c = chunk.chunk();
            body.extend_from_slice(c);
            let n = c.len();
            chunk.advance(n);
        }
    }
    Ok(Ok(body))
}

/// Sort an h3 stream error: one that came with the connection's close
/// makes the slot reconnect (h3's error variants are not public, so
/// quinn's close reason tells); a reset of this stream alone is the
/// request's.
fn stream_failure(e: h3::error::StreamError, live: &Live, opening: bool) -> Failure {
    match live.quic.close_reason() {
        Some(_) if opening => Failure::Connection(NOT_SENT.into()),
        Some(reason) => Failure::Connection(match quic_kind(&reason) {
            k if e.is_h3_no_error() => format!("{k} (H3_NO_ERROR)"),
            k => k,
        }),
        None if live.closed.get() => Failure::Connection("h3: connection closed".into()),
        None => Failure::Stream(format!("h3: {e}")),
    }
}

/// One response as it came: status, headers in order, whole body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fetched {
    pub status: u16,
    pub headers: Vec<(String, Vec<u8>)>,
    pub body: Vec<u8>,
}

/// One GET of `spec`'s endpoint over HTTP/3 on a connection of its own,
/// closed gracefully after (for `rig ab`'s check that the arms answer
/// alike, where the target serves nothing but HTTP/3). Every step is
/// bounded by the spec's request timeout.
pub fn fetch(spec: &super::LoadSpec) -> Result<Fetched, String> {
    let setup = Arc::new(Setup::new(spec).map_err(|e| e.to_string())?);
    if setup.h3.is_none() {
        return Err("fetch speaks HTTP/3 only".into());
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .map_err(|e| format!("tokio runtime: {e}"))?;
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, async {
        let stats = Stats::new();
        let live = handshake(&setup, &stats).await?;
        let h3 = setup.h3.as_ref().expect("checked above");
        let mut send = live.send.clone();
        let get = async {
            let req = http::Request::get(h3.uri.clone())
                .body(())
                .map_err(|e| e.to_string())?;
            let mut stream = send
                .send_request(req)
                .await
                .map_err(|e| format!("h3: {e}"))?;
            stream.finish().await.map_err(|e| format!("h3: {e}"))?;
            let resp = stream
                .recv_response()
                .await
                .map_err(|e| format!("h3: {e}"))?;
            let body = read_body(&mut stream)
                .await
                .map_err(|e| format!("h3: {e}"))??;
            Ok(Fetched {
                status: resp.status().as_u16(),
                headers: resp
                    .headers()
                    .iter()
                    .map(|(k, v)| (k.as_str().to_string(), v.as_bytes().to_vec()))
                    .collect(),
                body,
            })
        };
        let r = bounded(&setup, get, |_| "h3: no response in time".to_string()).await;
        live.quic.close(H3_NO_ERROR.into(), b"");
        let _ = tokio::time::timeout(Duration::from_secs(1), live.endpoint.wait_idle()).await;
        r
    })
}
