//! The eBPF probe set as window [`Counters`]: start and stop are snapshots
//! of every counter taken once the target is still.

use std::time::Duration;

use anyhow::Result;

use super::Counters;
use crate::probe::{ProbeSet, Window, WindowEnd, WindowStart};

/// How long two identical snapshots must be apart for the target to count
/// as still, and how long to wait for that.
const SETTLE: Duration = Duration::from_millis(20);
const PATIENCE: Duration = Duration::from_millis(500);

/// When to wait for the target to be still at the end of the window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SettleEnd {
    /// Always (`rig attach --drive`).
    Always,
    /// Only when it was still at the start (the counted pass): a target
    /// with a background thread never settles, and waiting out the
    /// patience would only add its background events to the window.
    IfStartSettled,
}

/// A probe set counting one fixed-count window.
pub struct ProbeWindow<'a> {
    probes: ProbeSet,
    /// Whether the target is still alive (decides [`WindowEnd`]).
    alive: Box<dyn Fn() -> bool + 'a>,
    settle_end: SettleEnd,
    quiet_start: bool,
    start: Option<WindowStart>,
    /// Detach on a thread of its own once the window is read
    /// (`probe::detach_in_background`), not before `stop` returns.
    detach_later: bool,
}

/// A finished probe window.
pub struct ProbeReading {
    pub window: Window,
    /// The target was still at both ends.
    pub quiesced: bool,
}

impl<'a> ProbeWindow<'a> {
    pub fn new(
        probes: ProbeSet,
        settle_end: SettleEnd,
        alive: impl Fn() -> bool + 'a,
    ) -> ProbeWindow<'a> {
        ProbeWindow {
            probes,
            alive: Box::new(alive),
            settle_end,
            quiet_start: false,
            start: None,
            detach_later: false,
        }
    }

    /// Let `stop` return before the probes are detached (a session whose
    /// report needs none of them).
    pub fn detach_later(mut self) -> Self {
        self.detach_later = true;
        self
    }
}

impl Counters for ProbeWindow<'_> {
    type Reading = ProbeReading;

    fn start(&mut self) -> Result<()> {
        self.quiet_start = self.probes.quiesce(SETTLE, PATIENCE)?;
        self.start = Some(self.probes.start_window()?);
        Ok(())
    }

    /// Stops, and detaches the probes: symbolizing needs none.
    fn stop(self) -> Result<ProbeReading> {
        // A window cut by SIGINT/SIGTERM ends now: a target that never
        // settles (a background thread) would hold the exit for the whole
        // patience.
        let quiet_end = match self.settle_end {
            _ if crate::interrupt::requested() => false,
            SettleEnd::Always => self.probes.quiesce(SETTLE, PATIENCE)?,
            SettleEnd::IfStartSettled => {
                self.quiet_start && self.probes.quiesce(SETTLE, PATIENCE)?
            }
        };
        let end = if (self.alive)() {
            WindowEnd::Completed
        } else {
            WindowEnd::TargetExited
        };
        let start = self.start.expect("stop after start");
        let window = self.probes.end_window(start, end)?;
        if self.detach_later {
            crate::probe::detach_in_background(self.probes);
        }
        Ok(ProbeReading {
            window,
            quiesced: self.quiet_start && quiet_end,
        })
    }
}
