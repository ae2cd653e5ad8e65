//! An attribution session: attach → window → detach → symbolize → report.
//!
//! In: validated `AttachSettings`. Out: an `Attribution`. The window is
//! one of: a duration of load the user drives; the run of a load command
//! rig starts (`rig attach -- COMMAND`: the window opens before it starts
//! and closes when it exits); or a fixed-count window of load rig drives
//! itself (warm-up outside the window, then exactly N requests).

mod activity;
mod command;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::load::url::{describe, drive_spec, DriveChoice, Url};
use crate::load::{self, LoadReport, LoadResult, LoadSpec};
use crate::probe::{alive, Family, ProbeSet, Scope, Window, WindowEnd};
use crate::process::ProcessId;
use crate::report::Attribution;
use crate::symbolize::Symbolizer;
use crate::window::ebpf::{ProbeWindow, SettleEnd};
use crate::window::peers::Watched;
use crate::window::{drive, Phase, WarmUp};

/// Load rig drives itself for a fixed-count window.
#[derive(Clone, Debug)]
pub struct Drive {
    pub url: String,
    /// Protocol, connections and streams: what `rig run`'s generator speaks.
    pub load: LoadSpec,
    pub warmup: u64,
    pub requests: u64,
}

impl Drive {
    /// `--drive URL` with the user's protocol and TLS choices.
    pub fn new(url: &str, choice: &DriveChoice, warmup: u64, requests: u64) -> Result<Drive> {
        let u = Url::parse(url)?;
        Ok(Drive {
            url: url.to_string(),
            load: drive_spec(&u, choice)?,
            warmup,
            requests,
        })
    }

    /// Plain HTTP/1.1 keep-alive on `connections` connections.
    pub fn h1(url: &str, connections: usize, warmup: u64, requests: u64) -> Result<Drive> {
        let choice = DriveChoice {
            connections,
            streams: 1,
            ..DriveChoice::default()
        };
        Drive::new(url, &choice, warmup, requests)
    }
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
    /// `rig attach -- COMMAND ARGS...`: the load, run inside the window.
    pub command: Vec<String>,
    /// Follow the process tree: `Some(true)` always, `Some(false)` never,
    /// `None` when the pid has children.
    pub tree: Option<bool>,
    /// Extra wrapper patterns for naming user sites (`--wrapper`).
    pub wrappers: Vec<String>,
    /// `--live-heap`: the alloc probes also keep every block allocated in
    /// the window until it is freed (uretprobes on the allocators).
    pub live_heap: bool,
    /// `--usdt`, `--func`: the probes the user named.
    pub user_probes: Vec<crate::probe::user::UserProbe>,
}

