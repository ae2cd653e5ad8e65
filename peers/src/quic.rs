//! `--h3`: a QUIC endpoint in, the fixed routes served over HTTP/3 until a
//! stop, then a drain.
//!
//! The endpoint sits on the TCP listener's port number, over UDP (as a web
//! server's 443/tcp and 443/udp do), so one READY port names both. Each
//! QUIC connection is one task driving its h3 connection; each request is a
//! task of its own, so a `/bytes` waiting on flow control does not hold up
//! the other streams of its connection.
//!
//! A stop (the signal, relayed by `serve`) refuses new connections and sends
//! each open one a GOAWAY; a connection then ends when the client closes it,
//! or once its accepted requests are answered and the client has had time to
//! acknowledge them. That wait exists because closing a QUIC connection
//! abandons whatever stream data is still unacknowledged (there is no kernel
//! send buffer to drain, as TCP has), and h3-quinn does not expose the
//! per-stream acknowledgement, so it is estimated from the path's RTT.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use bytes::Bytes;
use http::header::{HeaderValue, CONTENT_LENGTH, CONTENT_TYPE};
use quinn::crypto::rustls::QuicServerConfig;
use quinn::{Endpoint, Incoming};
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::routes;

type Resolver = h3::server::RequestResolver<h3_quinn::Connection, Bytes>;

/// RFC 9000 §18.2's default `max_ack_delay` (quinn's too): how long a
/// client that advertises no other value may hold its ACK of our last packet.
const MAX_ACK_DELAY: Duration = Duration::from_millis(25);

/// The QUIC transport config over rustls' TLS 1.3 config (ALPN h3).
pub fn server_config(tls: rustls::ServerConfig) -> anyhow::Result<quinn::ServerConfig> {
    let crypto = QuicServerConfig::try_from(tls).context(
        "--h3: the TLS config has no TLS 1.3 AES-128-GCM suite for QUIC's Initial packets",
    )?;
    Ok(quinn::ServerConfig::with_crypto(Arc::new(crypto)))
}

/// Binds UDP `addr`. Must run inside the tokio runtime (quinn spawns its
/// endpoint driver on it).
pub fn bind(config: quinn::ServerConfig, addr: SocketAddr) -> std::io::Result<Endpoint> {
    Endpoint::server(config, addr)
}

/// A bound endpoint being served; `stop` begins the drain.
pub struct H3Server {
    endpoint: Endpoint,
    /// Every connection task holds a receiver, and so does the accept loop.
    stop: watch::Sender<bool>,
    accepting: tokio::task::JoinHandle<()>,
}

impl H3Server {
    pub fn start(endpoint: Endpoint) -> H3Server {
        let (stop, stopped) = watch::channel(false);
        let accepting = tokio::spawn(accept_loop(endpoint.clone(), stopped));
        H3Server {
            endpoint,
            stop,
            accepting,
        }
    }

    /// Refuse new connections and GOAWAY the open ones; returns at once,
    /// with how many were open (a handshake under way counts, as it does on
    /// the TCP side).
    pub fn stop(&self) -> usize {
        let open = self.stop.receiver_count().saturating_sub(1);
        let _ = self.stop.send(true);
        open
    }

    /// Resolves, after `stop`, when every connection has ended.
    pub async fn drained(&mut self) {
        let _ = (&mut self.accepting).await;
    }

    /// Closes whatever is still open (H3_NO_ERROR, as h3 closes its own) and
    /// gives the CONNECTION_CLOSE frames up to `limit` to go out, so clients
    /// learn of the close instead of waiting out their idle timeout.
    pub async fn close(self, limit: Duration) {
        self.accepting.abort();
        self.endpoint.close(h3_no_error(), b"");
        let _ = tokio::time::timeout(limit, self.endpoint.wait_idle()).await;
    }
}

fn h3_no_error() -> quinn::VarInt {
    quinn::VarInt::from_u64(h3::error::Code::H3_NO_ERROR.value()).expect("0x100 fits a varint")
}

