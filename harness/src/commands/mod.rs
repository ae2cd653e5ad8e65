//! The small commands: what `rig attach`, `rig demo`, `rig instructions`,
//! `rig probe-cost`, `rig check-config`, `rig funcdiff`, `rig probes` and `rig report` do once their
//! flags are settings. (`rig run`, `rig ab`, `rig gate` and `rig flame` have
//! modules of their own, each with its `command`.)
//!
//! In: settings built by `cli`. Out: the command's output printed and
//! written, and its exit code; errors come back for `cli` to map.

pub mod attach;
pub mod check_config;
pub mod funcdiff;
pub mod instructions;
pub mod probe_cost;
pub mod probes;

use std::path::Path;

use anyhow::Result;

use crate::exit;

/// `rig report`: report.html of an output directory, written again.
pub fn report(dir: &Path) -> Result<i32> {
    let p = crate::html::write(dir)?;
    crate::outln!("report: {}", p.display());
    Ok(exit::OK)
}
