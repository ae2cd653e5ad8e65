//! An attribution session: attach → window → detach → symbolize → report.
//!
//! In: validated `AttachSettings`. Out: an `Attribution`. The window is either
//! a duration of load the user drives, or a fixed-count window of load rig
//! drives itself (warm-up outside the window, then exactly N requests).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::load::{self, H1Target, LoadResult};
use crate::probe::{alive, Family, ProbeSet, Scope, Window, WindowEnd};
use crate::process::ProcessId;
use crate::report::Attribution;
use crate::symbolize::Symbolizer;
use crate::window::ebpf::{ProbeWindow, SettleEnd};
use crate::window::{drive, Phase, WarmUp};

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
    /// Extra wrapper patterns for naming user sites (`--wrapper`).
    pub wrappers: Vec<String>,
}

/// Run one session. `stop` ends a duration window early (Ctrl-C).
pub fn run_attach(s: &AttachSettings, stop: &AtomicBool) -> Result<Attribution> {
    let id = ProcessId::of(s.pid).map_err(|_| crate::probe::not_measurable(s.pid, None))?;
    crate::probe::check_target(s.pid)?;

    // The load must reach the process being probed (a stale server on the
    // port would be measured instead): the port's
    // listener belongs to the pid or one of its descendants, or we refuse.
    if let Some(d) = &s.drive {
        use crate::launch::port::{check_holder, HolderCheck};
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

    let (window, load_result, quiesced) = match &s.drive {
        Some(d) => {
            // Connections (and their accept) and warm-up happen before the
            // probes see anything that counts: lazy binding and first touch
            // stay outside.
            let mut conns = load::connect(&d.target, d.connections)?;
            let check = |phase: Phase, warm: &LoadResult| -> Result<()> {
                if stop.load(Ordering::Relaxed) {
                    bail!("interrupted by SIGINT/SIGTERM during the warm-up; nothing was measured");
                }
                if warm.failed() == 0 {
                    return Ok(());
                }
                match phase {
                    Phase::Before => bail!(
                        "warm-up against {} failed: {:?}; not measuring a target that does not answer",
                        d.target.url,
                        warm.errors
                    ),
                    Phase::Under => bail!("warm-up under probes failed: {:?}", warm.errors),
                }
            };
            let open = || -> Result<ProbeWindow> {
                let probes = attach(s)?;
                Ok(ProbeWindow::new(probes, SettleEnd::Always, || alive(&id)))
            };
            let driven = drive(
                &mut conns,
                WarmUp::driven(d.warmup),
                d.requests,
                check,
                open,
            )?;
            drop(conns);
            let r = driven.reading;
            let mut window = r.window;
            if stop.load(Ordering::Relaxed) {
                window.end = WindowEnd::Interrupted;
            }
            (window, Some(driven.report), Some(r.quiesced))
        }
        None => (user_window(s, &id, stop)?, None, None),
    };

    let requests = match (&load_result, s.per) {
        (_, Some(n)) => Some(n),
        (Some(r), None) => Some(r.succeeded),
        (None, None) => None,
    };
    let mut sym = Symbolizer::new();
    let wrappers = crate::report::stacks::Wrappers::with_extra(&s.wrappers);
    let mut attribution =
        Attribution::build_with(&window, requests, load_result, &mut sym, &wrappers);
    attribution.window.quiesced = quiesced;
    Ok(attribution)
}

/// Attach the probe set to `s.pid` (its whole tree when asked, or when it
/// has children and `--no-tree` was not given), saying which.
fn attach(s: &AttachSettings) -> Result<ProbeSet> {
    let children = crate::process::descendants(s.pid);
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
    Ok(probes)
}

/// A window of `s.duration` while the user drives the load (Ctrl-C or the
/// target's exit ends it early).
fn user_window(s: &AttachSettings, id: &ProcessId, stop: &AtomicBool) -> Result<Window> {
    let probes = attach(s)?;
    let start = probes.start_window()?;
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
        if !alive(id) {
            break WindowEnd::TargetExited;
        }
        let now = Instant::now();
        if now >= deadline {
            break WindowEnd::Completed;
        }
        std::thread::sleep((deadline - now).min(Duration::from_millis(20)));
    };
    // Detach (drop) before the slow part: symbolizing needs no probes.
    Ok(probes.end_window(start, end)?)
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