/// Run one session. `stop` ends a duration window early (Ctrl-C).
pub fn run_attach(s: &AttachSettings, stop: &AtomicBool) -> Result<Attribution> {
    let (s, thread) = as_process(s);
    let s = &s;
    let id = ProcessId::of(s.pid).map_err(|_| crate::probe::not_measurable(s.pid, None))?;
    crate::probe::check_target(s.pid)?;

    // The load must reach the process being probed (a stale server on the
    // port would be measured instead): the port's
    // listener belongs to the pid or one of its descendants, or we refuse.
    if let Some(d) = &s.drive {
        use crate::launch::port::{check_holder_on, HolderCheck, Transport};
        let port = d.load.addr.port();
        let transport = match d.load.protocol {
            crate::load::Protocol::H3 { .. } => Transport::Udp,
            _ => Transport::Tcp,
        };
        match check_holder_on(port, s.pid, transport) {
            HolderCheck::Proven(_) => {}
            HolderCheck::NoListener => bail!(
                "--drive {}: nothing listens on {} port {port}; start the server or fix the URL",
                d.url,
                match transport {
                    Transport::Tcp => "TCP",
                    Transport::Udp => "UDP",
                }
            ),
            HolderCheck::Other { pid, cmdline } => bail!(
                "--drive {}: port {port} is held by pid {pid} ({cmdline}), not by --pid {} or its children; \
                 the load would measure another process",
                d.url,
                s.pid
            ),
        }
    }

    let stopped = |pid: u32| {
        format!(
            "pid {pid} is stopped (SIGSTOP, or a debugger holds it): it runs nothing until it is \
             continued (kill -CONT {pid})"
        )
    };
    if s.drive.is_some() && crate::process::is_stopped(s.pid) {
        bail!("{}; rig's load would only time out", stopped(s.pid));
    }
    let stopped_at_start = crate::process::is_stopped(s.pid);
    let image = crate::process::Image::of(s.pid);
    let mut w = match &s.drive {
        Some(d) => driven_window(s, d, &id, stop)?,
        None => user_window(s, &id, stop)?,
    };
    // An exec keeps the pid: the probes stay on the old program, and what
    // the new one does is not seen.
    let execd = match (&image, crate::process::Image::of(s.pid)) {
        (Some(a), Some(b)) if *a != b => Some(format!(
            "pid {} replaced its program during the window (execve: {} → {}): the probes were \
             on the old one, so the new program's calls are missing from every family",
            s.pid, a.exe, b.exe
        )),
        _ => None,
    };
    w.warnings.extend(thread);
    w.warnings.extend(execd.clone());
    if stopped_at_start || crate::process::is_stopped(s.pid) {
        w.warnings.push(format!(
            "{} (it was stopped at the window's {}): the window saw only what it did while it ran",
            stopped(s.pid),
            if stopped_at_start { "start" } else { "end" }
        ));
    }
    let command_count = w.command.as_ref().and_then(|c| c.count.as_ref());
    let requests = match (&w.load, s.per, command_count) {
        (_, Some(n), _) => Some(n),
        (Some(r), None, _) => Some(r.succeeded),
        (None, None, Some(c)) => Some(c.requests),
        (None, None, None) => None,
    };
    let mut sym = Symbolizer::new();
    let wrappers = crate::report::stacks::Wrappers::with_extra(&s.wrappers);
    let mut attribution = Attribution::build_with(&w.window, requests, w.load, &mut sym, &wrappers);
    attribution.window.quiesced = w.quiesced;
    attribution.window.drive = w.drive;
    attribution.window.command = w.command;
    attribution.window.warnings = w.warnings;
    if let Some(why) = execd {
        for f in &s.families {
            attribution
                .losses
                .entry(*f)
                .or_default()
                .push((why.clone(), 1));
        }
        attribution.complete = false;
    }
    if let Some((peers, rig_tcp)) = &w.peers {
        let accepts: u64 = attribution
            .syscalls
            .iter()
            .filter(|r| r.name == "accept" || r.name == "accept4")
            .map(|r| r.count)
            .sum();
        let accepts = crate::window::peers::foreign_accepts(accepts, *rig_tcp);
        let requests = requests.unwrap_or(0);
        if let Some(why) = crate::window::peers::warning(peers, accepts, requests) {
            eprintln!("rig: {why}");
            attribution.window.warnings.push(why);
            attribution.window.other_traffic = Some(crate::report::OtherTraffic {
                client_ports: peers.connections.iter().copied().collect(),
                accepts,
            });
            attribution.complete = false;
        }
    }
    if attribution.scope == Scope::Tree {
        attribution.window.rig_excluded = crate::process::rig_within(s.pid);
    }
    Ok(attribution)
}

/// `--pid` of a thread (its id reads as a process in /proc): the session
/// measures its process, every thread, and says so at once and in the
/// window's warnings.
fn as_process(s: &AttachSettings) -> (AttachSettings, Option<String>) {
    let mut s = s.clone();
    match crate::process::tgid_of(s.pid) {
        Some(tgid) if tgid != s.pid => {
            let why = format!(
                "--pid {} is a thread of process {tgid} ({}): rig measures processes, so this \
                 window is pid {tgid}'s, every thread of it",
                s.pid,
                crate::process::cmdline(tgid)
            );
            crate::errln!("rig: {why}");
            s.pid = tgid;
            (s, Some(why))
        }
        _ => (s, None),
    }
}

