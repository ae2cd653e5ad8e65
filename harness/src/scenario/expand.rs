//! The matrix file read, checked and expanded into cases in run order:
//! every round runs every case once, the targets' order reversed on every
//! other round.

use std::path::Path;

use super::raw::RawMatrix;
use super::*;

impl Matrix {
    /// Every soak suite runs `ms` long (`rig run --soak-duration`); each
    /// must still hold two whole intervals.
    pub fn set_soak_duration(&mut self, ms: u64) -> Result<(), String> {
        for s in &mut self.suites {
            let Plan::Soak { interval_ms, .. } = s.plan else {
                continue;
            };
            if ms / interval_ms < 2 {
                return Err(format!(
                    "suite `{}` has interval_ms = {interval_ms}: give at least two whole intervals ({} ms)",
                    s.name,
                    2 * interval_ms
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

    /// The matrix in `text` (read from `path`), each suite as its kind's
    /// [`Plan`]; a file that cannot work is refused at its file:line:col.
    pub fn parse(path: &str, text: &str) -> Result<Matrix, MatrixError> {
        let raw: RawMatrix = toml::from_str(text).map_err(|e| {
            let (line, col) = e.span().map(|s| line_col(text, s.start)).unwrap_or((0, 0));
            MatrixError::Parse {
                path: path.to_string(),
                line,
                col,
                message: e.message().to_string(),
            }
        })?;
        validate(path, text, raw)
    }

    /// The suites named (all when `names` is empty), in matrix order.
    fn chosen<'a>(&'a self, names: &'a [String]) -> impl Iterator<Item = &'a Suite> + 'a {
        self.suites
            .iter()
            .filter(|s| names.is_empty() || names.contains(&s.name))
    }

    /// Expand `suites` (all when empty) for `targets` into run order.
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
        if total == 0 {
            return Ok(Vec::new());
        }
        // Each suite's cases for one target and round, made once: with a
        // target, no more than `total`.
        let chosen: Vec<(&Suite, Vec<(String, CaseKind)>)> =
            self.chosen(suites).map(|s| (s, s.plan.cases())).collect();
        let mut cases = Vec::with_capacity(total as usize);
        for round in 1..=repeats {
            // A B, then B A: implementation order reversed every round.
            let order: Vec<usize> = if round % 2 == 1 {
                (0..targets.len()).collect()
            } else {
                (0..targets.len()).rev().collect()
            };
            for (s, each) in &chosen {
                let warmup_ms = s.warmup_ms.unwrap_or(d.warmup_ms);
                let duration_ms = s.duration_ms.unwrap_or(d.duration_ms);
                let case_timeout_ms =
                    s.case_timeout_ms.or(d.case_timeout_ms).unwrap_or_else(|| {
                        default_case_timeout_ms(warmup_ms, duration_ms, s.plan.cycles())
                    });
                for (tail, what) in each {
                    for &t in &order {
                        cases.push(Case {
                            id: format!("{}/{}/{tail}/#{round}", s.name, targets[t]),
                            suite: s.name.clone(),
                            what: what.clone(),
                            target: t,
                            target_name: targets[t].clone(),
                            repeat: round,
                            warmup_ms,
                            duration_ms,
                            counted_requests: d.counted_requests,
                            settle_ms: d.settle_ms,
                            request_timeout_ms: s
                                .request_timeout_ms
                                .unwrap_or(d.request_timeout_ms),
                            case_timeout_ms,
                        });
                    }
                }
            }
        }
        Ok(cases)
    }
}

impl Plan {
    /// Cycles per case, each of which the default case deadline allows for.
    fn cycles(&self) -> u32 {
        match self {
            Plan::Recovery { cycles, .. } | Plan::Live { cycles, .. } => *cycles,
            Plan::Memory { .. } | Plan::Http { .. } | Plan::Memslope { .. } | Plan::Soak { .. } => {
                1
            }
        }
    }

    /// The cases of the plan for one target and round, in run order: the
    /// part of each id between target and round (`h1/plain/r1000/16x1/ka`)
    /// and what the case measures.
    fn cases(&self) -> Vec<(String, CaseKind)> {
        let mut out = Vec::new();
        match self {
            Plan::Memory { listeners } => {
                for &listener in listeners {
                    out.push((listener.name().into(), CaseKind::Memory { listener }));
                }
            }
            Plan::Memslope {
                protocols,
                paths,
                live,
                tiers,
            } => {
                let http = protocols.iter().flat_map(|&protocol| {
                    paths.iter().map(move |path| MemSlopeConn::Http {
                        protocol,
                        path: path.clone(),
                    })
                });
                let live = live.iter().map(|&p| MemSlopeConn::Live(p));
                let at = tiers.iter().map(usize::to_string).collect::<Vec<_>>();
                for conn in http.chain(live) {
                    let id = format!("{}/c{}", conn.id_part(), at.join("-"));
                    let tiers = tiers.clone();
                    out.push((id, CaseKind::MemSlope(MemSlopeCase { conn, tiers })));
                }
            }
            &Plan::Live {
                ref protocols,
                ref tiers,
                cycles,
                message_ms,
            } => {
                for &protocol in protocols {
                    for &connections in tiers {
                        let id = format!("{}/c{connections}/x{cycles}", protocol.name());
                        let l = LiveCase {
                            protocol,
                            connections,
                            cycles,
                            message_ms,
                        };
                        out.push((id, CaseKind::Live(l)));
                    }
                }
            }
            &Plan::Recovery {
                ref requests,
                cycles,
                ref close,
            } => requests.each(|r| {
                for &close in close {
                    let id = format!("{}/{}/x{cycles}", r.id(), close.name());
                    let c = RecoveryCase {
                        protocol: r.protocol,
                        path: r.path.into(),
                        rate: r.load,
                        topology: r.topology,
                        cycles,
                        close,
                    };
                    out.push((id, CaseKind::Recovery(c)));
                }
            }),
            &Plan::Soak {
                ref requests,
                interval_ms,
            } => requests.each(|r| {
                let id = format!("{}/i{interval_ms}ms", r.id());
                let k = SoakCase {
                    protocol: r.protocol,
                    path: r.path.into(),
                    rate: r.load,
                    topology: r.topology,
                    interval_ms,
                };
                out.push((id, CaseKind::Soak(k)));
            }),
            Plan::Http {
                requests,
                keepalive,
            } => requests.each(|r| {
                // h2 always keeps its connections alive.
                let keepalives: &[bool] = match r.protocol {
                    Proto::H1 => keepalive,
                    _ => &[true],
                };
                for &ka in keepalives {
                    let id = format!("{}/{}", r.id(), if ka { "ka" } else { "new" });
                    let h = HttpCase {
                        protocol: r.protocol,
                        path: r.path.into(),
                        load: r.load,
                        topology: r.topology,
                        keepalive: ka,
                    };
                    out.push((id, CaseKind::Http(h)));
                }
            }),
        }
        out
    }
}

impl<L: Copy> Requests<L> {
    /// Every protocol × path × load × topology, in that order.
    fn each(&self, mut f: impl FnMut(Request<'_, L>)) {
        for &protocol in &self.protocols {
            for path in &self.paths {
                for &load in &self.loads {
                    for &topology in &self.topologies {
                        f(Request {
                            protocol,
                            path,
                            load,
                            topology,
                        });
                    }
                }
            }
        }
    }

    /// The axes in the order they multiply.
    fn axes(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("protocols", self.protocols.len() as u64),
            ("paths", self.paths.len() as u64),
            ("rates", self.loads.len() as u64),
            ("topologies", self.topologies.len() as u64),
        ]
    }
}

/// One protocol × path × load × topology of [`Requests`].
struct Request<'a, L> {
    protocol: Proto,
    path: &'a str,
    load: L,
    topology: Topology,
}

impl<L: LoadId> Request<'_, L> {
    /// `h1/plain/r1000/16x1`: the id's part these make.
    fn id(&self) -> String {
        format!(
            "{}/{}/{}/{}x{}",
            self.protocol.name(),
            self.path.trim_start_matches('/'),
            self.load.id(),
            self.topology.connections,
            self.topology.streams
        )
    }
}

/// How a load is written in a case id.
trait LoadId {
    fn id(&self) -> String;
}

/// A fixed rate: `r1000`.
impl LoadId for f64 {
    fn id(&self) -> String {
        format!("r{self}")
    }
}

impl LoadId for LoadShape {
    fn id(&self) -> String {
        match self {
            LoadShape::Open { rate } => rate.id(),
            LoadShape::Closed => "closed".into(),
        }
    }
}

/// The most cases one run expands to. Each case launches at least one
/// server and runs at least one pass: at a second a case, 100,000 cases
/// are more than a day of measuring, and their ids and results already
/// take hundreds of MB.
pub const MAX_CASES: u64 = 100_000;

/// The values of `axes` multiplied (saturating).
fn product(axes: &[(&str, u64)]) -> u64 {
    axes.iter().fold(1u64, |p, (_, v)| p.saturating_mul(*v))
}

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
    fn of(s: &Suite) -> SuiteSize {
        let n = |v: usize| v as u64;
        let axes = match &s.plan {
            Plan::Memory { listeners } => vec![("listeners", n(listeners.len()))],
            Plan::Memslope {
                protocols,
                paths,
                live,
                ..
            } => vec![(
                "protocols × paths + live",
                n(protocols.len())
                    .saturating_mul(n(paths.len()))
                    .saturating_add(n(live.len())),
            )],
            Plan::Live {
                protocols, tiers, ..
            } => vec![
                ("live", n(protocols.len())),
                ("connections", n(tiers.len())),
            ],
            Plan::Recovery {
                requests, close, ..
            } => {
                let mut axes = requests.axes();
                axes.push(("close", n(close.len())));
                axes
            }
            Plan::Soak { requests, .. } => requests.axes(),
            Plan::Http {
                requests,
                keepalive,
            } => {
                let mut axes = requests.axes();
                if requests.protocols.contains(&Proto::H1) && keepalive.len() != 1 {
                    axes.insert(1, ("keepalive", n(keepalive.len())));
                }
                axes
            }
        };
        let cases = match &s.plan {
            // h1 runs each keep-alive setting; h2 always keeps alive.
            Plan::Http {
                requests,
                keepalive,
            } => {
                let h1 = n(requests
                    .protocols
                    .iter()
                    .filter(|&&p| p == Proto::H1)
                    .count());
                let runs = h1
                    .saturating_mul(n(keepalive.len()))
                    .saturating_add(n(requests.protocols.len()) - h1);
                runs.saturating_mul(product(&requests.axes()[1..]))
            }
            _ => product(&axes),
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
        self.chosen(suites).map(SuiteSize::of).collect()
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
