//! rig's load generator side by side with wrk and h2load (when installed),
//! against the same target in one session, legs interleaved.
//!
//! ```sh
//! cargo run --release --example loadbench -- [--duration 3] [--rounds 2] \
//!     [--connections 64] [--protocols h1,h2c,h2tls] [--server-cpu 0] [--client-cpu 1] \
//!     [--url http://127.0.0.1:PORT/PATH]
//! ```
//!
//! Without `--url` it starts Debian's nginx with a generated minimal config
//! (1 worker, pinned to `--server-cpu`, `/plain` answering `Hello, World!`)
//! on loopback ports, plain h1, h2c and h2 over TLS (a throwaway CA). Every
//! generator is pinned to `--client-cpu` with one thread. Client CPU per
//! request: rig's own thread CPU time; the tools' `getrusage(RUSAGE_CHILDREN)`.

use std::net::{SocketAddr, TcpListener};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Parser;
use rig::load::{Client, Endpoint, Expect, ExpectBody, LoadSpec, Mode, Protocol};

#[derive(Parser)]
struct Args {
    /// Seconds per leg.
    #[arg(long, default_value_t = 3.0)]
    duration: f64,
    #[arg(long, default_value_t = 2)]
    rounds: usize,
    #[arg(long, default_value_t = 64)]
    connections: usize,
    /// h2 streams per connection (h2load -m).
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
    /// Skip wrk and h2load (e.g. to profile rig's legs alone).
    #[arg(long)]
    rig_only: bool,
}

struct Target {
    h1: Option<SocketAddr>,
    h2c: Option<SocketAddr>,
    h2tls: Option<SocketAddr>,
    path: String,
    expect: Expect,
    ca: Option<PathBuf>,
    _nginx: Option<Nginx>,
}