/// A finished window and what is known of its load.
struct Measured {
    window: Window,
    load: Option<LoadResult>,
    quiesced: Option<bool>,
    drive: Option<String>,
    command: Option<crate::load::tools::CommandRun>,
    warnings: Vec<String>,
    /// `--drive`: other clients seen on the port, and the TCP handshakes
    /// rig itself made inside the window.
    peers: Option<(crate::window::peers::Peers, u64)>,
}

/// A fixed-count window of load rig drives (`--drive`). Connections (and
/// their accept) and the warm-up happen before the probes see anything
/// that counts: lazy binding and first touch stay outside.
fn driven_window(
    s: &AttachSettings,
    d: &Drive,
    id: &ProcessId,
    stop: &AtomicBool,
) -> Result<Measured> {
    let mut client = drive_client(d)?;
    if d.warmup > 0 {
        crate::errln!(
            "rig: warming up: {} requests before the probes ({})",
            d.warmup,
            describe(&d.load)
        );
    }
    let check = |phase: Phase, warm: &LoadReport| -> Result<()> {
        if stop.load(Ordering::Relaxed) {
            bail!(
                "{} during the warm-up; nothing was measured",
                crate::interrupt::interrupted_by()
            );
        }
        if warm.errors_total() == 0 {
            if phase == Phase::Before {
                if let Some(why) = too_long(d.requests, warm) {
                    return Err(anyhow::Error::new(crate::usage::BadValue(why)));
                }
            }
            return Ok(());
        }
        match phase {
            Phase::Before => bail!(
                "warm-up against {} ({}) failed: {:?}; not measuring a target that does not answer{}",
                d.url,
                describe(&d.load),
                warm.errors,
                speaks(d)
            ),
            Phase::Under => bail!("warm-up under probes failed: {:?}", warm.errors),
        }
    };
    let port = d.load.addr.port();
    let open = || -> Result<Watched<ProbeWindow>> {
        let probes = attach(s)?;
        let w = ProbeWindow::new(probes, SettleEnd::Always, || alive(id)).detach_later();
        Ok(Watched::new(w, port))
    };
    let driven = drive(
        &mut client,
        WarmUp::driven(d.warmup),
        d.requests,
        check,
        open,
    )?;
    drop(client);
    let (r, peers) = driven.reading;
    let mut window = r.window;
    if stop.load(Ordering::Relaxed) {
        window.end = WindowEnd::Interrupted;
    }
    let report = driven.report;
    Ok(Measured {
        window,
        load: Some(LoadResult {
            sent: report.sent,
            succeeded: report.succeeded,
            errors: report.errors.clone(),
            not_sent: report.not_sent.clone(),
        }),
        quiesced: Some(r.quiesced),
        drive: Some(drive_line(d, report.handshakes)),
        command: None,
        warnings: Vec::new(),
        peers: Some((peers, report.handshakes.tcp)),
    })
}

/// The longest driven window rig starts: a count that would take longer at
/// the warm-up's rate is a mistake (a typo'd `--requests`), not a
/// measurement, and would hold the target under probes for days.
pub const MAX_DRIVEN_WINDOW: Duration = Duration::from_secs(24 * 3600);

/// Why `--requests N` cannot finish in reasonable time at the rate the
/// warm-up ran at, if it cannot.
fn too_long(requests: u64, warm: &LoadReport) -> Option<String> {
    let secs = warm.elapsed_ns as f64 / 1e9;
    if warm.succeeded == 0 || secs <= 0.0 {
        return None;
    }
    let rate = warm.succeeded as f64 / secs;
    let needs = requests as f64 / rate;
    (needs > MAX_DRIVEN_WINDOW.as_secs_f64()).then(|| {
        format!(
            "--requests {requests}: at the warm-up's rate ({rate:.0} requests/s) the window \
             would take {}, past the {} rig allows a driven window; give fewer requests \
             (about {} fit in an hour)",
            humantime::format_duration(Duration::from_secs(needs.min(1e12) as u64)),
            humantime::format_duration(MAX_DRIVEN_WINDOW),
            (rate * 3600.0) as u64
        )
    })
}

