//! Scenarios: the matrix file expanded into an ordered list of cases.
//!
//! In: `config/matrix.toml` (suites of protocol × path × load × topology),
//! the targets, the suites asked for, and the repeat count. Out: `Case`s in
//! run order — every round runs every case once, with the targets'
//! (implementations') order reversed on every other round so that no
//! implementation always runs first.

use std::path::Path;

use serde::{Deserialize, Serialize};

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
}

/// What a suite measures.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum SuiteKind {
    /// Idle resources after READY: RSS, PSS, VmHWM, threads, FDs.
    Memory,
    /// Request load on one protocol × path × load × topology.
    Http,
}

/// Wire protocol of a load case.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq, Hash)]
#[serde(rename_all = "kebab-case")]
pub enum Proto {
    H1,
    H2c,
    H2Tls,
}

impl Proto {
    pub fn name(self) -> &'static str {
        match self {
            Proto::H1 => "h1",
            Proto::H2c => "h2c",
            Proto::H2Tls => "h2-tls",
        }
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

impl Default for Defaults {
    fn default() -> Self {
        Defaults {
            warmup_ms: d_warmup(),
            duration_ms: d_duration(),
            repeats: d_repeats(),
            counted_requests: d_counted(),
            settle_ms: d_settle(),
        }
    }
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SuiteSpec {
    pub name: String,
    pub kind: SuiteKind,
    #[serde(default)]
    pub protocols: Vec<Proto>,
    #[serde(default)]
    pub paths: Vec<String>,
    /// Open-loop rates; empty = closed loop.
    #[serde(default)]
    pub rates: Vec<f64>,
    /// `CONNECTIONSxSTREAMS` (h2) or `CONNECTIONS` (h1).
    #[serde(default)]
    pub topologies: Vec<String>,
    /// h1 only: keep-alive (true) and/or a new connection per request.
    #[serde(default = "d_keepalive")]
    pub keepalive: Vec<bool>,
    pub warmup_ms: Option<u64>,
    pub duration_ms: Option<u64>,
    /// Memory suites: measure the idle server with a `plain` and/or a `tls`
    /// listener (the target's `tls_variant`).
    #[serde(default = "d_listeners")]
    pub listeners: Vec<Listener>,
}

/// The listener an idle (memory) case launches.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Listener {
    Plain,
    Tls,
}

fn d_listeners() -> Vec<Listener> {
    vec![Listener::Plain]
}

fn d_keepalive() -> Vec<bool> {
    vec![true]
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Matrix {
    #[serde(default)]
    pub defaults: Defaults,
    #[serde(rename = "suite", default)]
    pub suites: Vec<SuiteSpec>,
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
#[serde(into = "FlatCase")]
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
        }
    }
}

/// The flat JSON form of a [`Case`]: fields a kind does not have are
/// null (`keepalive` is true for memory cases, as it always was).
#[derive(Serialize)]
struct FlatCase {
    id: String,
    suite: String,
    kind: SuiteKind,
    target: usize,
    target_name: String,
    repeat: u32,
    protocol: Option<Proto>,
    path: Option<String>,
    load: Option<LoadShape>,
    topology: Option<Topology>,
    keepalive: bool,
    warmup_ms: u64,
    duration_ms: u64,
    counted_requests: u64,
    settle_ms: u64,
}

impl From<Case> for FlatCase {
    fn from(c: Case) -> FlatCase {
        let protocol = c.what.listener_protocol();
        let kind = c.what.suite_kind();
        let (path, load, topology, keepalive) = match c.what {
            CaseKind::Memory { .. } => (None, None, None, true),
            CaseKind::Http(h) => (Some(h.path), Some(h.load), Some(h.topology), h.keepalive),
        };
        FlatCase {
            id: c.id,
            suite: c.suite,
            kind,
            target: c.target,
            target_name: c.target_name,
            repeat: c.repeat,
            protocol,
            path,
            load,
            topology,
            keepalive,
            warmup_ms: c.warmup_ms,
            duration_ms: c.duration_ms,
            counted_requests: c.counted_requests,
            settle_ms: c.settle_ms,
        }
    }
}

