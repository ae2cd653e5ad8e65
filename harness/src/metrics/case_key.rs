//! The identity of a case across arms, targets and repeats.

use std::fmt;

use crate::scenario::{Case, CaseKind, LoadShape, MemSlopeConn, Proto};

/// What makes two cases the same case: everything but the target (so an
/// A/B arm, or a `rig gate --target` build under test, keys like the
/// baseline) and the repeat.
#[derive(Clone, Debug, PartialEq)]
pub struct CaseKey {
    pub suite: String,
    pub what: CaseKind,
}

impl CaseKey {
    pub fn of(c: &Case) -> CaseKey {
        CaseKey {
            suite: c.suite.clone(),
            what: c.what.clone(),
        }
    }

    /// The case's id without its target and repeat, as `rig ab` lists
    /// cases: `http/h1/plain/r2000/16x1/ka`, `memory/tls`.
    pub fn path_form(&self) -> String {
        match &self.what {
            CaseKind::Memory { .. } => {
                let listener = match self.what.listener_protocol() {
                    Some(Proto::H2Tls) => "tls",
                    _ => "plain",
                };
                format!("{}/{listener}", self.suite)
            }
            CaseKind::Recovery(r) => format!(
                "{}/{}/{}/r{}/{}x{}/{}/x{}",
                self.suite,
                r.protocol.name(),
                r.path.trim_start_matches('/'),
                r.rate,
                r.topology.connections,
                r.topology.streams,
                r.close.name(),
                r.cycles
            ),
            CaseKind::Soak(k) => format!(
                "{}/{}/{}/r{}/{}x{}/i{}ms",
                self.suite,
                k.protocol.name(),
                k.path.trim_start_matches('/'),
                k.rate,
                k.topology.connections,
                k.topology.streams,
                k.interval_ms
            ),
            CaseKind::Live(l) => format!(
                "{}/{}/c{}/x{}",
                self.suite,
                l.protocol.name(),
                l.connections,
                l.cycles
            ),
            CaseKind::MemSlope(m) => format!(
                "{}/{}/c{}",
                self.suite,
                m.conn.id_part(),
                m.tiers
                    .iter()
                    .map(usize::to_string)
                    .collect::<Vec<_>>()
                    .join("-")
            ),
            CaseKind::Http(h) => {
                let load = match h.load {
                    LoadShape::Open { rate } => format!("r{rate}"),
                    LoadShape::Closed => "closed".into(),
                };
                format!(
                    "{}/{}/{}/{load}/{}x{}/{}",
                    self.suite,
                    h.protocol.name(),
                    h.path.trim_start_matches('/'),
                    h.topology.connections,
                    h.topology.streams,
                    if h.keepalive { "ka" } else { "new" },
                )
            }
        }
    }
}

/// The key in counter names (`rig gate`): protocol, path, connections
/// (× streams), `close` without keep-alive: `h1 /calib c1`; a memory case
/// is `memory`, or `h2-tls` for its TLS listener.
impl fmt::Display for CaseKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.what {
            CaseKind::Memory { .. } => match self.what.listener_protocol() {
                Some(p) => write!(f, "{}", p.name()),
                None => write!(f, "memory"),
            },
            CaseKind::Recovery(r) => write!(
                f,
                "{} {} recovery c{}x{} {}",
                r.protocol.name(),
                r.path,
                r.topology.connections,
                r.topology.streams,
                r.close.name()
            ),
            CaseKind::Soak(k) => write!(
                f,
                "{} {} soak c{}x{}",
                k.protocol.name(),
                k.path,
                k.topology.connections,
                k.topology.streams
            ),
            CaseKind::Live(l) => write!(f, "{} live c{}", l.protocol.name(), l.connections),
            CaseKind::MemSlope(m) => {
                let top = m.tiers.last().copied().unwrap_or(0);
                match &m.conn {
                    MemSlopeConn::Http { protocol, path } => {
                        write!(f, "{} {path} memslope c{top}", protocol.name())
                    }
                    MemSlopeConn::Live(p) => write!(f, "{} memslope c{top}", p.name()),
                }
            }
            CaseKind::Http(h) => {
                write!(
                    f,
                    "{} {} c{}",
                    h.protocol.name(),
                    h.path,
                    h.topology.connections
                )?;
                if h.topology.streams > 1 {
                    write!(f, "x{}", h.topology.streams)?;
                }
                if !h.keepalive {
                    write!(f, " close")?;
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::Matrix;

    /// The keys equal what the case ids say once the target and the repeat
    /// are taken out, for every case of a matrix.
    #[test]
    fn keys_are_the_ids_without_target_and_repeat() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../config/demo.toml");
        let m = Matrix::load(std::path::Path::new(path)).unwrap();
        let suites = ["memory", "http", "http2"].map(String::from);
        let cases = m.expand(&suites, &["peer".into()], Some(2)).unwrap();
        assert!(cases.len() > 8, "{}", cases.len());
        for c in &cases {
            let mut parts: Vec<&str> = c.id.split('/').collect();
            parts.pop();
            parts.remove(1);
            assert_eq!(CaseKey::of(c).path_form(), parts.join("/"), "{}", c.id);
        }
        let keys: Vec<String> = cases.iter().map(|c| CaseKey::of(c).to_string()).collect();
        assert!(keys.contains(&"h1 /plain c16".to_string()), "{keys:?}");
        assert!(
            keys.contains(&"h1 /plain c16 close".to_string()),
            "{keys:?}"
        );
        assert!(keys.contains(&"h2c /plain c4x16".to_string()), "{keys:?}");
        assert!(keys.contains(&"memory".to_string()), "{keys:?}");
        assert!(keys.contains(&"h2-tls".to_string()), "{keys:?}");
    }
}