/// The client of `--drive`; a self-signed CA certificate gets the flag
/// that accepts it.
fn drive_client(d: &Drive) -> Result<load::Client> {
    load::Client::connect(&d.load).map_err(|e| {
        let hint = match e.to_string().contains("CaUsedAsEndEntity") {
            true => {
                "; the server's certificate is its own CA (self-signed, CA:TRUE), which \
                     verification refuses as an end entity: give --insecure to accept it"
            }
            false => "",
        };
        // A certificate's trouble is the certificate's; any other failure
        // to connect is said with what the port does speak.
        let text = e.to_string();
        let sniffed = match hint.is_empty() && !text.to_lowercase().contains("certificate") {
            true => speaks(d),
            false => String::new(),
        };
        anyhow::anyhow!("--drive {}: {e}{hint}{sniffed}", d.url)
    })
}

/// What the `--drive` port says to a plain HTTP request, as `; …` for the
/// end of an error (nothing over QUIC, whose port is UDP).
fn speaks(d: &Drive) -> String {
    match d.load.protocol {
        load::Protocol::H3 { .. } => String::new(),
        _ => crate::load::sniff::what_it_speaks(d.load.addr)
            .map(|s| format!("; {s}"))
            .unwrap_or_default(),
    }
}

/// How the window was driven, with the handshakes `hs` made inside it.
fn drive_line(d: &Drive, hs: load::Handshakes) -> String {
    // A server that closes after every response (HTTP/1.0, `Connection:
    // close`) makes a keep-alive client reconnect: say so, the accept and
    // close of each connection are in the counts.
    let reconnects = match d.load.protocol {
        load::Protocol::H1 { keepalive: true } if hs.tcp > 0 => format!(
            "; the server closed the connection {} times (HTTP/1.0 or Connection: close), \
             so its accept and close are in the counts",
            hs.tcp
        ),
        // QUIC sockets are unconnected: /proc/net/udp does not say whose
        // datagrams reach the target, so only TCP clients are told apart.
        load::Protocol::H3 { .. } => "; other clients over QUIC cannot be told apart from rig's \
             (UDP sockets are unconnected), other TCP clients still are"
            .to_string(),
        _ => String::new(),
    };
    format!(
        "{}; handshakes inside the window: {}{reconnects}",
        describe(&d.load),
        hs.describe_as(matches!(d.load.protocol, load::Protocol::H3 { .. }))
    )
}

/// Attach the probe set to `s.pid` (its whole tree when asked, or when it
/// has children and `--no-tree` was not given), saying which.
fn attach(s: &AttachSettings) -> Result<ProbeSet> {
    let children = crate::process::descendants(s.pid);
    let scope = match s.tree.unwrap_or(!children.is_empty()) {
        true => Scope::Tree,
        false => Scope::Process,
    };
    let t0 = Instant::now();
    let probes = ProbeSet::attach_named(
        s.pid,
        &s.families,
        scope,
        crate::probe::Stacks::On,
        s.live_heap,
        &s.user_probes,
    )?;
    let counts = probes.verified_instructions();
    let verified = if counts.is_empty() {
        "this kernel does not say how many BPF instructions it verified".to_string()
    } else {
        let n: u64 = counts.iter().map(|(_, _, n)| u64::from(*n)).sum();
        format!("the kernel verified {n} BPF instructions")
    };
    crate::errln!(
        "rig: probes attached in {:.2} s ({} families; {verified})",
        t0.elapsed().as_secs_f64(),
        probes.families.len()
    );
    let kernel = crate::probe::kernel::kernel();
    if let Some(line) =
        crate::probe::kernel::degraded_line(kernel, &kernel.degraded(&probes.families))
    {
        crate::errln!("rig: {line}");
    }
    match scope {
        Scope::Tree => crate::errln!(
            "rig: following the process tree of pid {}: {} process(es) now ({} descendant(s)); \
             processes it forks from now on are followed too",
            s.pid,
            probes.processes().len(),
            probes.processes().len() - 1
        ),
        Scope::Process if !children.is_empty() => crate::errln!(
            "rig: --no-tree: pid {} only; its {} descendant(s) are NOT measured",
            s.pid,
            children.len()
        ),
        Scope::Process => {}
    }
    let own = crate::process::rig_within(s.pid);
    if scope == Scope::Tree && !own.is_empty() {
        eprintln!(
            "rig: rig itself (pid {}) and its {} child process(es) are inside pid {}'s tree: \
             they are left out, never counted as the target's",
            own[0],
            own.len() - 1,
            s.pid
        );
    }
    Ok(probes)
}

