//! rig's load generator side by side with wrk, h2load and oha (when
//! installed), against the same target in one session, legs interleaved:
//! rig, wrk, h2load, oha in odd rounds, the reverse in even rounds. Ends with
//! the median per tool and its client-CPU ratio to rig.
//!
//! ```sh
//! cargo run --release --example loadbench -- [--duration 3] [--rounds 3] \
//!     [--connections 64] [--protocols h1,h2c,h2tls] [--server-cpu 0] [--client-cpu 1] \
//!     [--oha PATH] [--url http://127.0.0.1:PORT/PATH]
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
    #[arg(long, default_value_t = 3)]
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
    /// Skip wrk, h2load and oha (e.g. to profile rig's legs alone).
    #[arg(long)]
    rig_only: bool,
    /// oha binary; default: `oha` on PATH, else `/tmp/oha/bin/oha`.
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
            None => ["oha", "/tmp/oha/bin/oha"]
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
    println!(
        "{:<6} {:<8} {:>5} {:>12} {:>14} {:>10}",
        "proto", "tool", "round", "req/s", "client µs/req", "errors"
    );
    // One round's legs: per protocol, the tools that speak it, in the order
    // rig, wrk, h2load, oha. Odd rounds run them forward, even rounds
    // reversed (A B C D, D C B A), so drift over the session hits every tool
    // alike.
    let mut legs: Vec<(&str, &str)> = Vec::new();
    for proto in args.protocols.split(',') {
        if !["h1", "h2c", "h2tls"].contains(&proto) {
            bail!("--protocols: unknown `{proto}`; give h1, h2c or h2tls");
        }
        legs.push((proto, "rig"));
        if proto == "h1" && wrk {
            legs.push((proto, "wrk"));
        }
        if h2load {
            legs.push((proto, "h2load"));
        }
        // oha --http2 over http:// speaks h2 with prior knowledge.
        if oha.is_some() {
            legs.push((proto, "oha"));
        }
    }
    let mut rows: Vec<Row> = Vec::new();
    for round in 1..=args.rounds {
        let order: Vec<_> = if round % 2 == 1 {
            legs.clone()
        } else {
            legs.iter().rev().cloned().collect()
        };
        for (proto, tool) in order {
            let (addr, protocol, scheme) = match proto {
                "h1" => (target.h1, Protocol::H1 { keepalive: true }, "http"),
                "h2c" => (target.h2c, Protocol::H2c, "http"),
                _ => (
                    target.h2tls,
                    Protocol::H2Tls {
                        ca_pem: target.ca.clone().unwrap_or_default(),
                        server_name: "localhost".into(),
                        insecure: false,
                    },
                    "https",
                ),
            };
            let Some(addr) = addr else { continue };
            let streams = if proto == "h1" { 1 } else { args.streams };
            let url = format!("{scheme}://127.0.0.1:{}{}", addr.port(), target.path);
            let secs = format!("{}", args.duration.ceil() as u64);
            let c = args.connections.to_string();
            let mut push = |tool: &'static str, rps: f64, us: f64, errors: u64| {
                let r = Row {
                    proto: proto.to_string(),
                    tool,
                    round,
                    rps,
                    us,
                    errors,
                };
                r.print();
                rows.push(r);
            };
            match tool {
                "rig" => {
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
                        spin: None,
                    };
                    let mut client = Client::connect(&spec)?;
                    let warm = client.run(&Mode::FixedCount { requests: 5000 });
                    if warm.succeeded != 5000 {
                        bail!("warm-up against {addr} failed: {:?}", warm.errors);
                    }
                    let r = client.run(&Mode::Closed { duration });
                    r.check_invariants().map_err(anyhow::Error::msg)?;
                    push("rig", r.rps, r.client_us_per_request(), r.errors_total());
                    if let Some(rate) = args.open_rate {
                        let o = client.run(&Mode::Open { rate, duration });
                        o.check_invariants().map_err(anyhow::Error::msg)?;
                        Row {
                            proto: proto.to_string(),
                            tool: "rig-open",
                            round,
                            rps: o.rps,
                            us: o.client_us_per_request(),
                            errors: o.errors_total(),
                        }
                        .print();
                        println!(
                            "       scheduled {} on time {} late {} expired {}; latency p50/p99 {:.1}/{:.1} µs, request p99 {:.1} µs, dispatch lag p50/p99 {:.1}/{:.1} µs, spin {:.1} ms of {:.1} ms client CPU",
                            o.scheduled,
                            o.on_time,
                            o.late,
                            o.expired,
                            o.latency.p50_ns as f64 / 1e3,
                            o.latency.p99_ns as f64 / 1e3,
                            o.request_latency.p99_ns as f64 / 1e3,
                            o.dispatch_lag.p50_ns as f64 / 1e3,
                            o.dispatch_lag.p99_ns as f64 / 1e3,
                            o.client_spin_ns as f64 / 1e6,
                            o.client_cpu_ns as f64 / 1e6,
                        );
                    }
                }
                "wrk" => {
                    let d = format!("{secs}s");
                    let (out, cpu) =
                        tool_run(args.client_cpu, "wrk", &["-t1", "-c", &c, "-d", &d, &url])?;
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
                    push("wrk", rps, cpu / done, errors as u64);
                }
                "h2load" => {
                    let m = streams.to_string();
                    let mut a = vec!["-t1", "-c", &c, "-m", &m, "-D", &secs];
                    if proto == "h1" {
                        a.push("--h1");
                    }
                    a.push(&url);
                    let (out, cpu) = tool_run(args.client_cpu, "h2load", &a)?;
                    let (rps, done, failed) = h2load_numbers(&out);
                    push("h2load", rps, cpu / done, failed);
                }
                _ => {
                    let oha = oha.as_deref().expect("oha leg without oha");
                    let d = format!("{secs}s");
                    let mut a = vec![
                        "--no-tui",
                        // One runtime thread like the other generators (its
                        // default is the number of physical cores, not the
                        // affinity mask).
                        "--worker-threads",
                        "1",
                        "--output-format",
                        "json",
                        "-c",
                        &c,
                        "-z",
                        &d,
                    ];
                    let p = streams.to_string();
                    if proto != "h1" {
                        a.extend(["--http2", "-p", &p]);
                    }
                    let ca = target
                        .ca
                        .as_ref()
                        .map(|p| p.display().to_string())
                        .unwrap_or_default();
                    // The certificate names localhost: ask for that name and
                    // connect to 127.0.0.1 all the same.
                    let port = addr.port();
                    let connect_to = format!("localhost:{port}:127.0.0.1:{port}");
                    let tls_url = url.replace("127.0.0.1", "localhost");
                    if proto == "h2tls" {
                        a.extend(["--cacert", &ca, "--connect-to", &connect_to, &tls_url]);
                    } else {
                        a.push(&url);
                    }
                    let (out, cpu) = tool_run(args.client_cpu, oha, &a)?;
                    let (rps, done, errors) = oha_numbers(&out)
                        .with_context(|| format!("oha output not understood: {out}"))?;
                    push("oha", rps, cpu / done, errors);
                }
            }
        }
    }
    summary(&rows);
    Ok(())
}

