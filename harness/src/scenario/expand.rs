//! The matrix file read, checked and expanded into cases in run order:
//! every round runs every case once, the targets' order reversed on every
//! other round.

use std::path::Path;

use super::*;

impl Matrix {
    /// Every soak suite runs `ms` long (`rig run --soak-duration`); each
    /// must still hold two whole intervals.
    pub fn set_soak_duration(&mut self, ms: u64) -> Result<(), String> {
        for s in self.suites.iter_mut().filter(|s| s.kind == SuiteKind::Soak) {
            let interval = s.interval_ms.expect("validated");
            if ms / interval < 2 {
                return Err(format!(
                    "suite `{}` has interval_ms = {interval}: give at least two whole intervals ({} ms)",
                    s.name,
                    2 * interval
                ));
            }
            s.duration_ms = Some(ms);
        }
        Ok(())
    }

    /// `rig run --request-timeout` and `--case-timeout`: every suite's
    /// values, whatever the matrix says.
    pub fn set_timeouts(&mut self, request_ms: Option<u64>, case_ms: Option<u64>) {
        if let Some(r) = request_ms {
            self.defaults.request_timeout_ms = r;
        }
        if let Some(c) = case_ms {
            self.defaults.case_timeout_ms = Some(c);
        }
        for s in &mut self.suites {
            s.request_timeout_ms = request_ms.or(s.request_timeout_ms);
            s.case_timeout_ms = case_ms.or(s.case_timeout_ms);
        }
    }

