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
