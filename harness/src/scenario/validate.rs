//! The matrix file as written turned into the [`Plan`] of each suite's
//! kind, or refused before anything starts when it cannot work, each
//! problem located at `file:line:col` from the TOML parser's spans.

use super::raw::{RawMatrix, RawSuite};
use super::*;

/// The most requests per second rig schedules: one send slot per
/// microsecond. Beyond it a generator thread only spins (a rate of 1e12
/// kept both cores busy after the target was gone).
pub const MAX_RATE: f64 = 1_000_000.0;

/// The longest time a matrix may give (`*_ms`): a year. Beyond it a
/// value is a typo or an attempt to overflow a deadline (`duration_ms =
/// 9223372036854775807` was accepted and never ended).
pub const MAX_MS: u64 = 366 * 24 * 3600 * 1000;

/// File descriptors rig keeps for itself besides the load's connections.
const FD_HEADROOM: u64 = 64;

/// A suite's problem: the key it is at (the suite's header when `None`)
/// and what to do.
type Bad<'a> = &'a dyn Fn(Option<&str>, String) -> MatrixError;

/// Each suite of `raw` as its kind's [`Plan`]; what cannot work is
/// refused, the error naming its file:line:col.
pub(super) fn validate(path: &str, text: &str, raw: RawMatrix) -> Result<Matrix, MatrixError> {
    // The spans come from one parse of the file, made only when a check
    // needs a position: once per matrix, not once per suite (16,667 suites
    // were quadratic and never finished).
    let spans = Spans::new(text);
    let at = |section: Section, key: Option<&str>| spans.locate(section, key);
    let value = |(line, col): (usize, usize), message: String| MatrixError::Value {
        path: path.to_string(),
        line,
        col,
        message,
    };
    if raw.suites.is_empty() {
        return Err(value(
            (1, 1),
            "a matrix needs at least one [[suite]] (name, kind, protocols, paths, topologies)"
                .into(),
        ));
    }
    let d = &raw.defaults;
    for (key, v) in [
        ("duration_ms", d.duration_ms),
        ("counted_requests", d.counted_requests),
        ("repeats", u64::from(d.repeats)),
        ("request_timeout_ms", d.request_timeout_ms),
        ("case_timeout_ms", d.case_timeout_ms.unwrap_or(1)),
    ] {
        if v == 0 {
            return Err(value(
                at(Section::Defaults, Some(key)),
                format!("defaults.{key} = 0: a case with nothing to measure never ends usefully; give at least 1"),
            ));
        }
    }
    for (key, v) in [
        ("warmup_ms", Some(d.warmup_ms)),
        ("duration_ms", Some(d.duration_ms)),
        ("settle_ms", Some(d.settle_ms)),
        ("request_timeout_ms", Some(d.request_timeout_ms)),
        ("case_timeout_ms", d.case_timeout_ms),
    ] {
        if let Some(e) = too_long(key, v) {
            return Err(value(
                at(Section::Defaults, Some(key)),
                format!("defaults.{e}"),
            ));
        }
    }
    let nofile = nofile_limit();
    // The first suite of each name, for the duplicate check (linear).
    let mut first_of_name: std::collections::HashMap<&str, usize> =
        std::collections::HashMap::with_capacity(raw.suites.len());
    for (i, s) in raw.suites.iter().enumerate() {
        first_of_name.entry(s.name.as_str()).or_insert(i);
    }
    let mut suites = Vec::with_capacity(raw.suites.len());
    for (i, s) in raw.suites.iter().enumerate() {
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
        if let Some(&j) = first_of_name.get(s.name.as_str()).filter(|&&j| j != i) {
            let (line, _) = at(Section::Suite(j), Some("name"));
            return Err(bad(
                Some("name"),
                format!("two suites have this name (the other is at line {line}); --suite could not tell them apart"),
            ));
        }
        times(s, &bad)?;
        let axes = || requests(s, nofile, &spans, sec, &bad);
        let plan = match s.kind {
            SuiteKind::Memslope => memslope(s, nofile, &bad)?,
            SuiteKind::Live => live(s, nofile, &bad)?,
            SuiteKind::Memory => {
                not_soak(s, &bad)?;
                Plan::Memory {
                    listeners: s.listeners.clone(),
                }
            }
            SuiteKind::Http => {
                not_soak(s, &bad)?;
                Plan::Http {
                    requests: axes()?.map_loads(|rates| match rates.is_empty() {
                        true => vec![LoadShape::Closed],
                        false => rates
                            .into_iter()
                            .map(|rate| LoadShape::Open { rate })
                            .collect(),
                    }),
                    keepalive: s.keepalive.clone(),
                }
            }
            SuiteKind::Recovery => {
                recovery(s, &bad)?;
                not_soak(s, &bad)?;
                Plan::Recovery {
                    requests: axes()?,
                    cycles: s.cycles,
                    close: s.close.clone(),
                }
            }
            SuiteKind::Soak => {
                let interval_ms = soak(s, d, &bad)?;
                Plan::Soak {
                    requests: axes()?,
                    interval_ms,
                }
            }
        };
        suites.push(Suite {
            name: s.name.clone(),
            warmup_ms: s.warmup_ms,
            duration_ms: s.duration_ms,
            request_timeout_ms: s.request_timeout_ms,
            case_timeout_ms: s.case_timeout_ms,
            plan,
        });
    }
    Ok(Matrix {
        defaults: raw.defaults,
        suites,
        probes: raw.probes,
    })
}

