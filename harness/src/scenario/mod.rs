//! Scenarios: the matrix file expanded into an ordered list of cases.
//!
//! In: `config/matrix.toml` (suites of protocol × path × load × topology),
//! parsed into a [`Plan`] per suite with only its kind's settings, or
//! refused at its file:line:col; the targets, the suites asked for, and the
//! repeat count. Out: `Case`s in run order — every round runs every case
//! once, with the targets' (implementations') order reversed on every
//! other round so that no implementation always runs first.

use serde::{Deserialize, Serialize};

mod expand;
mod flat;
mod raw;
mod validate;
pub use expand::{SuiteSize, MAX_CASES};
use validate::validate;
pub use validate::{line_col, raise_nofile, MAX_MS, MAX_RATE};

/// The default `request_timeout_ms` (the load generator's own default).
pub const REQUEST_TIMEOUT_MS: u64 = 10_000;

#[derive(Debug, thiserror::Error)]
pub enum MatrixError {
    #[error("reading {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}:{line}:{col}: {message}")]
    Parse {
        path: String,
        line: usize,
        col: usize,
        message: String,
    },
    #[error("{path}:{line}:{col}: suite `{suite}`: {message}")]
    Invalid {
        path: String,
        line: usize,
        col: usize,
        suite: String,
        message: String,
    },
    #[error("{path}:{line}:{col}: {message}")]
    Value {
        path: String,
        line: usize,
        col: usize,
        message: String,
    },
    #[error("--suite {0}: no such suite in the matrix (have: {1})")]
    UnknownSuite(String, String),
    #[error("{0}")]
    TooManyCases(String),
}

/// What a suite measures.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum SuiteKind {
    /// Idle resources after READY: RSS, PSS, VmHWM, threads, FDs.
    Memory,
    /// Request load on one protocol × path × load × topology.
    Http,
    /// Memory against the number of open idle connections: tiers of
    /// connections, each verified with a request, then a least-squares
    /// line (bytes per connection).
    Memslope,
    /// Connection recovery in one server process: cycles of open
    /// connections, fixed-rate load, close (gracefully or abruptly), each
    /// cycle checked on its own.
    Recovery,
    /// A long fixed-rate run on one server, in intervals: latency, memory
    /// and descriptors per interval, and a counted window after each
    /// (allocations minus frees per request), fitted for drift.
    Soak,
    /// Long-lived connections (TCP echo, WebSocket, SSE) at tiers of
    /// connections: cycles of connecting, holding with traffic checked
    /// end to end, closing, and the server back at READY's descriptors.
    Live,
}

/// The protocol of a live case's connections.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq, Hash)]
#[serde(rename_all = "kebab-case")]
pub enum LiveProto {
    /// Raw TCP echo: newline-terminated messages come back.
    Tcp,
    /// WebSocket echo (HTTP/1.1 upgrade): text messages come back.
    Ws,
    /// Server-sent events: an event at once, then heartbeats.
    Sse,
}

impl LiveProto {
    pub fn name(self) -> &'static str {
        match self {
            LiveProto::Tcp => "tcp",
            LiveProto::Ws => "ws",
            LiveProto::Sse => "sse",
        }
    }
}

/// Wire protocol of a load case.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq, Hash)]
#[serde(rename_all = "kebab-case")]
pub enum Proto {
    H1,
    H2c,
    H2Tls,
    /// HTTP/3 over QUIC, on the UDP port of the target's port number.
    H3,
}

impl Proto {
    pub fn name(self) -> &'static str {
        match self {
            Proto::H1 => "h1",
            Proto::H2c => "h2c",
            Proto::H2Tls => "h2-tls",
            Proto::H3 => "h3",
        }
    }

    /// Needs a listener with a certificate: the target's TLS variant when
    /// the target itself has none.
    pub fn needs_tls(self) -> bool {
        matches!(self, Proto::H2Tls | Proto::H3)
    }
}