struct Row {
    proto: String,
    tool: &'static str,
    round: usize,
    rps: f64,
    us: f64,
    errors: u64,
}

impl Row {
    fn print(&self) {
        println!(
            "{:<6} {:<8} {:>5} {:>12.0} {:>14.2} {:>10}",
            self.proto, self.tool, self.round, self.rps, self.us, self.errors
        );
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.retain(|x| !x.is_nan());
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Per protocol and tool: median req/s and client µs/request over the
/// rounds, the ratio of the medians (tool ÷ rig) and the per-round ratios
/// (tool µs/req ÷ rig µs/req of the same round).
fn summary(rows: &[Row]) {
    println!();
    println!(
        "{:<6} {:<8} {:>12} {:>14} {:>10}  per-round µs ratio vs rig",
        "proto", "tool", "median req/s", "median µs/req", "÷ rig"
    );
    let mut protos: Vec<&str> = Vec::new();
    for r in rows {
        if !protos.contains(&r.proto.as_str()) {
            protos.push(&r.proto);
        }
    }
    for proto in protos {
        let of = |tool: &str| -> Vec<&Row> {
            rows.iter()
                .filter(|r| r.proto == proto && r.tool == tool)
                .collect()
        };
        let rig = of("rig");
        let rig_us = median(rig.iter().map(|r| r.us).collect());
        for tool in ["rig", "wrk", "h2load", "oha"] {
            let t = of(tool);
            if t.is_empty() {
                continue;
            }
            let us = median(t.iter().map(|r| r.us).collect());
            let rps = median(t.iter().map(|r| r.rps).collect());
            let per_round: Vec<String> = t
                .iter()
                .map(|r| {
                    let base = rig.iter().find(|g| g.round == r.round).map(|g| g.us);
                    match base {
                        Some(b) => format!("{:.2}", r.us / b),
                        None => "-".into(),
                    }
                })
                .collect();
            println!(
                "{:<6} {:<8} {:>12.0} {:>14.2} {:>10.2}  {}",
                proto,
                tool,
                rps,
                us,
                us / rig_us,
                per_round.join(" ")
            );
        }
    }
}

/// oha's JSON (`--output-format json`): req/s from `summary.requestsPerSec`,
/// requests completed from `statusCodeDistribution`, errors from
/// `errorDistribution` less the requests cut off by the `-z` deadline.
fn oha_numbers(out: &str) -> Option<(f64, f64, u64)> {
    let v: serde_json::Value = serde_json::from_str(out.trim()).ok()?;
    let rps = v["summary"]["requestsPerSec"].as_f64()?;
    let codes = v["statusCodeDistribution"].as_object()?;
    let done: u64 = codes.values().filter_map(|n| n.as_u64()).sum();
    let non_200: u64 = codes
        .iter()
        .filter(|(k, _)| k.as_str() != "200")
        .filter_map(|(_, n)| n.as_u64())
        .sum();
    let errors: u64 = v["errorDistribution"]
        .as_object()
        .map(|m| {
            m.iter()
                .filter(|(k, _)| !k.contains("deadline"))
                .filter_map(|(_, n)| n.as_u64())
                .sum()
        })
        .unwrap_or(0);
    if errors + non_200 > 0 {
        eprintln!(
            "oha: status codes {}, errors {}",
            v["statusCodeDistribution"], v["errorDistribution"]
        );
    }
    Some((rps, done as f64, errors + non_200))
}

/// Run a load tool pinned to `cpu`; its output and its CPU time in µs.
fn tool_run(cpu: usize, name: &str, args: &[&str]) -> Result<(String, f64)> {
    let before = children_cpu_us();
    let mut cmd = Command::new(name);
    cmd.args(args);
    pin(&mut cmd, cpu);
    let out = cmd.output().with_context(|| format!("running {name}"))?;
    let cpu_us = children_cpu_us() - before;
    if !out.status.success() {
        eprintln!(
            "{name} exited with {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
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