/// A suite's times: none 0 that must run, none longer than [`MAX_MS`].
fn times(s: &RawSuite, bad: Bad<'_>) -> Result<(), MatrixError> {
    for (key, v) in [
        ("duration_ms", s.duration_ms),
        ("request_timeout_ms", s.request_timeout_ms),
        ("case_timeout_ms", s.case_timeout_ms),
    ] {
        if v == Some(0) {
            return Err(bad(Some(key), format!("{key} = 0: give at least 1")));
        }
    }
    for (key, v) in [
        ("warmup_ms", s.warmup_ms),
        ("duration_ms", s.duration_ms),
        ("request_timeout_ms", s.request_timeout_ms),
        ("case_timeout_ms", s.case_timeout_ms),
        ("interval_ms", s.interval_ms),
        ("message_ms", Some(s.message_ms)),
    ] {
        if let Some(e) = too_long(key, v) {
            return Err(bad(Some(key), e));
        }
    }
    Ok(())
}

/// `key = v` when `v` is more than [`MAX_MS`]: the message.
fn too_long(key: &str, v: Option<u64>) -> Option<String> {
    v.filter(|&v| v > MAX_MS).map(|v| {
        format!(
            "{key} = {v}: more than a year ({MAX_MS} ms); give a time in milliseconds that a \
             run can wait out"
        )
    })
}

/// Only a soak suite reports intervals.
fn not_soak(s: &RawSuite, bad: Bad<'_>) -> Result<(), MatrixError> {
    match s.interval_ms {
        Some(_) => Err(bad(
            Some("interval_ms"),
            "interval_ms belongs to soak suites".into(),
        )),
        None => Ok(()),
    }
}

/// A recovery suite: fixed-rate load (rates), at least two cycles (the
/// first has nothing to recover from), and a way to close.
fn recovery(s: &RawSuite, bad: Bad<'_>) -> Result<(), MatrixError> {
    if s.rates.is_empty() {
        return Err(bad(
            Some("kind"),
            "a recovery suite needs rates: each cycle runs fixed-rate load".into(),
        ));
    }
    if s.cycles < 2 {
        return Err(bad(
            Some("cycles"),
            format!(
                "cycles = {}: give at least 2, or there is nothing to recover from",
                s.cycles
            ),
        ));
    }
    if s.close.is_empty() {
        return Err(bad(
            Some("close"),
            "close = []: give \"graceful\", \"abrupt\" or both".into(),
        ));
    }
    Ok(())
}

/// A soak suite: fixed-rate load (rates), and an interval that fits at
/// least twice into the run, so that there is a drift to fit. The
/// interval.
fn soak(s: &RawSuite, d: &Defaults, bad: Bad<'_>) -> Result<u64, MatrixError> {
    if s.rates.is_empty() {
        return Err(bad(
            Some("kind"),
            "a soak suite needs rates: it runs fixed-rate load".into(),
        ));
    }
    let Some(interval) = s.interval_ms else {
        return Err(bad(
            Some("kind"),
            "a soak suite needs interval_ms: the length of one reported interval".into(),
        ));
    };
    let duration = s.duration_ms.unwrap_or(d.duration_ms);
    if interval == 0 || duration / interval < 2 {
        return Err(bad(
            Some("interval_ms"),
            format!(
                "interval_ms = {interval} with duration_ms = {duration}: give at least two whole intervals, or there is no drift to fit"
            ),
        ));
    }
    Ok(interval)
}