/// How load is offered in the clean pass.
#[derive(Clone, Copy, Debug, Serialize, PartialEq)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum LoadShape {
    /// Fixed arrival rate (requests/s), latency from the scheduled time.
    Open { rate: f64 },
    /// Every request slot busy all the time.
    Closed,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Defaults {
    #[serde(default = "d_warmup")]
    pub warmup_ms: u64,
    #[serde(default = "d_duration")]
    pub duration_ms: u64,
    #[serde(default = "d_repeats")]
    pub repeats: u32,
    /// Requests in the counted pass (fixed-count window).
    #[serde(default = "d_counted")]
    pub counted_requests: u64,
    /// Idle time after READY before a memory suite samples.
    #[serde(default = "d_settle")]
    pub settle_ms: u64,
    /// A request not answered within this long fails as `timeout` (and
    /// gives up its connection); connects and handshakes are bounded by it
    /// too.
    #[serde(default = "d_request_timeout")]
    pub request_timeout_ms: u64,
    /// A case not finished this long after it started is cut: nothing more
    /// is sent, requests in flight fail as `timeout`, those of a fixed
    /// count never sent as `case deadline`, and the case fails saying so.
    /// Default: [`default_case_timeout_ms`] of the case.
    pub case_timeout_ms: Option<u64>,
}

fn d_warmup() -> u64 {
    500
}
fn d_duration() -> u64 {
    2000
}
fn d_repeats() -> u32 {
    1
}
fn d_counted() -> u64 {
    1000
}
fn d_settle() -> u64 {
    500
}
fn d_request_timeout() -> u64 {
    REQUEST_TIMEOUT_MS
}

/// The deadline of a case without `case_timeout_ms`: five minutes for
/// what is not planned (launches, warm-up requests, the counted window,
/// quiescing), plus twice what is (its warm-up and duration, per cycle).
pub fn default_case_timeout_ms(warmup_ms: u64, duration_ms: u64, cycles: u32) -> u64 {
    let planned = warmup_ms.saturating_add(duration_ms.saturating_mul(u64::from(cycles.max(1))));
    300_000u64.saturating_add(planned.saturating_mul(2))
}

impl Default for Defaults {
    fn default() -> Self {
        Defaults {
            warmup_ms: d_warmup(),
            duration_ms: d_duration(),
            repeats: d_repeats(),
            counted_requests: d_counted(),
            settle_ms: d_settle(),
            request_timeout_ms: d_request_timeout(),
            case_timeout_ms: None,
        }
    }
}

/// The matrix file, parsed: its defaults and its suites, each with exactly
/// the settings of its kind.
#[derive(Clone, Debug)]
pub struct Matrix {
    pub defaults: Defaults,
    pub suites: Vec<Suite>,
    /// `[probes]`: the probes of the server's own code counted in every
    /// counted pass, beside those its target spec names.
    pub probes: NamedProbes,
}

/// `[probes] usdt = [...]  func = [...]  func_time = true  alloc_func =
/// [...]  free_func = [...]  interp_calls = ["python"]`: USDT markers,
/// functions, application allocators and interpreted calls, spelt as `rig
/// attach --usdt`/`--func`/`--alloc-func`/`--free-func`/`--interp-calls`
/// take them (their form is checked by the command that
/// loads the matrix).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NamedProbes {
    #[serde(default)]
    pub usdt: Vec<String>,
    #[serde(default)]
    pub func: Vec<String>,
    #[serde(default)]
    pub func_time: bool,
    #[serde(default)]
    pub alloc_func: Vec<String>,
    #[serde(default)]
    pub free_func: Vec<String>,
    #[serde(default)]
    pub interp_calls: Vec<String>,
}

/// One `[[suite]]`: its name, its own times (`None` takes the matrix's
/// [`Defaults`]) and what it measures.
#[derive(Clone, Debug, PartialEq)]
pub struct Suite {
    pub name: String,
    pub warmup_ms: Option<u64>,
    pub duration_ms: Option<u64>,
    pub request_timeout_ms: Option<u64>,
    pub case_timeout_ms: Option<u64>,
    pub plan: Plan,
}

