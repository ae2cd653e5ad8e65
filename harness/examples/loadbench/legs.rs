//! One leg: one tool against one protocol of the target for one round,
//! its row printed and kept for the summary.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use rig::load::{Client, Endpoint, Expect, LoadSpec, Mode, Protocol};

use crate::summary::Row;
use crate::tools::{field, h2load_numbers, oha_numbers, tool_run};
use crate::{protocol, Args, Target};

pub struct Leg {
    proto: String,
    round: usize,
    addr: SocketAddr,
    protocol: Protocol,
    streams: usize,
    /// nginx's body for h1 and h2, rig-peer's for h3.
    expect: Expect,
    ca: Option<PathBuf>,
    url: String,
    /// `--duration` rounded up, as the tools take it.
    secs: String,
    connections: String,
}

impl Leg {
    /// `None` when the target has no listener for `proto`.
    pub fn new(args: &Args, target: &Target, proto: &str, round: usize) -> Option<Leg> {
        let (addr, protocol, scheme) = protocol(proto, target);
        let addr = addr?;
        let (expect, ca) = match (&target.h3, proto) {
            (Some(h3), "h3") => (h3.expect.clone(), Some(h3.ca.clone())),
            _ => (target.expect.clone(), target.ca.clone()),
        };
        Some(Leg {
            proto: proto.to_string(),
            round,
            addr,
            protocol,
            streams: if proto == "h1" { 1 } else { args.streams },
            expect,
            ca,
            url: format!("{scheme}://127.0.0.1:{}{}", addr.port(), target.path),
            secs: format!("{}", args.duration.ceil() as u64),
            connections: args.connections.to_string(),
        })
    }

    fn push(&self, rows: &mut Vec<Row>, tool: &'static str, rps: f64, us: f64, errors: u64) {
        let r = self.row(tool, rps, us, errors);
        r.print();
        rows.push(r);
    }

    fn row(&self, tool: &'static str, rps: f64, us: f64, errors: u64) -> Row {
        Row {
            proto: self.proto.clone(),
            tool,
            round: self.round,
            rps,
            us,
            errors,
        }
    }

    /// rig's own generator, closed loop (and open loop at `--open-rate`,
    /// printed but left out of the summary).
    pub fn rig(&self, args: &Args, target: &Target, rows: &mut Vec<Row>) -> Result<()> {
        let duration = Duration::from_secs_f64(args.duration);
        let addr = self.addr;
        let spec = LoadSpec {
            addr,
            protocol: self.protocol.clone(),
            endpoint: Endpoint {
                path: target.path.clone(),
                expect: self.expect.clone(),
            },
            connections: args.connections,
            streams: self.streams,
            client_cpus: Some(vec![args.client_cpu]),
            threads: Some(1),
            spin: None,
            request_timeout: rig::load::REQUEST_TIMEOUT,
            deadline: None,
        };
        let mut client = Client::connect(&spec)?;
        let warm = client.run(&Mode::FixedCount { requests: 5000 });
        if warm.succeeded != 5000 {
            bail!("warm-up against {addr} failed: {:?}", warm.errors);
        }
        let r = client.run(&Mode::Closed { duration });
        r.check_invariants().map_err(anyhow::Error::msg)?;
        self.push(
            rows,
            "rig",
            r.rps,
            r.client_us_per_request(),
            r.errors_total(),
        );
        if let Some(rate) = args.open_rate {
            let o = client.run(&Mode::Open { rate, duration });
            o.check_invariants().map_err(anyhow::Error::msg)?;
            self.row(
                "rig-open",
                o.rps,
                o.client_us_per_request(),
                o.errors_total(),
            )
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
        Ok(())
    }

    pub fn wrk(&self, args: &Args, rows: &mut Vec<Row>) -> Result<()> {
        let d = format!("{}s", self.secs);
        let c = &self.connections;
        let (out, cpu) = tool_run(
            args.client_cpu,
            "wrk",
            &["-t1", "-c", c, "-d", &d, &self.url],
        )?;
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
        self.push(rows, "wrk", rps, cpu / done, errors as u64);
        Ok(())
    }

    pub fn h2load(&self, args: &Args, rows: &mut Vec<Row>) -> Result<()> {
        let m = self.streams.to_string();
        let mut a = vec!["-t1", "-c", &self.connections, "-m", &m, "-D", &self.secs];
        if self.proto == "h1" {
            a.push("--h1");
        }
        a.push(&self.url);
        let (out, cpu) = tool_run(args.client_cpu, "h2load", &a)?;
        let (rps, done, failed) = h2load_numbers(&out);
        self.push(rows, "h2load", rps, cpu / done, failed);
        Ok(())
    }

    pub fn oha(&self, args: &Args, oha: &str, rows: &mut Vec<Row>) -> Result<()> {
        let d = format!("{}s", self.secs);
        let mut a = vec![
            "--no-tui",
            // One runtime thread like the other generators (its default is
            // the number of physical cores, not the affinity mask).
            "--worker-threads",
            "1",
            "--output-format",
            "json",
            "-c",
            &self.connections,
            "-z",
            &d,
        ];
        let p = self.streams.to_string();
        match self.proto.as_str() {
            "h1" => {}
            "h3" => a.extend(["--http-version", "3", "-p", &p]),
            _ => a.extend(["--http2", "-p", &p]),
        }
        let ca = self
            .ca
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_default();
        // The certificate names localhost: ask for that name and connect to
        // 127.0.0.1 all the same.
        let port = self.addr.port();
        let connect_to = format!("localhost:{port}:127.0.0.1:{port}");
        let tls_url = self.url.replace("127.0.0.1", "localhost");
        if self.proto == "h2tls" || self.proto == "h3" {
            a.extend(["--cacert", &ca, "--connect-to", &connect_to, &tls_url]);
        } else {
            a.push(&self.url);
        }
        let (out, cpu) = tool_run(args.client_cpu, oha, &a)?;
        let (rps, done, errors) =
            oha_numbers(&out).with_context(|| format!("oha output not understood: {out}"))?;
        self.push(rows, "oha", rps, cpu / done, errors);
        Ok(())
    }
}