/// A memslope suite: protocols and a path to verify each connection with,
/// and at least three ascending tiers of connections (two points always
/// lie on a line: R² says nothing), within the file descriptors this
/// process may open.
fn memslope(s: &RawSuite, nofile: Option<u64>, bad: Bad<'_>) -> Result<Plan, MatrixError> {
    let http = !s.protocols.is_empty() || !s.paths.is_empty();
    if (http && (s.protocols.is_empty() || s.paths.is_empty())) || (!http && s.live.is_empty()) {
        return Err(bad(
            None,
            "a memslope suite needs protocols, paths (each connection is verified with one \
             request on the path) and/or live (\"tcp\", \"ws\", \"sse\"), and connections \
             (the tiers)"
                .into(),
        ));
    }
    rooted(&s.paths, bad)?;
    if s.connections.len() < 3 {
        return Err(bad(
            Some("connections"),
            format!(
                "{} tier(s) of connections: give at least 3, e.g. [0, 64, 128, 256], so the \
                 fit of memory against connections can show whether it is a line",
                s.connections.len()
            ),
        ));
    }
    if let Some(w) = s.connections.windows(2).find(|w| w[0] >= w[1]) {
        return Err(bad(
            Some("connections"),
            format!(
                "tiers must ascend: {} then {}; rig opens connections from one tier to the next",
                w[0], w[1]
            ),
        ));
    }
    tiers_fit(&s.connections, nofile, bad)?;
    Ok(Plan::Memslope {
        protocols: s.protocols.clone(),
        paths: s.paths.clone(),
        live: s.live.clone(),
        tiers: s.connections.clone(),
    })
}

/// A live suite: protocols, tiers of connections (each at least 1, within
/// the file descriptors this process may open), at least one cycle, and a
/// message interval the hold can fit.
fn live(s: &RawSuite, nofile: Option<u64>, bad: Bad<'_>) -> Result<Plan, MatrixError> {
    if s.live.is_empty() || s.connections.is_empty() {
        return Err(bad(
            None,
            "a live suite needs live (protocols: \"tcp\", \"ws\", \"sse\") and connections \
             (the tiers, e.g. [32, 128])"
                .into(),
        ));
    }
    if s.connections.contains(&0) {
        return Err(bad(
            Some("connections"),
            "a tier of 0 connections holds nothing; give tiers of at least 1".into(),
        ));
    }
    if s.cycles == 0 {
        return Err(bad(Some("cycles"), "cycles = 0: give at least 1".into()));
    }
    if s.message_ms == 0 {
        return Err(bad(
            Some("message_ms"),
            "message_ms = 0: give the ms between messages, e.g. 100".into(),
        ));
    }
    tiers_fit(&s.connections, nofile, bad)?;
    Ok(Plan::Live {
        protocols: s.live.clone(),
        tiers: s.connections.clone(),
        cycles: s.cycles,
        message_ms: s.message_ms,
    })
}

/// The largest tier of connections within the file descriptors this
/// process may open.
fn tiers_fit(tiers: &[usize], nofile: Option<u64>, bad: Bad<'_>) -> Result<(), MatrixError> {
    match tiers
        .iter()
        .max()
        .and_then(|&top| too_many_fds(top, nofile))
    {
        Some(e) => Err(bad(Some("connections"), e)),
        None => Ok(()),
    }
}

/// `connections` connections when they need more file descriptors than
/// the hard limit `nofile` leaves: the message.
fn too_many_fds(connections: usize, nofile: Option<u64>) -> Option<String> {
    let limit = nofile?;
    (connections as u64 + FD_HEADROOM > limit).then(|| {
        format!(
            "{connections} connections need more file descriptors than this process may open \
             (RLIMIT_NOFILE hard limit {limit}, {FD_HEADROOM} kept for rig); raise the limit \
             (ulimit -Hn) or use fewer connections"
        )
    })
}

