//! `rig instructions`: instructions per request of a server rig starts,
//! counted by perf (a PMU) or callgrind, over one fixed-count window.

use anyhow::Result;

use crate::exit;
use crate::launch::spec::TargetSpec;
use crate::probe::instructions::{self as instr, Choice};

#[derive(Clone, Debug)]
pub struct InstructionsSettings {
    pub spec: TargetSpec,
    pub path: String,
    pub requests: u64,
    pub warmup: u64,
    /// Functions shown, by self Ir per request (callgrind only).
    pub top: usize,
    pub choice: Choice,
}

pub fn command(s: &InstructionsSettings) -> Result<i32> {
    // The host is asked only now: bad flags were refused first (exit 2).
    let (backend, why) = instr::select(s.choice, &crate::host::detect_pmu())?;
    crate::outln!("instructions counted by {why}");
    let w = crate::window::instructions::measure(backend, &s.spec, &s.path, s.requests, s.warmup)?;
    crate::out!("{}", crate::probe::callgrind::render(&w, s.top));
    Ok(exit::OK)
}
