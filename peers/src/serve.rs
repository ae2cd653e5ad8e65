//! Listener in, connections served until a signal, then a bounded drain.
//!
//! Cleartext: one hyper-util `auto` builder reads the first bytes of each
//! connection and picks HTTP/2 (the `PRI * HTTP/2.0` preface, i.e. h2c with
//! prior knowledge) or HTTP/1.1. TLS: ALPN already decided, so the matching
//! single-protocol builder is used and nothing is sniffed.

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

use crate::routes::handle;
use crate::tls::ALPN_H2;

/// How long open connections get to finish after SIGTERM/SIGINT.
const GRACE: Duration = Duration::from_secs(5);

/// The three ways a connection can be served; built once, shared by all.
struct Builders {
    auto: Builder<TokioExecutor>,
    h1: Builder<TokioExecutor>,
    h2: Builder<TokioExecutor>,
}

// Long by design: the accept loop and the per-connection task it spawns
// read as one protocol.
pub async fn serve(addr: SocketAddr, tls: Option<Arc<ServerConfig>>) -> anyhow::Result<()> {
    // Handlers go in before READY: a SIGTERM sent the moment READY is read
    // must drain and exit 0, not kill us with the default action.
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
    let open = graceful.count();
    tokio::select! {
        _ = graceful.shutdown() => {}
        _ = tokio::time::sleep(GRACE) => {
            eprintln!("rig-peer: grace period of {GRACE:?} over; closing connections still open");
        }
    }
    if open > 0 {
        eprintln!("rig-peer: shut down; {open} connection(s) were open at the signal");
    }
    Ok(())
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
