//! Windows: the exact difference of two snapshots, with what is needed to
//! name its addresses afterwards.

use std::time::{Duration, Instant};

use serde::Serialize;

use super::{AttachNote, CopyImpl, Family, ProbeError, ProbeSet, Snapshot};
use crate::target::maps::ProcMaps;
use crate::target::ProcessId;

/// Counters at the start of a window.
pub struct WindowStart {
    snapshot: Snapshot,
    at: Instant,
    maps: Option<ProcMaps>,
}

/// Why a window ended.
#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum WindowEnd {
    /// The duration elapsed or the driven load finished.
    Completed,
    /// The user interrupted rig (SIGINT/SIGTERM); counters up to then.
    Interrupted,
    /// The target exited during the window; counters up to its exit.
    TargetExited,
}

/// A finished window: raw counters keyed by address, plus the target's map
/// (taken while it was alive) to symbolize them.
pub struct Window {
    pub pid: u32,
    pub families: Vec<Family>,
    pub delta: Snapshot,
    pub elapsed: Duration,
    pub end: WindowEnd,
    pub maps: ProcMaps,
    pub copy_impls: Vec<CopyImpl>,
    pub notes: Vec<AttachNote>,
}

impl ProbeSet {
    /// Wait until the target stops moving: two snapshots `settle` apart are
    /// identical. A request's last syscall (the worker re-entering recv after
    /// sending the response) can land just after the client has its answer;
    /// snapshotting only once the counters are still puts it on the right
    /// side of the boundary. Gives up after `timeout` (a target with a
    /// background thread never settles) and says so.
    pub fn quiesce(&self, settle: Duration, timeout: Duration) -> Result<bool, ProbeError> {
        let t0 = Instant::now();
        let mut last = self.snapshot()?;
        loop {
            std::thread::sleep(settle);
            let now = self.snapshot()?;
            if now == last {
                return Ok(true);
            }
            if t0.elapsed() >= timeout {
                return Ok(false);
            }
            last = now;
        }
    }

    /// Snapshot every counter: the window starts now.
    pub fn start_window(&self) -> Result<WindowStart, ProbeError> {
        let maps = ProcMaps::read(self.pid()).ok();
        Ok(WindowStart {
            snapshot: self.snapshot()?,
            at: Instant::now(),
            maps,
        })
    }

    /// Snapshot again: the window is the exact difference.
    pub fn end_window(&self, start: WindowStart, end: WindowEnd) -> Result<Window, ProbeError> {
        let snap = self.snapshot()?;
        let elapsed = start.at.elapsed();
        // Prefer the map at the end (libraries loaded during the window), but
        // a process that died has none: use the one from the start.
        let maps = ProcMaps::read(self.pid())
            .ok()
            .filter(|m| !m.mappings.is_empty())
            .or(start.maps)
            .ok_or(ProbeError::NoSuchProcess { pid: self.pid() })?;
        Ok(Window {
            pid: self.pid(),
            families: self.families.clone(),
            delta: snap.delta(&start.snapshot),
            elapsed,
            end,
            maps,
            copy_impls: self.copy_impls.clone(),
            notes: self.notes.clone(),
        })
    }
}

/// Whether the process that was `id` is still alive (and not a new process
/// that reused its pid).
pub fn alive(id: &ProcessId) -> bool {
    ProcessId::of(id.pid).is_ok_and(|now| now == *id)
}