impl Case {
    /// The HTTP settings of a load case; `None` for a memory case.
    pub fn http(&self) -> Option<&HttpCase> {
        match &self.what {
            CaseKind::Http(h) => Some(h),
            CaseKind::Memory { .. } => None,
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

impl Matrix {
    pub fn load(path: &Path) -> Result<Matrix, MatrixError> {
        let p = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| MatrixError::Read {
            path: p.clone(),
            source,
        })?;
        Matrix::parse(&p, &text)
    }

    pub fn parse(path: &str, text: &str) -> Result<Matrix, MatrixError> {
        let m: Matrix = toml::from_str(text).map_err(|e| {
            let (line, col) = e.span().map(|s| line_col(text, s.start)).unwrap_or((0, 0));
            MatrixError::Parse {
                path: path.to_string(),
                line,
                col,
                message: e.message().to_string(),
            }
        })?;
        validate(path, text, &m)?;
        Ok(m)
    }

    /// Expand `suites` (all when empty) for `targets` into run order.
    // Long by design: the matrix's nested loops, in the order case ids are
    // numbered; flattening them would hide that order.
    pub fn expand(
        &self,
        suites: &[String],
        targets: &[String],
        repeats: Option<u32>,
    ) -> Result<Vec<Case>, MatrixError> {
        for s in suites {
            if !self.suites.iter().any(|x| &x.name == s) {
                let have = self
                    .suites
                    .iter()
                    .map(|x| x.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ");
                return Err(MatrixError::UnknownSuite(s.clone(), have));
            }
        }
        let d = &self.defaults;
        let repeats = repeats.unwrap_or(d.repeats).max(1);
        let mut cases = Vec::new();
        for round in 1..=repeats {
            // A B, then B A: implementation order reversed every round.
            let order: Vec<usize> = if round % 2 == 1 {
                (0..targets.len()).collect()
            } else {
                (0..targets.len()).rev().collect()
            };
            for s in self
                .suites
                .iter()
                .filter(|s| suites.is_empty() || suites.contains(&s.name))
            {
                let warmup_ms = s.warmup_ms.unwrap_or(d.warmup_ms);
                let duration_ms = s.duration_ms.unwrap_or(d.duration_ms);
                let base = |t: usize, what: CaseKind| Case {
                    id: String::new(),
                    suite: s.name.clone(),
                    what,
                    target: t,
                    target_name: targets[t].clone(),
                    repeat: round,
                    warmup_ms,
                    duration_ms,
                    counted_requests: d.counted_requests,
                    settle_ms: d.settle_ms,
                };
                match s.kind {
                    SuiteKind::Memory => {
                        for &listener in &s.listeners {
                            for &t in &order {
                                let mut c = base(t, CaseKind::Memory { listener });
                                let name = match listener {
                                    Listener::Plain => "plain",
                                    Listener::Tls => "tls",
                                };
                                c.id = format!("{}/{}/{name}/#{round}", s.name, targets[t]);
                                cases.push(c);
                            }
                        }
                    }
                    SuiteKind::Http => {
                        let loads: Vec<LoadShape> = if s.rates.is_empty() {
                            vec![LoadShape::Closed]
                        } else {
                            s.rates
                                .iter()
                                .map(|&rate| LoadShape::Open { rate })
                                .collect()
                        };
                        for &proto in &s.protocols {
                            let keepalives: &[bool] = if proto == Proto::H1 {
                                &s.keepalive
                            } else {
                                &[true]
                            };
                            for path in &s.paths {
                                for load in &loads {
                                    for topo in &s.topologies {
                                        let topo = Topology::parse(topo).expect("validated");
                                        for &ka in keepalives {
                                            for &t in &order {
                                                let h = HttpCase {
                                                    protocol: proto,
                                                    path: path.clone(),
                                                    load: *load,
                                                    topology: topo,
                                                    keepalive: ka,
                                                };
                                                let mut c = base(t, CaseKind::Http(h));
                                                c.id = case_id(&c);
                                                cases.push(c);
                                            }
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        Ok(cases)
    }
}

fn case_id(c: &Case) -> String {
    let h = c.http().expect("only HTTP cases are numbered this way");
    let load = match h.load {
        LoadShape::Open { rate } => format!("r{rate}"),
        LoadShape::Closed => "closed".into(),
    };
    format!(
        "{}/{}/{}/{}/{}/{}x{}/{}/#{}",
        c.suite,
        c.target_name,
        h.protocol.name(),
        h.path.trim_start_matches('/'),
        load,
        h.topology.connections,
        h.topology.streams,
        if h.keepalive { "ka" } else { "new" },
        c.repeat
    )
}

/// The most requests per second rig schedules: one send slot per
/// microsecond. Beyond it a generator thread only spins (a rate of 1e12
/// kept both cores busy after the target was gone).
pub const MAX_RATE: f64 = 1_000_000.0;

/// File descriptors rig keeps for itself besides the load's connections.
const FD_HEADROOM: u64 = 64;

/// Refuse what cannot work before anything starts; every error names its
/// file:line:col.
fn validate(path: &str, text: &str, m: &Matrix) -> Result<(), MatrixError> {
    let at = |section: Section, key: Option<&str>| locate(text, section, key);
    let value = |(line, col): (usize, usize), message: String| MatrixError::Value {
        path: path.to_string(),
        line,
        col,
        message,
    };
    if m.suites.is_empty() {
        return Err(value(
            (1, 1),
            "a matrix needs at least one [[suite]] (name, kind, protocols, paths, topologies)"
                .into(),
        ));
    }
    let d = &m.defaults;
    for (key, v) in [
        ("duration_ms", d.duration_ms),
        ("counted_requests", d.counted_requests),
        ("repeats", u64::from(d.repeats)),
    ] {
        if v == 0 {
            return Err(value(
                at(Section::Defaults, Some(key)),
                format!("defaults.{key} = 0: a case with nothing to measure never ends usefully; give at least 1"),
            ));
        }
    }
    let nofile = nofile_limit();
    for (i, s) in m.suites.iter().enumerate() {
        let sec = Section::Suite(i);
        let bad = |key: Option<&str>, message: String| {
            let (line, col) = at(sec, key);
            MatrixError::Invalid {
                path: path.to_string(),
                line,
                col,
                suite: s.name.clone(),
                message,
            }
        };
        if s.name.trim().is_empty() {
            return Err(bad(
                Some("name"),
                "an empty suite name: give each suite a name".into(),
            ));
        }
        if let Some(j) = m.suites[..i].iter().position(|o| o.name == s.name) {
            let (line, _) = at(Section::Suite(j), Some("name"));
            return Err(bad(
                Some("name"),
                format!("two suites have this name (the other is at line {line}); --suite could not tell them apart"),
            ));
        }
        if s.duration_ms == Some(0) {
            return Err(bad(
                Some("duration_ms"),
                "duration_ms = 0: give at least 1".into(),
            ));
        }
        if s.kind != SuiteKind::Http {
            continue;
        }
        if s.protocols.is_empty() || s.paths.is_empty() || s.topologies.is_empty() {
            return Err(bad(
                None,
                "an http suite needs protocols, paths and topologies".into(),
            ));
        }
        for t in &s.topologies {
            let topo = Topology::parse(t).ok_or_else(|| {
                bad(
                    Some("topologies"),
                    format!("topology `{t}`: write CONNECTIONS or CONNECTIONSxSTREAMS, e.g. 4x16"),
                )
            })?;
            if topo.streams > 1 && s.protocols.contains(&Proto::H1) {
                return Err(bad(
                    Some("topologies"),
                    format!(
                        "topology `{t}` has {} streams per connection, but HTTP/1.1 carries one request at a time",
                        topo.streams
                    ),
                ));
            }
            if let Some(limit) = nofile {
                if topo.connections as u64 + FD_HEADROOM > limit {
                    return Err(bad(
                        Some("topologies"),
                        format!(
                            "topology `{t}`: {} connections need more file descriptors than this \
                             process may open (RLIMIT_NOFILE hard limit {limit}, {FD_HEADROOM} kept \
                             for rig); raise the limit (ulimit -Hn) or use fewer connections",
                            topo.connections
                        ),
                    ));
                }
            }
        }
        if s.rates.is_empty() && locate_key(text, sec, "rates").is_some() {
            return Err(bad(
                Some("rates"),
                "rates = []: give at least one rate, or leave `rates` out for a closed loop".into(),
            ));
        }
        if let Some(r) = s.rates.iter().find(|r| !r.is_finite() || **r <= 0.0) {
            return Err(bad(
                Some("rates"),
                format!("rate {r}: rates are requests per second, > 0"),
            ));
        }
        if let Some(r) = s.rates.iter().find(|r| **r > MAX_RATE) {
            return Err(bad(
                Some("rates"),
                format!(
                    "rate {r}: above the {MAX_RATE} requests/s one generator thread can schedule \
                     (one slot per microsecond); use a closed loop (no `rates`) for the most a \
                     server can do"
                ),
            ));
        }
        if let Some(p) = s.paths.iter().find(|p| !p.starts_with('/')) {
            return Err(bad(Some("paths"), format!("path `{p}` must start with /")));
        }
    }
    Ok(())
}

/// The hard RLIMIT_NOFILE (rig raises its soft limit to it for the load).
fn nofile_limit() -> Option<u64> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: r is a valid out-pointer.
    let ok = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } == 0;
    (ok && r.rlim_max != libc::RLIM_INFINITY).then_some(r.rlim_max)
}

/// Raise the soft RLIMIT_NOFILE to the hard one, so a topology the matrix
/// check accepted can open its connections. Returns the new soft limit
/// when it changed.
pub fn raise_nofile() -> Option<u64> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: valid pointers; setrlimit with rlim_cur <= rlim_max.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) != 0 || r.rlim_cur >= r.rlim_max {
            return None;
        }
        r.rlim_cur = r.rlim_max;
        (libc::setrlimit(libc::RLIMIT_NOFILE, &r) == 0).then_some(r.rlim_cur)
    }
}

/// A table of the matrix file.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Section {
    Defaults,
    /// The n-th `[[suite]]` (0-based).
    Suite(usize),
}

/// Line and column of `key` in `section`, from the TOML parser's spans
/// (so quoted keys, `[ defaults ]`, inline tables and arrays of inline
/// tables are found too): the key's position, the section's when the key
/// is not there or not given, 1:1 when the section is not written.
fn locate(text: &str, section: Section, key: Option<&str>) -> (usize, usize) {
    span_of(text, section, key).map_or((1, 1), |at| line_col(text, at))
}

/// Whether `key` is written in `section`.
fn locate_key(text: &str, section: Section, key: &str) -> Option<usize> {
    let (table, _) = section_table(text, section)?;
    table_key(&table, key)
}

fn span_of(text: &str, section: Section, key: Option<&str>) -> Option<usize> {
    let (table, start) = section_table(text, section)?;
    Some(key.and_then(|k| table_key(&table, k)).unwrap_or(start))
}

/// The table of `section` and where it starts (its header, or its inline
/// table).
fn section_table(text: &str, section: Section) -> Option<(toml::de::DeTable<'_>, usize)> {
    let doc = toml::de::DeTable::parse(text).ok()?.into_inner();
    let find = |name: &str| {
        doc.iter()
            .find(|(k, _)| k.get_ref() == name)
            .map(|(_, v)| v.clone())
    };
    let v = match section {
        Section::Defaults => find("defaults")?,
        Section::Suite(i) => find("suite")?.get_ref().as_array()?.get(i)?.clone(),
    };
    Some((v.get_ref().as_table()?.clone(), v.span().start))
}

/// Byte offset of `key` in `table`.
fn table_key(table: &toml::de::DeTable<'_>, key: &str) -> Option<usize> {
    table
        .iter()
        .find(|(k, _)| k.get_ref() == key)
        .map(|(k, _)| k.span().start)
}

/// 1-based line and column of a byte offset.
pub fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, col)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `cases.jsonl` keeps its flat shape: a kind's missing settings are
    /// null, a memory case's TLS listener is protocol h2-tls.
    #[test]
    fn a_case_serializes_flat() {
        let text = M.replace(
            "kind = \"memory\"",
            "kind = \"memory\"\nlisteners = [\"plain\", \"tls\"]",
        );
        let m = Matrix::parse("t.toml", &text).unwrap();
        let cases = m.expand(&[], &["peer".into()], Some(1)).unwrap();
        let json = |id_part: &str| {
            let c = cases.iter().find(|c| c.id.contains(id_part)).unwrap();
            serde_json::to_value(c).unwrap()
        };
        let tls = json("/tls/");
        assert_eq!(tls["kind"], "memory");
        assert_eq!(tls["protocol"], "h2-tls");
        assert!(tls["path"].is_null() && tls["topology"].is_null() && tls["load"].is_null());
        assert_eq!(tls["keepalive"], true);
        let h = json("/h1/");
        assert_eq!(h["kind"], "http");
        assert_eq!(h["protocol"], "h1");
        assert!(h["path"].is_string(), "{h}");
        assert!(h["topology"]["connections"].is_u64(), "{h}");
        for key in [
            "id",
            "suite",
            "target",
            "target_name",
            "repeat",
            "warmup_ms",
        ] {
            assert!(!h[key].is_null(), "{key}: {h}");
        }
    }

    #[test]
    fn a_slug_is_one_file_name() {
        assert_eq!(
            slug("http/peer/h1/plain/r1000/16x1/ka/#1"),
            "http_peer_h1_plain_r1000_16x1_ka_1"
        );
        assert_eq!(slug("memory/a b/#2"), "memory_a_b_2");
        assert_eq!(slug("../x"), "x");
    }

    const M: &str = r#"
[defaults]
repeats = 2

[[suite]]
name = "memory"
kind = "memory"

[[suite]]
name = "http"
kind = "http"
protocols = ["h1"]
paths = ["/plain", "/json"]
rates = [1000.0]
topologies = ["4"]
keepalive = [true, false]
"#;

    #[test]
    fn expands_rounds_with_target_order_reversed() {
        let m = Matrix::parse("m.toml", M).unwrap();
        let cases = m.expand(&[], &["a".into(), "b".into()], None).unwrap();
        // 2 rounds × (memory 2 targets + http 2 paths × 2 keepalive × 2 targets)
        assert_eq!(cases.len(), 2 * (2 + 8));
        assert_eq!(cases[0].id, "memory/a/plain/#1");
        assert_eq!(cases[1].id, "memory/b/plain/#1");
        assert_eq!(cases[10].id, "memory/b/plain/#2");
        assert_eq!(cases[11].id, "memory/a/plain/#2");
        assert_eq!(cases[2].id, "http/a/h1/plain/r1000/4x1/ka/#1");
        assert_eq!(cases[4].id, "http/a/h1/plain/r1000/4x1/new/#1");
    }

    #[test]
    fn explains_errors_with_their_line() {
        let e = Matrix::parse("m.toml", "[[suite]]\nname = \"x\"\nkind = \"htp\"\n").unwrap_err();
        let s = e.to_string();
        assert!(s.starts_with("m.toml:3:"), "{s}");
        let e = Matrix::parse(
            "m.toml",
            "[[suite]]\nname = \"h\"\nkind = \"http\"\nprotocols=[\"h1\"]\npaths=[\"/\"]\ntopologies=[\"2x8\"]\n",
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("HTTP/1.1 carries one request at a time"),
            "{e}"
        );
        let m = Matrix::parse("m.toml", M).unwrap();
        let e = m.expand(&["nope".into()], &["a".into()], None).unwrap_err();
        assert_eq!(
            e.to_string(),
            "--suite nope: no such suite in the matrix (have: memory, http)"
        );
    }

    /// Valid TOML a line-by-line reader misplaces: spaces in headers,
    /// quoted keys, suites as an inline array, a value on a later line.
    #[test]
    fn suite_level_errors_carry_the_position_the_parser_gives() {
        let pos = |text: &str| {
            let e = Matrix::parse("m.toml", text).unwrap_err().to_string();
            e.split(':').skip(1).take(2).collect::<Vec<_>>().join(":")
        };
        let suite = "name = \"a\"\nkind = \"http\"\nprotocols = [\"h1\"]\npaths = [\"/\"]\n";
        assert_eq!(
            pos(&format!("[ defaults ]\n# x\n  \"duration_ms\" = 0\n[[ suite ]]\n{suite}topologies = [\"1\"]\n")),
            "3:3"
        );
        assert_eq!(
            pos(&format!(
                "[[suite]]\n{suite}topologies = [\"1\"]\n[[ suite ]]\n{}\n  rates = []\ntopologies = [\"1\"]\n",
                suite.replace("\"a\"", "\"b\"")
            )),
            "13:3"
        );
        assert_eq!(
            pos("suite = [\n  { name = \"a\", kind = \"http\", protocols = [\"h1\"], paths = [\"/\"], topologies = [\"1\"], rates = [1e12] },\n]\n"),
            "2:87"
        );
        assert_eq!(
            pos(&format!("[[suite]]\n{suite}topologies = [\"1\"]\n\n[[suite]]\n{suite}topologies = [\"1\"]\n")),
            "9:1"
        );
    }

    #[test]
    fn parses_topologies() {
        assert_eq!(
            Topology::parse("4x16"),
            Some(Topology {
                connections: 4,
                streams: 16
            })
        );
        assert_eq!(
            Topology::parse("8"),
            Some(Topology {
                connections: 8,
                streams: 1
            })
        );
        assert_eq!(Topology::parse("0x1"), None);
        assert_eq!(Topology::parse("x"), None);
    }
}