/// What a suite measures, one variant per [`SuiteKind`], each with only
/// the settings that kind has: a soak suite always has its interval, an
/// http suite's topologies are parsed, a memory suite has no paths.
#[derive(Clone, Debug, PartialEq)]
pub enum Plan {
    /// The idle server, with each listener (the target's `tls_variant` for
    /// `tls`).
    Memory { listeners: Vec<Listener> },
    /// Request load; h1 also runs each keep-alive setting (true: one
    /// connection for many requests), h2 always keeps alive.
    Http {
        requests: Requests<LoadShape>,
        keepalive: Vec<bool>,
    },
    /// Memory at ascending tiers (at least three) of open connections: a
    /// case per protocol × path (each connection verified with one request
    /// on the path), then one per live protocol.
    Memslope {
        protocols: Vec<Proto>,
        paths: Vec<String>,
        live: Vec<LiveProto>,
        tiers: Vec<usize>,
    },
    /// Cycles (at least two) of fixed-rate load, each closed each way.
    Recovery {
        requests: Requests<f64>,
        cycles: u32,
        close: Vec<CloseKind>,
    },
    /// Fixed-rate load over the suite's duration, reported in intervals
    /// (at least two whole ones).
    Soak {
        requests: Requests<f64>,
        interval_ms: u64,
    },
    /// Long-lived connections: a case per protocol × tier (each at least
    /// 1), `cycles` times, a message every `message_ms` while held.
    Live {
        protocols: Vec<LiveProto>,
        tiers: Vec<usize>,
        cycles: u32,
        message_ms: u64,
    },
}

/// The request axes of an http, recovery or soak suite, multiplied in this
/// order: protocols × paths × loads × topologies, none of them empty.
/// `L` is a [`LoadShape`] for http suites (closed loop when the matrix
/// gives no rates) and a fixed rate (requests/s) for the others.
#[derive(Clone, Debug, PartialEq)]
pub struct Requests<L> {
    pub protocols: Vec<Proto>,
    /// Each starting with `/`.
    pub paths: Vec<String>,
    pub loads: Vec<L>,
    pub topologies: Vec<Topology>,
}

impl<L> Requests<L> {
    /// The same axes with other loads.
    pub fn map_loads<M>(self, f: impl FnOnce(Vec<L>) -> Vec<M>) -> Requests<M> {
        Requests {
            protocols: self.protocols,
            paths: self.paths,
            loads: f(self.loads),
            topologies: self.topologies,
        }
    }
}

impl Plan {
    pub fn kind(&self) -> SuiteKind {
        match self {
            Plan::Memory { .. } => SuiteKind::Memory,
            Plan::Http { .. } => SuiteKind::Http,
            Plan::Memslope { .. } => SuiteKind::Memslope,
            Plan::Recovery { .. } => SuiteKind::Recovery,
            Plan::Soak { .. } => SuiteKind::Soak,
            Plan::Live { .. } => SuiteKind::Live,
        }
    }
}

/// How a recovery cycle closes its connections.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum CloseKind {
    /// h2: GOAWAY (NO_ERROR), then the socket closes; h1: the socket
    /// closes between requests.
    Graceful,
    /// The sockets close with nothing said first.
    Abrupt,
}

impl CloseKind {
    pub fn name(self) -> &'static str {
        match self {
            CloseKind::Graceful => "graceful",
            CloseKind::Abrupt => "abrupt",
        }
    }
}

/// The listener an idle (memory) case launches.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Listener {
    Plain,
    Tls,
}

impl Listener {
    pub fn name(self) -> &'static str {
        match self {
            Listener::Plain => "plain",
            Listener::Tls => "tls",
        }
    }
}

/// Connections and concurrent streams per connection.
#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq)]
pub struct Topology {
    pub connections: usize,
    pub streams: usize,
}