fn main() -> Result<()> {
    let args = Args::parse();
    let target = match &args.url {
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
            }
        }
        None => start_nginx(args.server_cpu)?,
    };
    let duration = Duration::from_secs_f64(args.duration);
    println!(
        "target: {}; {} connections, {} s per leg, server CPU {}, client CPU {}",
        if args.url.is_some() {
            "--url"
        } else {
            "nginx (1 worker)"
        },
        args.connections,
        args.duration,
        args.server_cpu,
        args.client_cpu
    );
    println!(
        "{:<6} {:<8} {:>5} {:>12} {:>14} {:>10}",
        "proto", "tool", "round", "req/s", "client µs/req", "errors"
    );
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
    for round in 1..=args.rounds {
        for proto in args.protocols.split(',') {
            let (addr, protocol, scheme) = match proto {
                "h1" => (target.h1, Protocol::H1 { keepalive: true }, "http"),
                "h2c" => (target.h2c, Protocol::H2c, "http"),
                "h2tls" => (
                    target.h2tls,
                    Protocol::H2Tls {
                        ca_pem: target.ca.clone().unwrap_or_default(),
                        server_name: "localhost".into(),
                    },
                    "https",
                ),
                p => bail!("--protocols: unknown `{p}`; give h1, h2c or h2tls"),
            };
            let Some(addr) = addr else { continue };
            let streams = if proto == "h1" { 1 } else { args.streams };
            let spec = LoadSpec {
                addr,
                protocol,
                endpoint: Endpoint {
                    path: target.path.clone(),
                    expect: target.expect.clone(),
                },
                connections: args.connections,
                streams,
                client_cpus: Some(vec![args.client_cpu]),
                threads: Some(1),
            };
            let mut client = Client::connect(&spec)?;
            let warm = client.run(&Mode::FixedCount { requests: 5000 });
            if warm.succeeded != 5000 {
                bail!("warm-up against {addr} failed: {:?}", warm.errors);
            }
            let r = client.run(&Mode::Closed { duration });
            r.check_invariants().map_err(anyhow::Error::msg)?;
            row(
                proto,
                "rig",
                round,
                r.rps,
                r.client_us_per_request(),
                r.errors_total(),
            );
            if let Some(rate) = args.open_rate {
                let o = client.run(&Mode::Open { rate, duration });
                o.check_invariants().map_err(anyhow::Error::msg)?;
                row(
                    proto,
                    "rig-open",
                    round,
                    o.rps,
                    o.client_us_per_request(),
                    o.errors_total(),
                );
                println!(
                    "       scheduled {} sent {} dropped_capacity {} expired {}; latency p50/p99 {:.1}/{:.1} µs, request p99 {:.1} µs, dispatch lag p50/p99 {:.1}/{:.1} µs",
                    o.scheduled,
                    o.sent,
                    o.dropped_capacity,
                    o.expired,
                    o.latency.p50_ns as f64 / 1e3,
                    o.latency.p99_ns as f64 / 1e3,
                    o.request_latency.p99_ns as f64 / 1e3,
                    o.dispatch_lag.p50_ns as f64 / 1e3,
                    o.dispatch_lag.p99_ns as f64 / 1e3,
                );
            }
            drop(client);
            let url = format!("{scheme}://127.0.0.1:{}{}", addr.port(), target.path);
            let secs = format!("{}", args.duration.ceil() as u64);
            let c = args.connections.to_string();
            if proto == "h1" && wrk {
                let d = format!("{secs}s");
                let (out, cpu) = tool(args.client_cpu, "wrk", &["-t1", "-c", &c, "-d", &d, &url])?;
                let rps = field(&out, "Requests/sec:").unwrap_or(f64::NAN);
                // "  503000 requests in 3.00s, 70MB read"
                let done: f64 = out
                    .lines()
                    .find(|l| l.contains(" requests in "))
                    .and_then(|l| l.split_whitespace().next())
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(f64::NAN);
                let errors = out
                    .lines()
                    .any(|l| l.contains("Non-2xx") || l.contains("Socket errors"));
                row(proto, "wrk", round, rps, cpu / done, errors as u64);
            }
            if h2load {
                let m = streams.to_string();
                let mut a = vec!["-t1", "-c", &c, "-m", &m, "-D", &secs];
                if proto == "h1" {
                    a.push("--h1");
                }
                a.push(&url);
                let (out, cpu) = tool(args.client_cpu, "h2load", &a)?;
                let (rps, done, failed) = h2load_numbers(&out);
                row(proto, "h2load", round, rps, cpu / done, failed);
            }
        }
    }
    Ok(())
}

fn row(proto: &str, tool: &str, round: usize, rps: f64, us: f64, errors: u64) {
    println!("{proto:<6} {tool:<8} {round:>5} {rps:>12.0} {us:>14.2} {errors:>10}");
}

/// Run a load tool pinned to `cpu`; its output and its CPU time in µs.
fn tool(cpu: usize, name: &str, args: &[&str]) -> Result<(String, f64)> {
    let before = children_cpu_us();
    let mut cmd = Command::new(name);
    cmd.args(args);
    pin(&mut cmd, cpu);
    let out = cmd.output().with_context(|| format!("running {name}"))?;
    let cpu_us = children_cpu_us() - before;
    Ok((String::from_utf8_lossy(&out.stdout).into_owned(), cpu_us))
}

fn pin(cmd: &mut Command, cpu: usize) {
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut set);
            if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

