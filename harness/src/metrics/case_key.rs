//! The identity of a case across arms, targets and repeats.

use std::fmt;

use crate::scenario::{Case, LoadShape, Proto, SuiteKind, Topology};

/// What makes two cases the same case: everything but the target (so an
/// A/B arm, or a `rig gate --target` build under test, keys like the
/// baseline) and the repeat.
#[derive(Clone, Debug, PartialEq)]
pub struct CaseKey {
    pub suite: String,
    pub kind: SuiteKind,
    pub protocol: Option<Proto>,
    pub path: Option<String>,
    pub load: Option<LoadShape>,
    pub topology: Option<Topology>,
    pub keepalive: bool,
}

impl CaseKey {
    pub fn of(c: &Case) -> CaseKey {
        CaseKey {
            suite: c.suite.clone(),
            kind: c.kind,
            protocol: c.protocol,
            path: c.path.clone(),
            load: c.load,
            topology: c.topology,
            keepalive: c.keepalive,
        }
    }

    /// The case's id without its target and repeat, as `rig ab` lists
    /// cases: `http/h1/plain/r2000/16x1/ka`, `memory/tls`.
    pub fn path_form(&self) -> String {
        match self.kind {
            SuiteKind::Memory => {
                let listener = match self.protocol {
                    Some(Proto::H2Tls) => "tls",
                    _ => "plain",
                };
                format!("{}/{listener}", self.suite)
            }
            SuiteKind::Http => {
                let load = match self.load {
                    Some(LoadShape::Open { rate }) => format!("r{rate}"),
                    _ => "closed".into(),
                };
                let topo = self
                    .topology
                    .map(|t| format!("{}x{}", t.connections, t.streams))
                    .unwrap_or_default();
                format!(
                    "{}/{}/{}/{load}/{topo}/{}",
                    self.suite,
                    self.protocol.map_or("-", Proto::name),
                    self.path.as_deref().unwrap_or("-").trim_start_matches('/'),
                    if self.keepalive { "ka" } else { "new" },
                )
            }
        }
    }
}

/// The key in counter names (`rig gate`): protocol, path, connections
/// (× streams), `close` without keep-alive: `h1 /calib c1`.
impl fmt::Display for CaseKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.protocol {
            Some(p) => write!(f, "{}", p.name())?,
            None => write!(f, "{}", format!("{:?}", self.kind).to_lowercase())?,
        }
        if let Some(p) = &self.path {
            write!(f, " {p}")?;
        }
        if let Some(t) = self.topology {
            write!(f, " c{}", t.connections)?;
            if t.streams > 1 {
                write!(f, "x{}", t.streams)?;
            }
        }
        if !self.keepalive {
            write!(f, " close")?;
        }
        Ok(())
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
