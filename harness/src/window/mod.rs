//! The fixed-count window, written once: warm up outside the count, open
//! the counters, warm up under them, start, exactly N requests, stop.
//!
//! In: load connected before the window ([`FixedLoad`]), a [`WarmUp`]
//! policy, a request count and a way to open [`Counters`]. Out: the load's
//! report of the N counted requests and the counters' reading.
//!
//! Every fixed-count measurement of rig goes through [`drive`]: the eBPF
//! probe set of `rig attach --drive` and of the counted pass of `rig run`,
//! `rig ab` and `rig gate` ([`ebpf::ProbeWindow`]), and the instruction
//! windows of `rig instructions` and `rig gate` ([`instructions`]: the perf
//! counter and callgrind). A new kind of counter implements [`Counters`];
//! a new load protocol implements [`FixedLoad`].
//!
//! Why this shape: connection set-up (and its `accept`), lazy binding and
//! first touch are one-time costs that would be billed to the first
//! requests; the first hits of a uprobe fault in BPF state. Both happen
//! before `start`, and the request count is the denominator, so the window
//! holds exactly N requests and nothing else.

pub mod ebpf;
pub mod instructions;
pub mod peers;

use anyhow::Result;

use crate::load::{Client, Conn, LoadReport, LoadResult, Mode};

/// Something that counts over a window: started just before the first
/// counted request, stopped right after the last.
pub trait Counters {
    /// What the counters hold once stopped.
    type Reading;
    fn start(&mut self) -> Result<()>;
    fn stop(self) -> Result<Self::Reading>;
}

/// Load that sends exactly `requests` requests on connections opened
/// before the window, and reports on them.
pub trait FixedLoad {
    type Report;
    fn send(&mut self, requests: u64) -> Self::Report;
}

impl FixedLoad for Client {
    type Report = LoadReport;
    fn send(&mut self, requests: u64) -> LoadReport {
        self.run(&Mode::FixedCount { requests })
    }
}

impl FixedLoad for Vec<Conn> {
    type Report = LoadResult;
    fn send(&mut self, requests: u64) -> LoadResult {
        crate::load::fixed_count(self, requests)
    }
}

/// Uncounted requests around the opening of the counters. The one place
/// warm-up sizes are decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WarmUp {
    /// Before the counters exist: accept, lazy binding, first touch.
    pub before: u64,
    /// After they are opened, before `start`: the first hits of a uprobe
    /// fault in BPF state (hash map entries, stack ids). 0 when opening
    /// the counters does not disturb the target.
    pub under: u64,
}

impl WarmUp {
    /// `before` of the instruction windows of `rig gate`.
    pub const INSTRUCTIONS_DEFAULT: u64 = 200;
    /// Default `rig instructions --warmup`: a quick look at one endpoint.
    pub const INSTRUCTIONS_COMMAND: u64 = 50;
    /// Default `rig attach --drive … --warmup`, and `rig demo`'s.
    pub const ATTACH_DEFAULT: u64 = 200;

    /// `rig attach --drive`: the user's `--warmup` before the probes, and at
    /// most 100 of it under them.
    pub fn driven(before: u64) -> WarmUp {
        WarmUp {
            before,
            under: before.min(100),
        }
    }

    /// The counted pass (`rig run`, `rig ab`, `rig gate`): every slot
    /// (connection × stream) several times before the probes, every slot at
    /// least once under them.
    pub fn counted(slots: u64) -> WarmUp {
        WarmUp {
            before: 200.max(4 * slots),
            under: 100.max(slots),
        }
    }

    /// Instruction windows: the counters are created disabled, so nothing
    /// is warmed under them.
    pub fn instructions(before: u64) -> WarmUp {
        WarmUp { before, under: 0 }
    }
}

/// Which warm-up a [`drive`] check is looking at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    Before,
    Under,
}

/// What one window gave.
pub struct Driven<R, C> {
    /// The load's report of the counted requests.
    pub report: R,
    pub reading: C,
}

/// Drive one fixed-count window: `warm.before` requests, `open` the
/// counters, `warm.under` requests, start, exactly `requests` requests,
/// stop. `check` sees each warm-up's report and refuses (with `Err`) a
/// target that does not answer; a window is never measured on one.
pub fn drive<L, C>(
    load: &mut L,
    warm: WarmUp,
    requests: u64,
    check: impl Fn(Phase, &L::Report) -> Result<()>,
    open: impl FnOnce() -> Result<C>,
) -> Result<Driven<L::Report, C::Reading>>
where
    L: FixedLoad,
    C: Counters,
{
    if warm.before > 0 {
        let r = load.send(warm.before);
        check(Phase::Before, &r)?;
    }
    let mut counters = open()?;
    if warm.under > 0 {
        let r = load.send(warm.under);
        check(Phase::Under, &r)?;
    }
    counters.start()?;
    let report = load.send(requests);
    let reading = counters.stop()?;
    Ok(Driven { report, reading })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::rc::Rc;

    /// Records every step in order: requests sent and counter calls.
    #[derive(Clone, Default)]
    struct Log(Rc<RefCell<Vec<String>>>);

    impl Log {
        fn push(&self, s: String) {
            self.0.borrow_mut().push(s);
        }
        fn steps(&self) -> Vec<String> {
            self.0.borrow().clone()
        }
    }

    impl FixedLoad for Log {
        type Report = u64;
        fn send(&mut self, requests: u64) -> u64 {
            self.push(format!("send {requests}"));
            requests
        }
    }

    struct FakeCounters(Log);

    impl Counters for FakeCounters {
        type Reading = &'static str;
        fn start(&mut self) -> Result<()> {
            self.0.push("start".into());
            Ok(())
        }
        fn stop(self) -> Result<&'static str> {
            self.0.push("stop".into());
            Ok("reading")
        }
    }

    #[test]
    fn counts_exactly_the_requested_requests_between_start_and_stop() {
        let log = Log::default();
        let mut load = log.clone();
        let opened = log.clone();
        let d = drive(
            &mut load,
            WarmUp::counted(16),
            1000,
            |_, _| Ok(()),
            || {
                opened.push("open".into());
                Ok(FakeCounters(opened.clone()))
            },
        )
        .unwrap();
        assert_eq!(d.report, 1000);
        assert_eq!(d.reading, "reading");
        assert_eq!(
            log.steps(),
            ["send 200", "open", "send 100", "start", "send 1000", "stop"]
        );
    }

    #[test]
    fn a_failed_warm_up_stops_before_the_counters_open() {
        let log = Log::default();
        let mut load = log.clone();
        let opened = log.clone();
        let r = drive(
            &mut load,
            WarmUp::instructions(50),
            10,
            |phase, _| match phase {
                Phase::Before => anyhow::bail!("target does not answer"),
                Phase::Under => Ok(()),
            },
            || {
                opened.push("open".into());
                Ok(FakeCounters(opened.clone()))
            },
        );
        assert_eq!(r.err().unwrap().to_string(), "target does not answer");
        assert_eq!(log.steps(), ["send 50"]);
    }

    #[test]
    fn warm_up_sizes() {
        assert_eq!(
            WarmUp::counted(1),
            WarmUp {
                before: 200,
                under: 100
            }
        );
        assert_eq!(
            WarmUp::counted(256),
            WarmUp {
                before: 1024,
                under: 256
            }
        );
        assert_eq!(
            WarmUp::driven(500),
            WarmUp {
                before: 500,
                under: 100
            }
        );
        assert_eq!(
            WarmUp::driven(50),
            WarmUp {
                before: 50,
                under: 50
            }
        );
        assert_eq!(WarmUp::instructions(7).under, 0);
    }
}