/// Every path starts with `/`.
fn rooted(paths: &[String], bad: Bad<'_>) -> Result<(), MatrixError> {
    match paths.iter().find(|p| !p.starts_with('/')) {
        Some(p) => Err(bad(Some("paths"), format!("path `{p}` must start with /"))),
        None => Ok(()),
    }
}

/// An http, recovery or soak suite's requests: protocols, paths and
/// topologies given, topologies well formed, rates schedulable, paths
/// rooted. The loads are the rates as written.
fn requests(
    s: &RawSuite,
    nofile: Option<u64>,
    spans: &Spans<'_>,
    sec: Section,
    bad: Bad<'_>,
) -> Result<Requests<f64>, MatrixError> {
    if s.protocols.is_empty() || s.paths.is_empty() || s.topologies.is_empty() {
        return Err(bad(
            None,
            "an http suite needs protocols, paths and topologies".into(),
        ));
    }
    let topologies = topologies(s, nofile, bad)?;
    rates(s, spans, sec, bad)?;
    rooted(&s.paths, bad)?;
    Ok(Requests {
        protocols: s.protocols.clone(),
        paths: s.paths.clone(),
        loads: s.rates.clone(),
        topologies,
    })
}

/// An http suite's topologies: well formed, one stream per h1 connection,
/// and within the file descriptors this process may open.
fn topologies(
    s: &RawSuite,
    nofile: Option<u64>,
    bad: Bad<'_>,
) -> Result<Vec<Topology>, MatrixError> {
    let mut parsed = Vec::with_capacity(s.topologies.len());
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
        if let Some(e) = too_many_fds(topo.connections, nofile) {
            return Err(bad(Some("topologies"), format!("topology `{t}`: {e}")));
        }
        parsed.push(topo);
    }
    Ok(parsed)
}

/// An http suite's rates: present when given, positive, and schedulable.
fn rates(s: &RawSuite, spans: &Spans<'_>, sec: Section, bad: Bad<'_>) -> Result<(), MatrixError> {
    if s.rates.is_empty() && spans.key(sec, "rates").is_some() {
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
pub(super) enum Section {
    Defaults,
    /// The n-th `[[suite]]` (0-based).
    Suite(usize),
}

/// Positions in the matrix file, from the TOML parser's spans (so quoted
/// keys, `[ defaults ]`, inline tables and arrays of inline tables are found
/// too). The file is parsed for spans once, on the first question.
pub(super) struct Spans<'a> {
    text: &'a str,
    doc: std::cell::OnceCell<Option<toml::de::DeTable<'a>>>,
}

impl<'a> Spans<'a> {
    pub(super) fn new(text: &'a str) -> Spans<'a> {
        Spans {
            text,
            doc: std::cell::OnceCell::new(),
        }
    }

    fn doc(&self) -> Option<&toml::de::DeTable<'a>> {
        self.doc
            .get_or_init(|| {
                toml::de::DeTable::parse(self.text)
                    .ok()
                    .map(|d| d.into_inner())
            })
            .as_ref()
    }

    /// Line and column of `key` in `section`: the key's position, the
    /// section's when the key is not there or not given, 1:1 when the
    /// section is not written.
    pub(super) fn locate(&self, section: Section, key: Option<&str>) -> (usize, usize) {
        self.span_of(section, key)
            .map_or((1, 1), |at| line_col(self.text, at))
    }

    /// Where `key` is written in `section`, if it is.
    fn key(&self, section: Section, key: &str) -> Option<usize> {
        let (table, _) = self.section_table(section)?;
        table_key(table, key)
    }

    fn span_of(&self, section: Section, key: Option<&str>) -> Option<usize> {
        let (table, start) = self.section_table(section)?;
        Some(key.and_then(|k| table_key(table, k)).unwrap_or(start))
    }

    /// The table of `section` and where it starts (its header, or its
    /// inline table).
    fn section_table(&self, section: Section) -> Option<(&toml::de::DeTable<'a>, usize)> {
        let doc = self.doc()?;
        let find = |name: &str| {
            doc.iter()
                .find(|(k, _)| k.get_ref() == name)
                .map(|(_, v)| v)
        };
        let v = match section {
            Section::Defaults => find("defaults")?,
            Section::Suite(i) => find("suite")?.get_ref().as_array()?.get(i)?,
        };
        Some((v.get_ref().as_table()?, v.span().start))
    }
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
