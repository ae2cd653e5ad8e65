//! `rig-peer`: the reference server rig measures.
//!
//! It serves three fixed GET endpoints whose bodies never change, so any
//! per-request cost rig reports comes from the stack (tokio, hyper, rustls),
//! not from the handler:
//!
//! | path     | status | content-type               | body                                            |
//! |----------|--------|----------------------------|-------------------------------------------------|
//! | `/plain` | 200    | `text/plain`               | `hello` (5 bytes)                               |
//! | `/json`  | 200    | `application/json`         | `{"message":"hello","id":1}` (26 bytes, no newline) |
//! | `/bytes` | 200    | `application/octet-stream` | 65536 bytes, byte `i` = `i % 251`               |
//! | other    | 404    | `text/plain`               | `not found` (9 bytes)                           |
//!
//! Any method other than GET gets the 404 too. Without `--tls` one port serves
//! HTTP/1.1 and h2c with prior knowledge (told apart by the HTTP/2 preface);
//! with `--tls` it serves TLS with ALPN `h2` and `http/1.1`, and HTTP/1.1 when
//! the client offers no ALPN. `--h3` (with `--tls`, same certificate) adds
//! HTTP/3: QUIC with ALPN `h3` on the same port number over UDP, the same
//! routes and bytes. On listening (TCP and, with `--h3`, UDP) it prints
//! `READY port=<port>` on stdout. SIGTERM or SIGINT stops accepting (an h3
//! connection gets a GOAWAY), lets open connections finish for up to 5 s,
//! then exits 0.
//!
//! What a request costs, from `rig attach --pid $PID --drive
//! http://127.0.0.1:$PORT/plain --probes alloc,copy,syscalls` (release build,
//! `--workers 2`, 2000 requests, 2 keep-alive h1 connections): 4 allocs/req
//! (8888 bytes), every one inside hyper/http/bytes, none in this crate; one
//! `recvfrom` and one `writev` per request. `/bytes` costs the same
//! allocations and 18 more copied bytes (its longer headers): the 64 KiB
//! body goes out from static memory in that one `writev`, uncopied.
//!
//! ```text
//! rig-peer --port P [--addr 127.0.0.1] [--workers N] [--tls --cert FILE --key FILE [--h3]]
//! rig-peer --port P --live [--sse-interval-ms MS] [--wrong-echo]
//! ```
//!
//! `--live` serves long-lived connections for rig's `live` suite on the same
//! one port: WebSocket echo on `/ws`, server-sent events on `/sse`, and raw
//! TCP echo for a connection that does not open with an HTTP request (see
//! `live.rs`). It is a mode of its own so that the default server's request
//! path, whose costs are gated exactly, stays as it is.

mod live;
mod quic;
mod routes;
mod serve;
mod tls;

use std::net::IpAddr;
use std::path::PathBuf;

use anyhow::{bail, Context};
use clap::Parser;

/// Flags as typed; `Settings::from_flags` turns them into what `serve` needs.
#[derive(Parser, Debug)]
#[command(
    name = "rig-peer",
    version,
    about = "Reference HTTP/1.1 + HTTP/2 + HTTP/3 server for rig"
)]
struct Flags {
    /// TCP port to listen on; 0 picks a free one (printed in the READY line).
    #[arg(long)]
    port: u16,
    /// Address to bind.
    #[arg(long, default_value = "127.0.0.1")]
    addr: IpAddr,
    /// Tokio worker threads [default: the number of CPUs].
    #[arg(long)]
    workers: Option<usize>,
    /// Serve TLS (ALPN h2, http/1.1) instead of cleartext h1 + h2c.
    #[arg(long, requires_all = ["cert", "key"])]
    tls: bool,
    /// PEM certificate chain, leaf first (with --tls).
    #[arg(long, requires = "tls")]
    cert: Option<PathBuf>,
    /// PEM private key: PKCS#8, PKCS#1 or SEC1 (with --tls).
    #[arg(long, requires = "tls")]
    key: Option<PathBuf>,
    /// Also serve HTTP/3 (QUIC, ALPN h3) on UDP at the same address and port
    /// number, with the --cert/--key of --tls.
    #[arg(long, requires = "tls")]
    h3: bool,
    /// Serve WebSocket echo (/ws), server-sent events (/sse) and TCP echo
    /// besides the fixed routes (rig's `live` suite).
    #[arg(long, conflicts_with = "tls")]
    live: bool,
    /// --live: ms between SSE heartbeats when the request has no
    /// `?interval_ms=`.
    #[arg(long, default_value_t = 1000, requires = "live")]
    sse_interval_ms: u64,
    /// --live: answer every echo wrongly (an `x` in front), for rig's tests
    /// that a wrong echo fails the cycle.
    #[arg(long, requires = "live")]
    wrong_echo: bool,
}

fn main() {
    let flags = Flags::parse();
    if let Err(err) = run(flags) {
        eprintln!("rig-peer: error: {err:#}");
        std::process::exit(1);
    }
}

fn run(flags: Flags) -> anyhow::Result<()> {
    let workers = match flags.workers {
        Some(0) => bail!("--workers 0: give at least 1 worker thread"),
        Some(n) => n,
        None => std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    let (tls, h3) = match (flags.cert, flags.key) {
        (Some(cert), Some(key)) => {
            let id = tls::load(&cert, &key)?;
            let h3 = if flags.h3 {
                Some(quic::server_config(tls::h3_config(&id)?)?)
            } else {
                None
            };
            (Some(tls::server_config(&id)?), h3)
        }
        _ => (None, None),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_io()
        .enable_time()
        .build()
        .context("building the tokio runtime")?;
    let addr = (flags.addr, flags.port).into();
    if flags.live {
        if flags.sse_interval_ms == 0 {
            bail!("--sse-interval-ms 0: give at least 1 ms between heartbeats");
        }
        let opts = live::LiveOptions {
            sse_interval: std::time::Duration::from_millis(flags.sse_interval_ms),
            wrong_echo: flags.wrong_echo,
        };
        return runtime.block_on(live::serve(addr, opts));
    }
    runtime.block_on(serve::serve(addr, tls, h3))
}
