//! rig's load generator side by side with wrk, h2load and oha (when
//! installed), against the same target in one session, legs interleaved:
//! rig, wrk, h2load, oha in odd rounds, the reverse in even rounds. Ends with
//! the median per tool and its client-CPU ratio to rig.
//!
//! ```sh
//! cargo run --release --example loadbench -- [--duration 3] [--rounds 3] \
//!     [--connections 64] [--protocols h1,h2c,h2tls,h3] [--server-cpu 0] [--client-cpu 1] \
//!     [--oha PATH] [--url http://127.0.0.1:PORT/PATH]
//! ```
//!
//! Without `--url` it starts Debian's nginx with a generated minimal config
//! (1 worker, pinned to `--server-cpu`, `/plain` answering `Hello, World!`)
//! on loopback ports, plain h1, h2c and h2 over TLS (a throwaway CA). `h3`
//! is served by rig-peer instead (`--tls --h3 --workers 1`, pinned to
//! `--server-cpu`, `/plain` answering `hello`; build it first with `cargo
//! build --release -p rig-peer`): Debian 12's nginx has no HTTP/3, and its
//! h2load no h3 either, so the h3 legs are rig and an oha built with its
//! `http3` feature. Every generator is pinned to `--client-cpu` with one
//! thread. Client CPU per request: rig's own thread CPU time; the tools'
//! `getrusage(RUSAGE_CHILDREN)`.

mod legs;
mod nginx;
mod peer;
mod summary;
mod tools;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use anyhow::{bail, Result};
use clap::Parser;
use rig::load::{Expect, ExpectBody, Protocol};

use legs::Leg;
use summary::{summary, Row};

#[derive(Parser)]
struct Args {
    /// Seconds per leg.
    #[arg(long, default_value_t = 3.0)]
    duration: f64,
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    #[arg(long, default_value_t = 64)]
    connections: usize,
    /// h2 and h3 streams per connection (h2load -m, oha -p).
    #[arg(long, default_value_t = 1)]
    streams: usize,
    #[arg(long, default_value = "h1,h2c,h2tls")]
    protocols: String,
    #[arg(long, default_value_t = 0)]
    server_cpu: usize,
    #[arg(long, default_value_t = 1)]
    client_cpu: usize,
    /// An existing h1 target instead of nginx (`http://127.0.0.1:PORT/PATH`);
    /// responses are then only checked for status 200.
    #[arg(long)]
    url: Option<String>,
    /// Also run rig open-loop at this total rate (req/s) after its closed
    /// leg, and print its schedule accounting.
    #[arg(long)]
    open_rate: Option<f64>,
    /// Skip wrk, h2load and oha (e.g. to profile rig's legs alone).
    #[arg(long)]
    rig_only: bool,
    /// oha binary; default: `oha` on PATH, else `/tmp/oha-h3/bin/oha`, else
    /// `/tmp/oha/bin/oha`. Its h3 legs need one built with `--features http3`.
    #[arg(long)]
    oha: Option<String>,
}

struct Target {
    h1: Option<SocketAddr>,
    h2c: Option<SocketAddr>,
    h2tls: Option<SocketAddr>,
    path: String,
    expect: Expect,
    ca: Option<PathBuf>,
    _nginx: Option<nginx::Nginx>,
    /// rig-peer's HTTP/3, with its own body and CA (`--protocols h3`).
    h3: Option<peer::H3>,
}

fn main() -> Result<()> {
    let args = Args::parse();
    let protos = protocols(&args.protocols)?;
    let tcp = protos.iter().any(|p| *p != "h3");
    let mut target = match &args.url {
        Some(url) => {
            let t = rig::load::H1Target::parse(url)?;
            Target {
                h1: Some(t.addr),
                h2c: None,
                h2tls: None,
                path: t.path,
                expect: Expect {
                    status: 200,
                    content_type: None,
                    body: ExpectBody::Any,
                },
                ca: None,
                _nginx: None,
                h3: None,
            }
        }
        None if tcp => nginx::start(args.server_cpu)?,
        None => Target {
            h1: None,
            h2c: None,
            h2tls: None,
            path: "/plain".into(),
            expect: Expect::ok_exact(None, ""),
            ca: None,
            _nginx: None,
            h3: None,
        },
    };
    if protos.contains(&"h3") {
        target.h3 = Some(peer::start(args.server_cpu)?);
    }
    let server = match (&args.url, tcp, target.h3.is_some()) {
        (Some(_), _, false) => "--url",
        (Some(_), _, true) => "--url, rig-peer h3 (1 worker)",
        (None, true, false) => "nginx (1 worker)",
        (None, true, true) => "nginx (1 worker), rig-peer h3 (1 worker)",
        (None, false, _) => "rig-peer h3 (1 worker)",
    };
    println!(
        "target: {server}; {} connections × {} streams (h1: 1), {} s per leg, server CPU {}, client CPU {}",
        args.connections,
        args.streams,
        args.duration,
        args.server_cpu,
        args.client_cpu
    );
    let tools = Tools::find(&args, &target)?;
    println!(
        "{:<6} {:<8} {:>5} {:>12} {:>14} {:>10}",
        "proto", "tool", "round", "req/s", "client µs/req", "errors"
    );
    let legs = plan(&protos, &tools);
    let mut rows: Vec<Row> = Vec::new();
    for round in 1..=args.rounds {
        let order: Vec<_> = if round % 2 == 1 {
            legs.clone()
        } else {
            legs.iter().rev().cloned().collect()
        };
        for (proto, tool) in order {
            let Some(leg) = Leg::new(&args, &target, proto, round) else {
                continue;
            };
            match tool {
                "rig" => leg.rig(&args, &target, &mut rows)?,
                "wrk" => leg.wrk(&args, &mut rows)?,
                "h2load" => leg.h2load(&args, &mut rows)?,
                _ => {
                    let oha = tools.oha.as_deref().expect("oha leg without oha");
                    leg.oha(&args, oha, &mut rows)?
                }
            }
        }
    }
    summary(&rows);
    Ok(())
}

