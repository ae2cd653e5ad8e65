//! Load generators.
//!
//! In: a `LoadSpec` (loopback address, protocol, endpoint with the expected
//! response, connections × streams, client CPUs) and a `Mode` (fixed count,
//! closed loop for a duration, open loop at a rate). Out: a `LoadReport`:
//! counts that always add up (`scheduled = on_time + late + expired`,
//! `sent = on_time + late = succeeded + errors`), errors by kind, HDR
//! histograms of latency, request latency, dispatch lag and queueing delay
//! (summaries plus the serialized histograms, so repeats can be merged),
//! handshakes made and the generator's own CPU time, spin apart from work.
//!
//! The open loop never drops a request: one that finds every stream busy
//! waits in a FIFO queue (`open`), and the dispatcher sleeps and then spins
//! to each send time so that it sends on time to the µs (`dispatch`).
//!
//! `Client` keeps its connections between runs: the runner connects once,
//! warms up with `run(FixedCount)`, then measures. Every response is
//! validated (status, content type, whole body) and a failed request is
//! counted by kind, never an abort.
//!
//! `live` holds long-lived connections (TCP echo, WebSocket, server-sent
//! events) through the phases of one cycle, each message's echo checked.
//!
//! `blocking` is the small thread-per-connection HTTP/1.1 client that
//! `rig attach --drive` uses for its fixed-count attribution window.

mod blocking;
mod conn;
pub mod dispatch;
mod generations;
mod h1;
mod h2;
mod h3;
pub use h3::{fetch as fetch_h3, Fetched};
pub mod hist;
pub mod live;
mod open;
pub mod schedule;
pub mod sniff;
mod tls;
pub use tls::tls_client_config;
pub mod tools;
pub mod url;
mod validate;
mod worker;

use std::collections::BTreeMap;
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde::{Deserialize, Serialize};

pub use blocking::{connect, fixed_count, Conn, H1Target, LoadResult};
pub use dispatch::{calibrate_on, DispatchFacts, SpinSource};
pub use hist::{EncodedHists, HistSummary};

/// A request that has not completed after this long counts as `timeout`
/// (the default of `request_timeout_ms` and `--request-timeout`). It also
/// bounds each connection's TCP connect and TLS and h2 handshakes.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Error kind of the requests a fixed count did not send because its
/// deadline ([`LoadSpec::deadline`]) had passed.
pub const DEADLINE: &str = "case deadline";
/// Open loop: a queued request not sent within this long of its scheduled
/// time is `expired` (not sent; its latency, at least this, is recorded).
pub const EXPIRE_AFTER: Duration = Duration::from_secs(1);
/// Open loop: a request the generator sent more than this after it could
/// have gone (its send time, or when a stream freed up for it) was late
/// because of the generator.
pub const LATE_AFTER: Duration = Duration::from_micros(100);
/// A case in which more than this share of the scheduled requests were late
/// because of the generator is `limited`: its latency is partly the
/// generator's.
pub const LIMITED_SHARE: f64 = 0.01;
/// A slot whose connection fails this many times in a row (breaks, or cannot
/// be re-established) with no successful request in between is given up:
/// its further requests count as `connection lost`.
pub const MAX_CONSECUTIVE_CONN_FAILURES: u32 = 2;

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("--drive `{url}`: {why}")]
    BadUrl { url: String, why: String },
    #[error("--drive `{url}` resolves to {addr}, which is not loopback: rig only sends load to 127.0.0.0/8 or ::1")]
    NotLoopback { url: String, addr: SocketAddr },
    #[error("connecting to {addr}: {source}")]
    Connect {
        addr: SocketAddr,
        #[source]
        source: io::Error,
    },
    #[error("load spec: {0}")]
    Spec(String),
    #[error("CA file {path}: {why}")]
    Ca { path: PathBuf, why: String },
    #[error("server name `{name}`: {why}")]
    ServerName { name: String, why: String },
    #[error("connection {index} to {addr}: {kind}")]
    Handshake {
        index: usize,
        addr: SocketAddr,
        kind: String,
    },
    #[error("load thread {index}: {why}")]
    Thread { index: usize, why: String },
}

/// Wire protocol and connection policy.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub enum Protocol {
    /// HTTP/1.1 over TCP; `keepalive: false` opens a new TCP connection for
    /// every request.
    H1 { keepalive: bool },
    /// HTTP/2 with prior knowledge over TCP.
    H2c,
    /// HTTP/2 over TLS (ALPN `h2`), verifying the server against `ca_pem`
    /// (`insecure`: accepting any certificate; `ca_pem` is then unused).
    H2Tls {
        ca_pem: PathBuf,
        server_name: String,
        #[serde(default)]
        insecure: bool,
    },
    /// HTTP/1.1 keep-alive over TLS (ALPN `http/1.1`).
    H1Tls {
        ca_pem: PathBuf,
        server_name: String,
        #[serde(default)]
        insecure: bool,
    },
    /// HTTP/3 over QUIC (ALPN `h3`) on the UDP port of `addr`, verified
    /// as for `H2Tls`.
    H3 {
        ca_pem: PathBuf,
        server_name: String,
        #[serde(default)]
        insecure: bool,
    },
}