async fn accept_loop(endpoint: Endpoint, mut stopped: watch::Receiver<bool>) {
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            incoming = endpoint.accept() => match incoming {
                Some(incoming) => {
                    conns.spawn(serve_conn(incoming, stopped.clone()));
                }
                // Only after `Endpoint::close`, which comes after the drain.
                None => return,
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            _ = until_stopped(&mut stopped) => break,
        }
    }
    // From here on a new connection gets CONNECTION_REFUSED, as a new TCP
    // connection gets a RST once the listener is closed.
    loop {
        tokio::select! {
            Some(incoming) = endpoint.accept() => incoming.refuse(),
            done = conns.join_next() => if done.is_none() { return },
        }
    }
}

/// Resolves once `stop` was sent (at once if it already was), or once the
/// sender is gone, which only happens as the server closes.
async fn until_stopped(stopped: &mut watch::Receiver<bool>) {
    let _ = stopped.wait_for(|&stop| stop).await;
}

/// One connection: handshake, then requests until the client goes away or
/// the drain ends it. Errors (a failed handshake, a client reset) are normal
/// under load and not reported, as on the TCP side.
async fn serve_conn(incoming: Incoming, mut stopped: watch::Receiver<bool>) {
    let Ok(conn) = incoming.await else { return };
    let quic = conn.clone();
    let Ok(mut h3) = h3::server::Connection::<_, Bytes>::new(h3_quinn::Connection::new(conn)).await
    else {
        return;
    };
    let mut requests = JoinSet::new();
    // `draining`: we sent a GOAWAY. `!accepting`: the client sent one and
    // h3 has seen every accepted request answered. Either way, once our
    // request tasks are done, only the acknowledgements are left to wait for.
    let mut draining = false;
    let mut accepting = true;
    loop {
        tokio::select! {
            accepted = h3.accept(), if accepting => match accepted {
                Ok(Some(resolver)) => {
                    requests.spawn(answer(resolver));
                }
                Ok(None) => accepting = false,
                // The connection is gone: closed by the client, timed out.
                Err(_) => break,
            },
            Some(_) = requests.join_next(), if !requests.is_empty() => {}
            _ = until_stopped(&mut stopped), if !draining => {
                draining = true;
                // GOAWAY with the id after the last request accepted
                // (`shutdown(1)`; `shutdown(0)` would name that request
                // itself, which RFC 9114 §5.2 reads as "not processed" while
                // its response is under way). h3 answers what it accepted
                // and rejects later streams with H3_REQUEST_REJECTED, bar
                // one at exactly the GOAWAY's id, which it takes and we
                // answer.
                if h3.shutdown(1).await.is_err() {
                    break;
                }
            }
            _ = tokio::time::sleep(ack_wait(&quic)),
                if (draining || !accepting) && requests.is_empty() => break,
        }
    }
    // Dropping `h3` closes the connection with H3_NO_ERROR.
}

/// How long after the last response the client gets to acknowledge it:
/// twice a round trip plus its ACK delay, one for the ACK and one to spare
/// (a retransmission on a steady path). An estimate: data still
/// unacknowledged when it runs out is lost with the close.
fn ack_wait(conn: &quinn::Connection) -> Duration {
    2 * (conn.rtt() + MAX_ACK_DELAY)
}

/// One request: the route's status, content-type and whole body, from the
/// same table (and the same static bytes) the TCP listeners serve.
async fn answer(resolver: Resolver) {
    let Ok((req, mut stream)) = resolver.resolve_request().await else {
        return;
    };
    let (status, content_type, body) = routes::answer(req.method(), req.uri().path());
    let mut response = http::Response::new(());
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    // hyper sets content-length on the h1 and h2 responses; h3 does not on
    // its own, and a client may rely on it to size its buffer.
    headers.insert(CONTENT_LENGTH, HeaderValue::from(body.len()));
    if stream.send_response(response).await.is_err() {
        return;
    }
    if stream.send_data(Bytes::from_static(body)).await.is_err() {
        return;
    }
    let _ = stream.finish().await;
}
