//! Listener in, connections served until a signal, then a bounded drain.
//!
//! Cleartext: one hyper-util `auto` builder reads the first bytes of each
//! connection and picks HTTP/2 (the `PRI * HTTP/2.0` preface, i.e. h2c with
//! prior knowledge) or HTTP/1.1. TLS: ALPN already decided, so the matching
//! single-protocol builder is used and nothing is sniffed. With `--h3` a QUIC
//! endpoint (`quic.rs`) runs beside the TCP listener on the same port number
//! and drains within the same grace period.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::GracefulShutdown;
use rustls::ServerConfig;
use tokio::net::TcpListener;
use tokio::signal::unix::{signal, SignalKind};
use tokio_rustls::TlsAcceptor;

use crate::quic::{self, H3Server};
use crate::routes::handle;
use crate::tls::ALPN_H2;

/// How long open connections get to finish after SIGTERM/SIGINT.
const GRACE: Duration = Duration::from_secs(5);

/// How long the QUIC endpoint's CONNECTION_CLOSE frames get to go out once
/// the drain is over.
const CLOSE_LIMIT: Duration = Duration::from_secs(1);

/// `--port 0` binds TCP first and UDP on the port TCP got; that UDP port can
/// be taken (by any UDP socket, a client's included), so a few fresh TCP
/// ports are tried before giving up.
const PORT_0_TRIES: usize = 16;

/// The three ways a connection can be served; built once, shared by all.
struct Builders {
    auto: Builder<TokioExecutor>,
    h1: Builder<TokioExecutor>,
    h2: Builder<TokioExecutor>,
}

// Long by design: the accept loop and the per-connection task it spawns
// read as one protocol.
pub async fn serve(
    addr: SocketAddr,
    tls: Option<Arc<ServerConfig>>,
    h3_config: Option<quinn::ServerConfig>,
) -> anyhow::Result<()> {
    // Handlers go in before READY: a SIGTERM sent the moment READY is read
    // must drain and exit 0, not kill us with the default action.
    let mut sigterm = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let mut sigint = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;

    let (listener, endpoint) = bind(addr, h3_config).await?;
    let port = listener
        .local_addr()
        .context("reading the bound port")?
        .port();
    // Started before READY, so a client that reads READY finds both bound.
    let mut h3 = endpoint.map(H3Server::start);
    {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        writeln!(out, "READY port={port}").context("writing READY to stdout")?;
        out.flush().context("flushing READY to stdout")?;
    }

    let builders = Arc::new(Builders {
        auto: Builder::new(TokioExecutor::new()),
        h1: Builder::new(TokioExecutor::new()).http1_only(),
        h2: Builder::new(TokioExecutor::new()).http2_only(),
    });
    let acceptor = tls.map(TlsAcceptor::from);
    let graceful = GracefulShutdown::new();

    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => stream,
                Err(err) => {
                    // EMFILE and friends: back off instead of spinning, keep serving.
                    eprintln!("rig-peer: accept: {err}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = sigterm.recv() => break,
            _ = sigint.recv() => break,
        };
        // Responses are written whole; Nagle would only hold back the tail of
        // an h2 frame sequence for a delayed ACK.
        let _ = stream.set_nodelay(true);
        // Subscribed now, not after the TLS handshake, so the drain below
        // also waits for connections still shaking hands.
        let watcher = graceful.watcher();
        let builders = Arc::clone(&builders);
        let acceptor = acceptor.clone();
        tokio::spawn(async move {
            // Connection errors (a client resetting mid-request, a failed
            // handshake) are normal under load and not reported: writing to
            // stderr per connection would perturb what rig measures.
            let _ = match acceptor {
                None => serve_one(&builders.auto, watcher, stream).await,
                Some(acceptor) => match acceptor.accept(stream).await {
                    Ok(tls) => {
                        let h2 = tls.get_ref().1.alpn_protocol() == Some(ALPN_H2);
                        let builder = if h2 { &builders.h2 } else { &builders.h1 };
                        serve_one(builder, watcher, tls).await
                    }
                    Err(_) => Ok(()),
                },
            };
        });
    }

    drop(listener);
    let mut open = graceful.count();
    if let Some(h3) = &h3 {
        open += h3.stop();
    }
    let quic_drained = async {
        if let Some(h3) = &mut h3 {
            h3.drained().await;
        }
    };
    tokio::select! {
        _ = futures_util::future::join(graceful.shutdown(), quic_drained) => {}
        _ = tokio::time::sleep(GRACE) => {
            eprintln!("rig-peer: grace period of {GRACE:?} over; closing connections still open");
        }
    }
    if let Some(h3) = h3 {
        h3.close(CLOSE_LIMIT).await;
    }
    if open > 0 {
        eprintln!("rig-peer: shut down; {open} connection(s) were open at the signal");
    }
    Ok(())
}

/// The TCP listener and, with `h3`, the QUIC endpoint on the same port
/// number over UDP.
async fn bind(
    addr: SocketAddr,
    h3: Option<quinn::ServerConfig>,
) -> anyhow::Result<(TcpListener, Option<quinn::Endpoint>)> {
    let tcp_context = || format!("--addr {} --port {}: bind", addr.ip(), addr.port());
    let Some(h3) = h3 else {
        let listener = TcpListener::bind(addr).await.with_context(tcp_context)?;
        return Ok((listener, None));
    };
    let tries = if addr.port() == 0 { PORT_0_TRIES } else { 1 };
    let mut in_use = Vec::new();
    loop {
        let listener = TcpListener::bind(addr).await.with_context(tcp_context)?;
        let port = listener
            .local_addr()
            .context("reading the bound port")?
            .port();
        let udp = SocketAddr::new(addr.ip(), port);
        match quic::bind(h3.clone(), udp) {
            Ok(endpoint) => return Ok((listener, Some(endpoint))),
            Err(err) if err.kind() == std::io::ErrorKind::AddrInUse => {
                in_use.push(port);
                if in_use.len() == tries {
                    return Err(err).with_context(|| {
                        format!(
                            "--h3 --addr {} --port {}: UDP port(s) {in_use:?} already in use \
                             (TCP was free); free it or give another --port",
                            addr.ip(),
                            addr.port()
                        )
                    });
                }
            }
            Err(err) => {
                return Err(err).with_context(|| format!("--h3: binding UDP {udp}"));
            }
        }
    }
}

async fn serve_one<S>(
    builder: &Builder<TokioExecutor>,
    watcher: hyper_util::server::graceful::Watcher,
    stream: S,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let conn = builder.serve_connection(TokioIo::new(stream), service_fn(handle));
    watcher.watch(conn).await
}