    pub fn load(path: &Path) -> Result<Matrix, MatrixError> {
        let p = path.display().to_string();
        let text = crate::fsutil::read_config(path).map_err(|source| MatrixError::Read {
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
        // Counted before anything is allocated: a matrix whose axes
        // multiply to millions of cases is refused, not run out of memory.
        let total = self.case_count(suites, targets.len(), repeats)?;
        let mut cases = Vec::with_capacity(total as usize);
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
                let request_timeout_ms = s.request_timeout_ms.unwrap_or(d.request_timeout_ms);
                let cycles = match s.kind {
                    SuiteKind::Recovery | SuiteKind::Live => s.cycles,
                    _ => 1,
                };
                let case_timeout_ms = s
                    .case_timeout_ms
                    .or(d.case_timeout_ms)
                    .unwrap_or_else(|| default_case_timeout_ms(warmup_ms, duration_ms, cycles));
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
                    request_timeout_ms,
                    case_timeout_ms,
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
                    SuiteKind::Memslope => {
                        let http = s.protocols.iter().flat_map(|&protocol| {
                            s.paths.iter().map(move |path| MemSlopeConn::Http {
                                protocol,
                                path: path.clone(),
                            })
                        });
                        let live = s.live.iter().map(|&p| MemSlopeConn::Live(p));
                        for conn in http.chain(live) {
                            for &t in &order {
                                let m = MemSlopeCase {
                                    conn: conn.clone(),
                                    tiers: s.connections.clone(),
                                };
                                let mut c = base(t, CaseKind::MemSlope(m));
                                c.id = format!(
                                    "{}/{}/{}/c{}/#{round}",
                                    s.name,
                                    targets[t],
                                    conn.id_part(),
                                    s.connections
                                        .iter()
                                        .map(usize::to_string)
                                        .collect::<Vec<_>>()
                                        .join("-"),
                                );
                                cases.push(c);
                            }
                        }
                    }
                    SuiteKind::Live => {
                        for &protocol in &s.live {
                            for &connections in &s.connections {
                                for &t in &order {
                                    let l = LiveCase {
                                        protocol,
                                        connections,
                                        cycles: s.cycles,
                                        message_ms: s.message_ms,
                                    };
                                    let mut c = base(t, CaseKind::Live(l));
                                    c.id = format!(
                                        "{}/{}/{}/c{connections}/x{}/#{round}",
                                        s.name,
                                        targets[t],
                                        protocol.name(),
                                        s.cycles,
                                    );
                                    cases.push(c);
                                }
                            }
                        }
                    }
                    SuiteKind::Recovery => {
                        for &protocol in &s.protocols {
                            for path in &s.paths {
                                for &rate in &s.rates {
                                    for topo in &s.topologies {
                                        let topology = Topology::parse(topo).expect("validated");
                                        for &close in &s.close {
                                            for &t in &order {
                                                let r = RecoveryCase {
                                                    protocol,
                                                    path: path.clone(),
                                                    rate,
                                                    topology,
                                                    cycles: s.cycles,
                                                    close,
                                                };
                                                let mut c = base(t, CaseKind::Recovery(r));
                                                c.id = format!(
                                                    "{}/{}/{}/{}/r{rate}/{}x{}/{}/x{}/#{round}",
                                                    s.name,
                                                    targets[t],
                                                    protocol.name(),
                                                    path.trim_start_matches('/'),
                                                    topology.connections,
                                                    topology.streams,
                                                    close.name(),
                                                    s.cycles,
                                                );
                                                cases.push(c);
                                            }
                                        }
                                    }
                                }
                            }
                        }
                    }
                    SuiteKind::Soak => {
                        let interval_ms = s.interval_ms.expect("validated");
                        for &protocol in &s.protocols {
                            for path in &s.paths {
                                for &rate in &s.rates {
                                    for topo in &s.topologies {
                                        let topology = Topology::parse(topo).expect("validated");
                                        for &t in &order {
                                            let k = SoakCase {
                                                protocol,
                                                path: path.clone(),
                                                rate,
                                                topology,
                                                interval_ms,
                                            };
                                            let mut c = base(t, CaseKind::Soak(k));
                                            c.id = format!(
                                                "{}/{}/{}/{}/r{rate}/{}x{}/i{interval_ms}ms/#{round}",
                                                s.name,
                                                targets[t],
                                                protocol.name(),
                                                path.trim_start_matches('/'),
                                                topology.connections,
                                                topology.streams,
                                            );
                                            cases.push(c);
                                        }
                                    }
                                }
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

/// The most cases one run expands to. Each case launches at least one
/// server and runs at least one pass: at a second a case, 100,000 cases
/// are more than a day of measuring, and their ids and results already
/// take hundreds of MB.
pub const MAX_CASES: u64 = 100_000;

/// One suite's axes and the cases they make for one target and round.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SuiteSize {
    pub suite: String,
    /// (axis, values), in the order the matrix multiplies them.
    pub axes: Vec<(&'static str, u64)>,
    /// Cases of the suite for one target and one round (saturating).
    pub cases: u64,
}

impl SuiteSize {
    fn of(s: &SuiteSpec) -> SuiteSize {
        let n = |v: usize| v as u64;
        let h1 = u64::from(s.protocols.contains(&Proto::H1));
        let other = n(s.protocols.len()) - h1;
        let ka = n(s.keepalive.len());
        let axes: Vec<(&'static str, u64)> = match s.kind {
            SuiteKind::Memory => vec![("listeners", n(s.listeners.len()))],
            SuiteKind::Memslope => vec![(
                "protocols × paths + live",
                n(s.protocols.len())
                    .saturating_mul(n(s.paths.len()))
                    .saturating_add(n(s.live.len())),
            )],
            SuiteKind::Live => vec![
                ("live", n(s.live.len())),
                ("connections", n(s.connections.len())),
            ],
            SuiteKind::Recovery => vec![
                ("protocols", n(s.protocols.len())),
                ("paths", n(s.paths.len())),
                ("rates", n(s.rates.len())),
                ("topologies", n(s.topologies.len())),
                ("close", n(s.close.len())),
            ],
            SuiteKind::Soak => vec![
                ("protocols", n(s.protocols.len())),
                ("paths", n(s.paths.len())),
                ("rates", n(s.rates.len())),
                ("topologies", n(s.topologies.len())),
            ],
            SuiteKind::Http => {
                // h1 runs each keep-alive setting; h2 always keeps alive.
                let mut a = vec![("protocols", n(s.protocols.len()))];
                if h1 == 1 && ka != 1 {
                    a.push(("keepalive", ka));
                }
                a.push(("paths", n(s.paths.len())));
                a.push(("rates", n(s.rates.len()).max(1)));
                a.push(("topologies", n(s.topologies.len())));
                a
            }
        };
        let cases = match s.kind {
            SuiteKind::Http => axes
                .iter()
                .filter(|(a, _)| !matches!(*a, "protocols" | "keepalive"))
                .fold(h1.saturating_mul(ka).saturating_add(other), |p, (_, v)| {
                    p.saturating_mul(*v)
                }),
            _ => axes.iter().fold(1u64, |p, (_, v)| p.saturating_mul(*v)),
        };
        SuiteSize {
            suite: s.name.clone(),
            axes,
            cases,
        }
    }
}

impl Matrix {
    /// The cases of `suites` (all when empty) for one target and round,
    /// suite by suite, counted without expanding anything.
    pub fn sizes(&self, suites: &[String]) -> Vec<SuiteSize> {
        self.suites
            .iter()
            .filter(|s| suites.is_empty() || suites.contains(&s.name))
            .map(SuiteSize::of)
            .collect()
    }

    /// How many cases [`Matrix::expand`] makes for `targets` targets and
    /// `repeats` rounds; more than [`MAX_CASES`] is refused, naming the
    /// count, the axes of the largest suite and the axis to cut.
    pub fn case_count(
        &self,
        suites: &[String],
        targets: usize,
        repeats: u32,
    ) -> Result<u64, MatrixError> {
        let sizes = self.sizes(suites);
        let per_round = sizes.iter().fold(0u64, |t, s| t.saturating_add(s.cases));
        let total = per_round
            .saturating_mul(targets as u64)
            .saturating_mul(u64::from(repeats));
        if total <= MAX_CASES {
            return Ok(total);
        }
        let big = sizes
            .iter()
            .max_by_key(|s| s.cases)
            .expect("a total above the bound has a suite");
        let axes = big
            .axes
            .iter()
            .map(|(a, v)| format!("{v} {a}"))
            .collect::<Vec<_>>()
            .join(" × ");
        // The largest axis (the first of equals).
        let (cut, values) = big
            .axes
            .iter()
            .rev()
            .max_by_key(|(_, v)| *v)
            .copied()
            .expect("a suite has axes");
        let shown = |v: u64| match v {
            u64::MAX => "more than 18446744073709551615".to_string(),
            v => v.to_string(),
        };
        let mut whole = Vec::new();
        if sizes.len() > 1 {
            whole.push(format!("{} suites", sizes.len()));
        }
        if targets > 1 {
            whole.push(format!("{targets} targets"));
        }
        if repeats > 1 {
            whole.push(format!("{repeats} repeats"));
        }
        let whole = match whole.is_empty() {
            true => String::new(),
            false => format!(" (with {})", whole.join(", ")),
        };
        Err(MatrixError::TooManyCases(format!(
            "the matrix expands to {} cases{whole}, more than the {MAX_CASES} one run takes; \
             suite `{}` makes {} cases per target and round ({axes}): cut `{cut}` ({values} \
             values) first, or split the suite",
            shown(total),
            big.suite,
            shown(big.cases),
        )))
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