/// A window while the user's load runs: for `s.duration`, or (with a
/// command) from just before the command starts until it exits. Ctrl-C
/// or the target's exit end it early.
fn user_window(s: &AttachSettings, id: &ProcessId, stop: &AtomicBool) -> Result<Measured> {
    let probes = attach(s)?;
    let tree = probes.scope() == Scope::Tree;
    let start = probes.start_window()?;
    let mut activity = activity::Activity::start(s.pid, tree);
    let mut cmd = match s.command.is_empty() {
        true => {
            crate::errln!(
                "rig: window open on pid {} for {} (Ctrl-C ends it early)",
                s.pid,
                humantime::format_duration(s.duration)
            );
            None
        }
        false => {
            crate::errln!(
                "rig: window open on pid {}; running the load: {}",
                s.pid,
                s.command.join(" ")
            );
            Some(command::Running::spawn(&s.command)?)
        }
    };
    // From the start snapshot, not from now: the window is the interval
    // between the two snapshots, and it is that interval that must last
    // `s.duration`.
    let deadline = start.at() + s.duration;
    let (end, status) = loop {
        if stop.load(Ordering::Relaxed) {
            break (WindowEnd::Interrupted, None);
        }
        if !alive(id) {
            break (WindowEnd::TargetExited, None);
        }
        activity.tick();
        let now = Instant::now();
        match &mut cmd {
            Some(c) => {
                if let Some(st) = c.try_wait()? {
                    break (WindowEnd::Completed, Some(st));
                }
            }
            None if now >= deadline => break (WindowEnd::Completed, None),
            None => {}
        }
        let left = deadline.saturating_duration_since(now);
        std::thread::sleep(match cmd {
            Some(_) => Duration::from_millis(5),
            None => left.min(Duration::from_millis(20)),
        });
    };
    // Symbolizing needs no probes: they detach meanwhile.
    let window = probes.end_window(start, end)?;
    crate::probe::detach_in_background(probes);
    let mut warnings = activity.finish(cmd.is_some());
    let command = match cmd {
        Some(mut c) => {
            let status = match status {
                Some(st) => st,
                None => c.kill()?,
            };
            let run = c.finish(status, s.per);
            if run.exit_code != Some(0) {
                warnings.push(format!(
                    "the load command ended with {}: its requests may have failed",
                    run.status()
                ));
            }
            Some(run)
        }
        None => None,
    };
    Ok(Measured {
        window,
        load: None,
        quiesced: None,
        drive: None,
        command,
        warnings,
        peers: None,
    })
}

/// A process rig started (the bundled calibration target for `rig demo`):
/// killed and reaped when dropped, whatever happened, and killed by the
/// kernel when rig dies (a SIGKILL of rig included), as launched targets are.
pub struct Child {
    child: std::process::Child,
    pub port: u16,
}

impl Child {
    /// Start `cmd`, wait for its `READY port=N` line.
    pub fn spawn_ready(mut cmd: std::process::Command) -> Result<Child> {
        use std::io::{BufRead, BufReader};
        cmd.stdout(std::process::Stdio::piped());
        crate::launch::die_with_rig(&mut cmd);
        let mut child = cmd.spawn().context("starting the target")?;
        // As for a launched target: say it when it runs with rig's root.
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            let name = std::path::Path::new(cmd.get_program())
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            crate::errln!(
                "rig: warning: target {name} (pid {}) runs as root",
                child.id()
            );
        }
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