/// Expected body of every response.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub enum ExpectBody {
    Exact(Bytes),
    Sha256([u8; 32]),
    Any,
}

/// What every response must be. `content_type` without `;` matches the
/// media type only (`text/plain` matches `text/plain; charset=utf-8`); with
/// `;` it must match the whole value. Both compare case-insensitively.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Expect {
    pub status: u16,
    pub content_type: Option<String>,
    pub body: ExpectBody,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Endpoint {
    /// Path and query, e.g. `/plain`.
    pub path: String,
    pub expect: Expect,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub enum Mode {
    /// Exactly `requests` requests, spread evenly over every stream.
    FixedCount { requests: u64 },
    /// Every stream sends its next request as soon as the last one
    /// completed, until `duration` has passed.
    Closed { duration: Duration },
    /// `rate` requests per second in total on a fixed schedule, for
    /// `duration` (see `schedule` for the exact policy).
    Open { rate: f64, duration: Duration },
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct LoadSpec {
    /// Loopback only.
    pub addr: SocketAddr,
    pub protocol: Protocol,
    pub endpoint: Endpoint,
    pub connections: usize,
    /// HTTP/2: concurrent streams per connection. HTTP/1.1: must be 1.
    pub streams: usize,
    /// Pin the generator's threads to these CPUs (thread i → CPU i mod n).
    pub client_cpus: Option<Vec<usize>>,
    /// Generator threads; default: one per client CPU, else
    /// min(connections, available CPUs).
    pub threads: Option<usize>,
    /// Open loop: spin this long before each send time; `None`: calibrate
    /// each generator thread's wake-up lateness at connect and choose.
    pub spin: Option<Duration>,
    /// A request not answered within this long counts as `timeout` (and
    /// gives up its connection); each connect and handshake is bounded by
    /// it too ([`REQUEST_TIMEOUT`] by default).
    #[serde(default = "default_request_timeout")]
    pub request_timeout: Duration,
    /// Nothing is sent after this instant: a request in flight then ends
    /// as `timeout`, the requests of a fixed count not yet sent count as
    /// [`DEADLINE`], and a duration or schedule ends early. How a case
    /// ends on time however slowly its server answers.
    #[serde(skip)]
    pub deadline: Option<Instant>,
}

fn default_request_timeout() -> Duration {
    REQUEST_TIMEOUT
}

/// Successful handshakes, counted per layer.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Handshakes {
    pub tcp: u64,
    pub tls: u64,
    pub h2: u64,
    /// HTTP/3: UDP sockets opened (one per connection).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub udp: u64,
    /// HTTP/3: QUIC handshakes completed (ALPN `h3`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub quic: u64,
    /// HTTP/3: connections whose h3 control streams were set up.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub h3: u64,
}

/// The QUIC-side counts are left out of a TCP load's JSON (and read as 0
/// from an older result).
fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Handshakes {
    pub fn add(&mut self, o: Handshakes) {
        self.tcp += o.tcp;
        self.tls += o.tls;
        self.h2 += o.h2;
        self.udp += o.udp;
        self.quic += o.quic;
        self.h3 += o.h3;
    }
    /// "4 TCP, 4 TLS, 4 h2", or "4 UDP, 4 QUIC, 4 h3" for a load known to
    /// be HTTP/3 (`quic`; a window without handshakes cannot tell).
    pub fn describe_as(&self, quic: bool) -> String {
        match quic {
            true => format!("{} UDP, {} QUIC, {} h3", self.udp, self.quic, self.h3),
            false => format!("{} TCP, {} TLS, {} h2", self.tcp, self.tls, self.h2),
        }
    }

    fn minus(self, o: Handshakes) -> Handshakes {
        Handshakes {
            tcp: self.tcp - o.tcp,
            tls: self.tls - o.tls,
            h2: self.h2 - o.h2,
            udp: self.udp - o.udp,
            quic: self.quic - o.quic,
            h3: self.h3 - o.h3,
        }
    }
}

/// What one `Client::run` did.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct LoadReport {
    pub mode: Mode,
    /// From the common start to the last completed request.
    pub elapsed_ns: u64,
    /// Open loop: requests on the schedule. Otherwise the requests asked
    /// for: `sent` + `not_sent`.
    pub scheduled: u64,
    /// `on_time + late`.
    pub sent: u64,
    /// Open loop: sent on a stream that was free at the scheduled time.
    /// Otherwise equal to `sent`.
    pub on_time: u64,
    /// Open loop: every stream was busy at the scheduled time; waited in the
    /// queue (`queue_delay`) and was sent when one freed up.
    pub late: u64,
    /// Open loop: queued and not sent within `EXPIRE_AFTER`; counted in
    /// `latency` at the time it was given up.
    pub expired: u64,
    /// Open loop: sent more than `LATE_AFTER` after it could have gone
    /// (late because of the generator, not the server).
    pub generator_late: u64,
    pub succeeded: u64,
    /// Failed requests by kind: `status 500`, `content-type`, `body
    /// mismatch`, `io: ConnectionReset`, `timeout`, `tls: ...`, ...
    pub errors: BTreeMap<String, u64>,
    /// Requests never handed to a socket, by why (`connection lost`: the
    /// connection was given up, the target closed or stopped accepting;
    /// `case deadline`; `interrupted`): not in `sent`, never failures of
    /// the server's.
    #[serde(default)]
    pub not_sent: BTreeMap<String, u64>,
    /// Successful requests and expired ones. Open loop: from the scheduled
    /// send time (coordinated omission corrected); otherwise from the
    /// actual send.
    pub latency: HistSummary,
    /// Successful requests, from the actual send.
    pub request_latency: HistSummary,
    /// Open loop, every sent request: the generator's own lag, from when
    /// the request could go (its scheduled time, or when a stream freed up
    /// for it) to when its bytes were handed to the socket.
    pub dispatch_lag: HistSummary,
    /// Open loop, `late` requests: scheduled time to when a stream freed up.
    pub queue_delay: HistSummary,
    /// The histograms, serialized: merge these across repeats.
    pub histogram: EncodedHists,
    /// Handshakes made during this run (re-established connections, or one
    /// per request without keep-alive).
    pub handshakes: Handshakes,
    /// CPU time of the generator's threads over the run, spin included.
    pub client_cpu_ns: u64,
    /// Of that, the open-loop dispatcher spinning toward send times.
    pub client_spin_ns: u64,
    /// How the dispatcher waited for send times (spin window, calibration).
    pub dispatch: DispatchFacts,
    /// `succeeded` per second of `elapsed_ns`.
    pub rps: f64,
}

