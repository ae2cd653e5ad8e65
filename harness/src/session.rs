//! An attribution session: attach → window → detach → symbolize → report.
//!
//! In: validated `AttachSettings`. Out: an `Attribution`. The window is either
//! a duration of load the user drives, or a fixed-count window of load rig
//! drives itself (warm-up outside the window, then exactly N requests).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::load::{self, H1Target, LoadResult};
use crate::probe::{alive, Family, ProbeSet, Scope, WindowEnd};
use crate::report::Attribution;
use crate::symbolize::Symbolizer;
use crate::target::ProcessId;

/// Load rig drives itself for a fixed-count window.
#[derive(Clone, Debug)]
pub struct Drive {
    pub target: H1Target,
    pub connections: usize,
    pub warmup: u64,
    pub requests: u64,
}

#[derive(Clone, Debug)]
pub struct AttachSettings {
    pub pid: u32,
    pub families: Vec<Family>,
    /// Window length when the user drives the load.
    pub duration: Duration,
    /// Requests the user's load tool reported for the window (`--per`).
    pub per: Option<u64>,
    pub drive: Option<Drive>,
    /// Follow the process tree: `Some(true)` always, `Some(false)` never,
    /// `None` when the pid has children.
    pub tree: Option<bool>,
}

/// Run one session. `stop` ends a duration window early (Ctrl-C).
pub fn run_attach(s: &AttachSettings, stop: &AtomicBool) -> Result<Attribution> {
    let id = ProcessId::of(s.pid).map_err(|_| crate::probe::not_measurable(s.pid, None))?;
    crate::probe::check_target(s.pid)?;

    // The load must reach the process being probed (lesson 1): the port's
    // listener belongs to the pid or one of its descendants, or we refuse.
    if let Some(d) = &s.drive {
        use crate::target::port::{check_holder, HolderCheck};
        let port = d.target.addr.port();
        match check_holder(port, s.pid) {
            HolderCheck::Proven(_) => {}
            HolderCheck::NoListener => bail!(
                "--drive {}: nothing listens on port {port}; start the server or fix the URL",
                d.target.url
            ),
            HolderCheck::Other { pid, cmdline } => bail!(
                "--drive {}: port {port} is held by pid {pid} ({cmdline}), not by --pid {} or its children; \
                 the load would measure another process",
                d.target.url,
                s.pid
            ),
        }
    }

    // Connections (and their accept) and warm-up happen before the probes
    // see anything that counts: lazy binding and first touch stay outside.
    let mut conns = match &s.drive {
        Some(d) => {
            let mut c = load::connect(&d.target, d.connections)?;
            let warm = load::fixed_count(&mut c, d.warmup);
            if stop.load(Ordering::Relaxed) {
                bail!("interrupted by SIGINT/SIGTERM during the warm-up; nothing was measured");
            }
            if warm.failed() > 0 {
                bail!(
                    "warm-up against {} failed: {:?}; not measuring a target that does not answer",
                    d.target.url,
                    warm.errors
                );
            }
            Some(c)
        }
        None => None,
    };

    let children = crate::target::port::descendants(s.pid);
    let scope = match s.tree.unwrap_or(!children.is_empty()) {
        true => Scope::Tree,
        false => Scope::Process,
    };
    let probes = ProbeSet::attach_scoped(s.pid, &s.families, scope)?;
    match scope {
        Scope::Tree => eprintln!(
            "rig: following the process tree of pid {}: {} process(es) now ({} descendant(s)); \
             processes it forks from now on are followed too",
            s.pid,
            probes.processes().len(),
            probes.processes().len() - 1
        ),
        Scope::Process if !children.is_empty() => eprintln!(
            "rig: --no-tree: pid {} only; its {} descendant(s) are NOT measured",
            s.pid,
            children.len()
        ),
        Scope::Process => {}
    }
    // Warm the probes too (first hits fault in BPF state), then quiesce.
    if let (Some(d), Some(c)) = (&s.drive, conns.as_mut()) {
        let warm = load::fixed_count(c, d.warmup.min(100));
        if warm.failed() > 0 {
            bail!("warm-up under probes failed: {:?}", warm.errors);
        }
    }

    let driven = s.drive.is_some();
    let (settle, patience) = (Duration::from_millis(20), Duration::from_millis(500));
    let quiet_start = driven && probes.quiesce(settle, patience)?;
    let start = probes.start_window()?;
    let mut quiesced = None;
    let (end, load_result): (WindowEnd, Option<LoadResult>) = match (&s.drive, conns.as_mut()) {
        (Some(d), Some(c)) => {
            let r = load::fixed_count(c, d.requests);
            quiesced = Some(quiet_start & probes.quiesce(settle, patience)?);
            let end = if stop.load(Ordering::Relaxed) {
                WindowEnd::Interrupted
            } else if alive(&id) {
                WindowEnd::Completed
            } else {
                WindowEnd::TargetExited
            };
            (end, Some(r))
        }
        _ => {
            eprintln!(
                "rig: window open on pid {} for {} (Ctrl-C ends it early)",
                s.pid,
                humantime::format_duration(s.duration)
            );
            let deadline = Instant::now() + s.duration;
            let end = loop {
                if stop.load(Ordering::Relaxed) {
                    break WindowEnd::Interrupted;
                }
                if !alive(&id) {
                    break WindowEnd::TargetExited;
                }
                let now = Instant::now();
                if now >= deadline {
                    break WindowEnd::Completed;
                }
                std::thread::sleep((deadline - now).min(Duration::from_millis(20)));
            };
            (end, None)
        }
    };
    let window = probes.end_window(start, end)?;
    // Detach before the slow part: symbolizing needs no probes.
    drop(probes);
    drop(conns);

    let requests = match (&load_result, s.per) {
        (_, Some(n)) => Some(n),
        (Some(r), None) => Some(r.succeeded),
        (None, None) => None,
    };
    let mut sym = Symbolizer::new();
    let mut attribution = Attribution::build(&window, requests, load_result, &mut sym);
    attribution.window.quiesced = quiesced;
    Ok(attribution)
}

/// A process rig started (the bundled calibration target for `rig demo`):
/// killed and reaped when dropped, whatever happened.
pub struct Child {
    child: std::process::Child,
    pub port: u16,
}

impl Child {
    /// Start `cmd`, wait for its `READY port=N` line.
    pub fn spawn_ready(mut cmd: std::process::Command) -> Result<Child> {
        use std::io::{BufRead, BufReader};
        cmd.stdout(std::process::Stdio::piped());
        let mut child = cmd.spawn().context("starting the target")?;
        let stdout = child.stdout.take().context("target stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let port = loop {
            match lines.next() {
                Some(Ok(l)) => {
                    if let Some(p) = l.strip_prefix("READY port=") {
                        break p.trim().parse::<u16>().context("READY line port")?;
                    }
                }
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    bail!("target exited before printing READY");
                }
            }
        };
        // Keep draining stdout so the target never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        Ok(Child { child, port })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