/// The other generators found on this host (none with `--rig-only`).
struct Tools {
    wrk: bool,
    h2load: bool,
    oha: Option<String>,
    /// oha was built with its `http3` feature.
    oha_h3: bool,
}

impl Tools {
    fn find(args: &Args, target: &Target) -> Result<Tools> {
        let have = |tool: &str| {
            Command::new(tool)
                .arg("--version")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok()
        };
        let (wrk, h2load) = if args.rig_only {
            (false, false)
        } else {
            (have("wrk"), have("h2load"))
        };
        let oha: Option<String> = if args.rig_only {
            None
        } else {
            match &args.oha {
                Some(p) if have(p) => Some(p.clone()),
                Some(p) => bail!("--oha {p}: cannot run it"),
                None => ["oha", "/tmp/oha-h3/bin/oha", "/tmp/oha/bin/oha"]
                    .into_iter()
                    .find(|p| have(p))
                    .map(String::from),
            }
        };
        for (name, v) in [("wrk", wrk), ("h2load", h2load), ("oha", oha.is_some())] {
            if !v && !args.rig_only {
                println!("({name} not found: its legs are skipped)");
            }
        }
        let oha_h3 = match (&oha, &target.h3) {
            (Some(oha), Some(h3)) => {
                let ok = oha_speaks_h3(oha, h3);
                if !ok {
                    println!("({oha} has no HTTP/3: its h3 legs are skipped; cargo install oha --features http3)");
                }
                ok
            }
            _ => false,
        };
        Ok(Tools {
            wrk,
            h2load,
            oha,
            oha_h3,
        })
    }
}

/// One h3 request with `oha`, answered 200: a build without the `http3`
/// feature refuses `--http-version 3` before it sends anything.
fn oha_speaks_h3(oha: &str, h3: &peer::H3) -> bool {
    let port = h3.addr.port();
    let out = Command::new(oha)
        .args(["--no-tui", "--output-format", "json", "-n", "1"])
        .args(["--http-version", "3", "--cacert"])
        .arg(&h3.ca)
        .arg("--connect-to")
        .arg(format!("localhost:{port}:127.0.0.1:{port}"))
        .arg(format!("https://localhost:{port}/plain"))
        .stderr(Stdio::null())
        .output();
    let Ok(out) = out else { return false };
    let got = tools::oha_numbers(&String::from_utf8_lossy(&out.stdout));
    out.status.success() && got.is_some_and(|(_, done, errors)| done == 1.0 && errors == 0)
}

/// `--protocols`, checked.
fn protocols(list: &str) -> Result<Vec<&str>> {
    let protos: Vec<&str> = list.split(',').collect();
    for proto in &protos {
        if !["h1", "h2c", "h2tls", "h3"].contains(proto) {
            bail!("--protocols: unknown `{proto}`; give h1, h2c, h2tls or h3");
        }
    }
    Ok(protos)
}

/// One round's legs: per protocol, the tools that speak it, in the order
/// rig, wrk, h2load, oha. Odd rounds run them forward, even rounds reversed
/// (A B C D, D C B A), so drift over the session hits every tool alike.
fn plan<'a>(protos: &[&'a str], tools: &Tools) -> Vec<(&'a str, &'static str)> {
    let mut legs = Vec::new();
    for &proto in protos {
        legs.push((proto, "rig"));
        if proto == "h1" && tools.wrk {
            legs.push((proto, "wrk"));
        }
        // Debian's h2load (nghttp2 1.52) is built without HTTP/3: asked for
        // h3 it opens TCP.
        if proto != "h3" && tools.h2load {
            legs.push((proto, "h2load"));
        }
        // oha --http2 over http:// speaks h2 with prior knowledge; h3 only
        // when built with its `http3` feature.
        if tools.oha.is_some() && (proto != "h3" || tools.oha_h3) {
            legs.push((proto, "oha"));
        }
    }
    legs
}

/// The protocol rig speaks for a leg, and the URL scheme the tools use.
fn protocol(proto: &str, target: &Target) -> (Option<SocketAddr>, Protocol, &'static str) {
    match proto {
        "h1" => (target.h1, Protocol::H1 { keepalive: true }, "http"),
        "h2c" => (target.h2c, Protocol::H2c, "http"),
        "h3" => match &target.h3 {
            Some(h3) => (
                Some(h3.addr),
                Protocol::H3 {
                    ca_pem: h3.ca.clone(),
                    server_name: "localhost".into(),
                    insecure: false,
                },
                "https",
            ),
            None => (None, Protocol::H2c, "https"),
        },
        _ => (
            target.h2tls,
            Protocol::H2Tls {
                ca_pem: target.ca.clone().unwrap_or_default(),
                server_name: "localhost".into(),
                insecure: false,
            },
            "https",
        ),
    }
}