impl LoadReport {
    pub fn errors_total(&self) -> u64 {
        self.errors.values().sum()
    }

    /// Requests never sent (`not_sent`), of every kind.
    pub fn not_sent_total(&self) -> u64 {
        self.not_sent.values().sum()
    }

    /// The invariants every report must satisfy; `Err` names the one that
    /// does not hold.
    pub fn check_invariants(&self) -> Result<(), String> {
        if self.scheduled != self.on_time + self.late + self.expired + self.not_sent_total() {
            return Err(format!(
                "scheduled {} != on time {} + late {} + expired {} + not sent {}",
                self.scheduled,
                self.on_time,
                self.late,
                self.expired,
                self.not_sent_total()
            ));
        }
        if self.sent != self.on_time + self.late {
            return Err(format!(
                "sent {} != on time {} + late {}",
                self.sent, self.on_time, self.late
            ));
        }
        if self.sent != self.succeeded + self.errors_total() {
            return Err(format!(
                "sent {} != succeeded {} + errors {}",
                self.sent,
                self.succeeded,
                self.errors_total()
            ));
        }
        if self.latency.count != self.succeeded + self.expired {
            return Err(format!(
                "latency histogram holds {} != succeeded {} + expired {}",
                self.latency.count, self.succeeded, self.expired
            ));
        }
        if let Mode::FixedCount { requests } = self.mode {
            if self.sent + self.not_sent_total() != requests {
                return Err(format!(
                    "sent {} + not sent {} != requests {requests}",
                    self.sent,
                    self.not_sent_total()
                ));
            }
        }
        Ok(())
    }

    /// More than `LIMITED_SHARE` of the scheduled requests were late because
    /// of the generator: the case's latency is partly the generator's.
    pub fn generator_limited(&self) -> bool {
        self.scheduled > 0 && self.generator_late as f64 > LIMITED_SHARE * self.scheduled as f64
    }

    /// Client work CPU (spin excluded) per successful request, in µs.
    pub fn client_us_per_request(&self) -> f64 {
        if self.succeeded == 0 {
            return f64::NAN;
        }
        let work = self.client_cpu_ns.saturating_sub(self.client_spin_ns);
        work as f64 / 1e3 / self.succeeded as f64
    }
}

/// Established connections, ready to run load again and again.
pub struct Client {
    workers: Vec<worker::Worker>,
    /// Slots (connection × stream) per worker, in global slot order.
    slots_per_worker: Vec<usize>,
    handshakes: Handshakes,
    dispatch: Vec<DispatchFacts>,
}