impl Topology {
    pub fn parse(s: &str) -> Option<Topology> {
        let (c, st) = match s.split_once('x') {
            Some((c, st)) => (c.trim().parse().ok()?, st.trim().parse().ok()?),
            None => (s.trim().parse().ok()?, 1),
        };
        (c > 0 && st > 0).then_some(Topology {
            connections: c,
            streams: st,
        })
    }
}

/// One measured case: everything the runner needs, no references back.
///
/// Serialized flat (`kind`, `protocol`, `path`, `load`, `topology`,
/// `keepalive` beside the id), the shape `cases.jsonl` has always had.
#[derive(Clone, Debug, Serialize, PartialEq)]
#[serde(into = "flat::FlatCase")]
pub struct Case {
    /// Stable, readable id: `http/peer/h1/plain/r1000/16x1/ka/#1`.
    pub id: String,
    pub suite: String,
    /// What the case measures, with only the settings that kind has.
    pub what: CaseKind,
    /// Index into the run's targets.
    pub target: usize,
    pub target_name: String,
    pub repeat: u32,
    pub warmup_ms: u64,
    pub duration_ms: u64,
    pub counted_requests: u64,
    pub settle_ms: u64,
    /// A request not answered within this long is a `timeout`.
    pub request_timeout_ms: u64,
    /// The case is cut this long after it starts.
    pub case_timeout_ms: u64,
}

/// The kinds of case, each with exactly the settings it needs: an HTTP
/// case always has a protocol, a path, a load and a topology; a memory case
/// has none of them.
#[derive(Clone, Debug, PartialEq)]
pub enum CaseKind {
    /// The idle server after READY, with this listener.
    Memory { listener: Listener },
    /// Request load.
    Http(HttpCase),
    /// Memory at tiers of open idle connections.
    MemSlope(MemSlopeCase),
    /// Cycles of connect, load, close on one server.
    Recovery(RecoveryCase),
    /// Fixed-rate load in intervals on one server, for drift.
    Soak(SoakCase),
    /// Cycles of connect, hold, close of long-lived connections.
    Live(LiveCase),
}

/// One protocol × path × rate × topology of a soak suite.
#[derive(Clone, Debug, PartialEq)]
pub struct SoakCase {
    pub protocol: Proto,
    pub path: String,
    /// Requests per second, the whole run.
    pub rate: f64,
    pub topology: Topology,
    /// One interval; the case's `duration_ms` holds
    /// `duration_ms / interval_ms` of them.
    pub interval_ms: u64,
}

impl SoakCase {
    /// Whole intervals in `duration_ms`.
    pub fn intervals(&self, duration_ms: u64) -> u64 {
        duration_ms / self.interval_ms
    }
}

/// One protocol × tier of a live suite: `cycles` times on one server,
/// open `connections` connections, hold them for the case's `duration_ms`
/// (TCP and WebSocket send a message every `message_ms`; SSE waits for
/// heartbeats), close them.
#[derive(Clone, Debug, PartialEq)]
pub struct LiveCase {
    pub protocol: LiveProto,
    pub connections: usize,
    pub cycles: u32,
    pub message_ms: u64,
}

/// One protocol × path × rate × topology × close of a recovery suite.
#[derive(Clone, Debug, PartialEq)]
pub struct RecoveryCase {
    pub protocol: Proto,
    pub path: String,
    /// Requests per second during each cycle's load window.
    pub rate: f64,
    pub topology: Topology,
    pub cycles: u32,
    pub close: CloseKind,
}

/// One kind of connection of a memslope suite: the connections of each
/// tier are opened on one server, each proven served, and stay open, idle,
/// while memory is sampled.
#[derive(Clone, Debug, PartialEq)]
pub struct MemSlopeCase {
    pub conn: MemSlopeConn,
    /// Open connections at each sample, ascending.
    pub tiers: Vec<usize>,
}