fn children_cpu_us() -> f64 {
    // SAFETY: ru is a valid out-pointer.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru) };
    let tv = |t: libc::timeval| t.tv_sec as f64 * 1e6 + t.tv_usec as f64;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

fn field(out: &str, key: &str) -> Option<f64> {
    out.lines()
        .find_map(|l| l.trim().strip_prefix(key))
        .and_then(|v| v.trim().parse().ok())
}

/// h2load: req/s from "finished in 3.00s, 95000.00 req/s, ...", requests
/// done and failed+errored from "requests: N total, N started, N done, N
/// succeeded, N failed, N errored, ...".
fn h2load_numbers(out: &str) -> (f64, f64, u64) {
    let rps = out
        .lines()
        .find(|l| l.starts_with("finished in"))
        .and_then(|l| l.split(", ").nth(1))
        .and_then(|v| v.strip_suffix(" req/s"))
        .and_then(|v| v.parse().ok())
        .unwrap_or(f64::NAN);
    let req = out
        .lines()
        .find(|l| l.starts_with("requests:"))
        .unwrap_or("");
    let num = |what: &str| -> f64 {
        req.split(", ")
            .find(|p| p.ends_with(what))
            .and_then(|p| p.trim_start_matches("requests: ").split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(f64::NAN)
    };
    let failed = num("failed") + num("errored");
    (
        rps,
        num("done"),
        if failed.is_nan() { 0 } else { failed as u64 },
    )
}

struct Nginx {
    child: Child,
    dir: PathBuf,
}

impl Drop for Nginx {
    fn drop(&mut self) {
        // SIGQUIT: graceful shutdown of master and worker.
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGQUIT) };
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn start_nginx(cpu: usize) -> Result<Target> {
    let nginx = ["/usr/sbin/nginx", "/usr/bin/nginx"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .context("nginx not found (apt-get install -y nginx-light), or give --url")?;
    let dir = std::env::temp_dir().join(format!("rig-loadbench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    // A throwaway CA and a localhost certificate for the TLS listener.
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "rig loadbench CA");
    let ca = ca_params.self_signed(&ca_key)?;
    let key = KeyPair::generate()?;
    let leaf = CertificateParams::new(vec!["localhost".into()])?.signed_by(&key, &ca, &ca_key)?;
    std::fs::write(dir.join("ca.pem"), ca.pem())?;
    std::fs::write(dir.join("cert.pem"), leaf.pem())?;
    std::fs::write(dir.join("key.pem"), key.serialize_pem())?;
    let (p1, p2, p3) = (free_port()?, free_port()?, free_port()?);
    let d = dir.display();
    let conf = format!(
        r#"worker_processes 1;
daemon off;
pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    keepalive_requests 1000000000;
    keepalive_timeout 300s;
    client_body_temp_path {d}/body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
    server {{
        listen 127.0.0.1:{p1};
        listen 127.0.0.1:{p2} http2;
        listen 127.0.0.1:{p3} ssl http2;
        server_name localhost;
        ssl_certificate {d}/cert.pem;
        ssl_certificate_key {d}/key.pem;
        location = /plain {{
            default_type text/plain;
            return 200 "Hello, World!";
        }}
    }}
}}
"#
    );
    std::fs::write(dir.join("nginx.conf"), conf)?;
    let mut cmd = Command::new(nginx);
    cmd.args(["-p", &d.to_string(), "-c", &format!("{d}/nginx.conf"), "-e"])
        .arg(format!("{d}/error.log"))
        .stdin(Stdio::null());
    pin(&mut cmd, cpu);
    let child = cmd.spawn().context("starting nginx")?;
    let guard = Nginx {
        child,
        dir: dir.clone(),
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    for p in [p1, p2, p3] {
        while std::net::TcpStream::connect(("127.0.0.1", p)).is_err() {
            if Instant::now() > deadline {
                let log = std::fs::read_to_string(dir.join("error.log")).unwrap_or_default();
                bail!("nginx did not listen on {p}: {log}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let a = |p: u16| Some(SocketAddr::from(([127, 0, 0, 1], p)));
    Ok(Target {
        h1: a(p1),
        h2c: a(p2),
        h2tls: a(p3),
        path: "/plain".into(),
        expect: Expect::ok_exact(Some("text/plain"), "Hello, World!"),
        ca: Some(dir.join("ca.pem")),
        _nginx: Some(guard),
    })
}