impl Client {
    /// Validate `spec`, start the generator threads and make every
    /// connection (TCP, TLS, h2 handshakes). Keep-alive connections that
    /// cannot be made are an error here; without keep-alive nothing is
    /// connected until `run`.
    pub fn connect(spec: &LoadSpec) -> Result<Client, LoadError> {
        let setup = Arc::new(conn::Setup::new(spec)?);
        let threads = thread_count(spec)?;
        let mut per_thread: Vec<Vec<usize>> = vec![Vec::new(); threads];
        for c in 0..spec.connections {
            per_thread[c % threads].push(c);
        }
        let mut workers = Vec::with_capacity(threads);
        let mut slots_per_worker = Vec::with_capacity(threads);
        let mut handshakes = Handshakes::default();
        let mut dispatch = Vec::with_capacity(threads);
        let starting: Vec<_> = per_thread
            .into_iter()
            .enumerate()
            .map(|(i, conns)| {
                let cpu = spec.client_cpus.as_ref().map(|c| c[i % c.len()]);
                slots_per_worker.push(conns.len() * setup.streams);
                worker::Worker::start(i, cpu, setup.clone(), conns, spec.spin)
            })
            .collect::<Result<_, _>>()?;
        // Each thread connects its own connections, concurrently.
        for w in starting {
            let (w, hs, d) = w.ready()?;
            handshakes.add(hs);
            dispatch.push(d);
            workers.push(w);
        }
        Ok(Client {
            workers,
            slots_per_worker,
            handshakes,
            dispatch,
        })
    }

    /// Each generator thread's spin window and wake-up calibration.
    pub fn dispatch(&self) -> &[DispatchFacts] {
        &self.dispatch
    }

    /// Generator threads (one tokio runtime each).
    pub fn threads(&self) -> usize {
        self.workers.len()
    }

    /// Handshakes made so far (connect plus every run).
    pub fn handshakes(&self) -> Handshakes {
        self.handshakes
    }

    /// Run `mode` on the established connections and report.
    pub fn run(&mut self, mode: &Mode) -> LoadReport {
        let total_slots: usize = self.slots_per_worker.iter().sum();
        // Threads start together, a little in the future so that every
        // thread is waiting when the moment comes.
        let start = Instant::now() + Duration::from_millis(2);
        let mut first_slot = 0;
        for (i, w) in self.workers.iter().enumerate() {
            let n = self.slots_per_worker[i];
            let plan = match mode {
                Mode::FixedCount { requests } => worker::Plan::Fixed(
                    (first_slot..first_slot + n)
                        .map(|g| schedule::share(*requests, total_slots as u64, g as u64))
                        .collect(),
                ),
                Mode::Closed { duration } => worker::Plan::Closed(start + *duration),
                Mode::Open { rate, duration } => worker::Plan::Open(
                    schedule::Schedule::for_thread(start, *duration, *rate, n, total_slots, i),
                ),
            };
            first_slot += n;
            w.send(worker::Job { start, plan });
        }
        let mut total = worker::ThreadReport::default();
        for w in &self.workers {
            total.merge(w.wait());
        }
        self.handshakes.add(total.handshakes);
        total.into_report(mode.clone(), start)
    }
}

impl Client {
    /// Close every connection: `graceful` sends each h2 connection's
    /// GOAWAY and waits (up to a second each) for it to close; otherwise
    /// the sockets are closed with nothing said (an abrupt disconnect).
    /// Returns the h2 connections that went away gracefully.
    pub fn close(self, graceful: bool) -> u64 {
        for w in &self.workers {
            w.send(worker::Job {
                start: Instant::now(),
                plan: worker::Plan::Close { graceful },
            });
        }
        self.workers.iter().map(|w| w.wait().went_away).sum()
    }
}

fn thread_count(spec: &LoadSpec) -> Result<usize, LoadError> {
    if spec.connections == 0 {
        return Err(LoadError::Spec("connections must be at least 1".into()));
    }
    if let Some(c) = &spec.client_cpus {
        if c.is_empty() {
            return Err(LoadError::Spec(
                "client_cpus is empty; give at least one CPU or None".into(),
            ));
        }
    }
    let default = match &spec.client_cpus {
        Some(c) => c.len(),
        None => std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    let t = spec.threads.unwrap_or(default).min(spec.connections);
    if t == 0 {
        return Err(LoadError::Spec("threads must be at least 1".into()));
    }
    Ok(t)
}

/// Endpoint helper: expect `200`, optionally a content type, exactly `body`.
impl Expect {
    pub fn ok_exact(content_type: Option<&str>, body: impl Into<Bytes>) -> Expect {
        Expect {
            status: 200,
            content_type: content_type.map(str::to_string),
            body: ExpectBody::Exact(body.into()),
        }
    }
}