/// What a memslope case's connections speak, and how each is proven served.
#[derive(Clone, Debug, PartialEq)]
pub enum MemSlopeConn {
    /// HTTP (h1 keep-alive, h2c, h2 over TLS): each answers one request on
    /// `path`.
    Http { protocol: Proto, path: String },
    /// Long-lived connections: TCP echo (its first message echoed),
    /// WebSocket (the upgrade) or SSE (the first event).
    Live(LiveProto),
}

impl MemSlopeConn {
    /// `h1/plain`, `ws`: the case id's part.
    pub fn id_part(&self) -> String {
        match self {
            MemSlopeConn::Http { protocol, path } => {
                format!("{}/{}", protocol.name(), path.trim_start_matches('/'))
            }
            MemSlopeConn::Live(p) => p.name().to_string(),
        }
    }
}

/// One protocol × path × load × topology (× keep-alive for h1).
#[derive(Clone, Debug, PartialEq)]
pub struct HttpCase {
    pub protocol: Proto,
    pub path: String,
    pub load: LoadShape,
    pub topology: Topology,
    /// h1: one connection for many requests (true) or one per request.
    pub keepalive: bool,
}

impl CaseKind {
    pub fn suite_kind(&self) -> SuiteKind {
        match self {
            CaseKind::Memory { .. } => SuiteKind::Memory,
            CaseKind::Http(_) => SuiteKind::Http,
            CaseKind::MemSlope(_) => SuiteKind::Memslope,
            CaseKind::Recovery(_) => SuiteKind::Recovery,
            CaseKind::Soak(_) => SuiteKind::Soak,
            CaseKind::Live(_) => SuiteKind::Live,
        }
    }

    /// The protocol whose listener the server is launched with: an HTTP
    /// case's protocol; for a memory case, h2 over TLS for the `tls`
    /// listener (what h2-tls cases launch), none for `plain`.
    pub fn listener_protocol(&self) -> Option<Proto> {
        match self {
            CaseKind::Memory {
                listener: Listener::Tls,
            } => Some(Proto::H2Tls),
            CaseKind::Memory {
                listener: Listener::Plain,
            } => None,
            CaseKind::Http(h) => Some(h.protocol),
            CaseKind::MemSlope(m) => match &m.conn {
                MemSlopeConn::Http { protocol, .. } => Some(*protocol),
                MemSlopeConn::Live(_) => None,
            },
            CaseKind::Recovery(r) => Some(r.protocol),
            CaseKind::Soak(k) => Some(k.protocol),
            // Not an HTTP listener: the live pass finds the target's live
            // endpoints (or its live variant) itself.
            CaseKind::Live(_) => None,
        }
    }
}

impl Case {
    /// The HTTP settings of a load case; `None` for a memory case.
    pub fn http(&self) -> Option<&HttpCase> {
        match &self.what {
            CaseKind::Http(h) => Some(h),
            CaseKind::Memory { .. }
            | CaseKind::MemSlope(_)
            | CaseKind::Recovery(_)
            | CaseKind::Soak(_)
            | CaseKind::Live(_) => None,
        }
    }

    /// The id as one file name (`http_peer_h1_plain_r1000_16x1_ka_1`): every
    /// character other than a letter, digit, `-` or `_` becomes `_` (so no
    /// slug is `..` or hidden), runs of `_` collapse. Per-case files of an output directory (e.g.
    /// `flame/<slug>/alloc.svg`) are named by it.
    pub fn slug(&self) -> String {
        slug(&self.id)
    }
}

/// [`Case::slug`] of an id read back from `cases.jsonl`.
pub fn slug(id: &str) -> String {
    let mut out = String::with_capacity(id.len());
    for ch in id.chars() {
        let c = if ch.is_ascii_alphanumeric() || matches!(ch, '-' | '_') {
            ch
        } else {
            '_'
        };
        if c == '_' && out.ends_with('_') {
            continue;
        }
        out.push(c);
    }
    out.trim_matches('_').to_string()
}

#[cfg(test)]
mod tests;
