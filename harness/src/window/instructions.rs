//! Instruction windows: a target launched for the window, one keep-alive
//! HTTP/1.1 connection, [`WarmUp::instructions`], then exactly N requests
//! counted by the hardware counter ([`perf`]) or by callgrind
//! ([`callgrind`]). Which backend: [`crate::probe::instructions::select`].
//!
//! In: a [`TargetSpec`], a path, a request count and a warm-up count. Out:
//! an [`InstrWindow`] naming its backend.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context, Result};

use super::{drive, Counters, Phase, WarmUp};
use crate::launch::spec::{Body, TargetSpec};
use crate::launch::start::{launch, LaunchOptions};
use crate::load::{Client, Endpoint, Expect, ExpectBody, LoadReport, LoadSpec, Protocol};
use crate::metrics;
use crate::probe::callgrind::{self as cg, FnCost, InstrWindow};
use crate::probe::instructions::Backend;
use crate::probe::perf;

/// Run `backend`'s fixed-count window: `warmup` uncounted requests, then
/// exactly `requests` requests of `path`, one keep-alive HTTP/1.1 connection.
pub fn measure(
    backend: Backend,
    spec: &TargetSpec,
    path: &str,
    requests: u64,
    warmup: u64,
) -> Result<InstrWindow> {
    match backend {
        Backend::Perf => measure_perf(spec, path, requests, warmup),
        Backend::Callgrind => measure_callgrind(spec, path, requests, warmup),
    }
}

/// The perf counters of every thread of the target's tree, enabled for the
/// window only. The reading is the disabled counter set: its total is read
/// after the target has exited, when the kernel has folded the counts of
/// exited child threads into their parents' counters.
struct PerfWindow(Option<perf::Counters>);

impl Counters for PerfWindow {
    type Reading = perf::Counters;
    fn start(&mut self) -> Result<()> {
        Ok(self.0.as_mut().expect("opened").enable()?)
    }
    fn stop(mut self) -> Result<perf::Counters> {
        let mut c = self.0.take().expect("opened");
        c.disable()?;
        Ok(c)
    }
}

/// callgrind's instrumentation of one process, switched on for the window.
struct CallgrindWindow {
    pid: u32,
}

impl Counters for CallgrindWindow {
    type Reading = ();
    fn start(&mut self) -> Result<()> {
        cg::instrument(self.pid, true)
    }
    fn stop(self) -> Result<()> {
        cg::instrument(self.pid, false)
    }
}

/// An instruction window refuses a warm-up with any failed request.
fn all_warm(warmup: u64) -> impl Fn(Phase, &LoadReport) -> Result<()> {
    move |_, r| {
        if r.succeeded != warmup {
            bail!(
                "warm-up: {} of {warmup} succeeded: {:?}",
                r.succeeded,
                r.errors
            );
        }
        Ok(())
    }
}

/// The denominator is N successful requests: a window with any failed
/// request is an error.
fn all_counted(r: &LoadReport, requests: u64) -> Result<()> {
    if r.succeeded != requests {
        bail!(
            "window: {} of {requests} requests succeeded: {:?}",
            r.succeeded,
            r.errors
        );
    }
    Ok(())
}

/// Launch `spec` natively, warm up with `warmup` uncounted requests on one
/// keep-alive HTTP/1.1 connection, count the user-space instructions of
/// exactly `requests` requests of `path`, stop the target and return them
/// per request. On a host without a PMU this is [`perf::PerfError::NoPmu`].
pub fn measure_perf(
    spec: &TargetSpec,
    path: &str,
    requests: u64,
    warmup: u64,
) -> Result<InstrWindow> {
    if requests == 0 {
        bail!("the instructions window needs at least 1 request");
    }
    let load = load_spec(spec, path)?;
    let target = launch(spec, &LaunchOptions::default())
        .with_context(|| format!("launching {} for the perf instructions window", spec.name))?;
    let pid = target.pid;
    let window = (|| -> Result<perf::Counters> {
        let mut client = connect(load, target.port)?;
        let d = drive(
            &mut client,
            WarmUp::instructions(warmup),
            requests,
            all_warm(warmup),
            || Ok(PerfWindow(Some(perf::Counters::open(pid)?))),
        )?;
        all_counted(&d.report, requests)?;
        Ok(d.reading)
    })();
    let exit = target.stop(Duration::from_secs(10));
    let mut counters = window.with_context(|| {
        format!(
            "perf instructions window on {} ({})",
            spec.name,
            exit.describe()
        )
    })?;
    let total = counters.read_total()?;
    Ok(InstrWindow {
        backend: "perf",
        requests,
        total_ir: total,
        ir_per_request: metrics::per_request(total, Some(requests))
            .expect("requests checked nonzero"),
        functions: Vec::new(),
        note: perf::NOTE.into(),
    })
}

/// Launch `spec` under callgrind, warm up with `warmup` uncounted requests
/// on one keep-alive HTTP/1.1 connection, count exactly `requests` requests
/// of `path`, stop the target and return Ir per request.
pub fn measure_callgrind(
    spec: &TargetSpec,
    path: &str,
    requests: u64,
    warmup: u64,
) -> Result<InstrWindow> {
    if requests == 0 {
        bail!("--requests must be at least 1");
    }
    // The profile goes into the launch's own run directory: private
    // (mkdtemp, 0700), owned by the user the target runs as (so valgrind
    // can write it after a `user` drop), and removed with the target, by
    // rig or, should rig be SIGKILLed, by the launch's watchdog.
    let wrapped = wrap_spec(spec, Path::new("{run_dir}/callgrind.out"));
    let load = load_spec(spec, path)?;
    let target = launch(&wrapped, &LaunchOptions::default())
        .with_context(|| format!("launching {} under callgrind", spec.name))?;
    let out_file = target.run_dir().join("callgrind.out");
    let window = (|| -> Result<Vec<std::fs::File>> {
        let mut client = connect(load, target.port)?;
        let open = || -> Result<CallgrindWindow> {
            refuse_prefork(spec, target.pid)?;
            Ok(CallgrindWindow { pid: target.pid })
        };
        let d = drive(
            &mut client,
            WarmUp::instructions(warmup),
            requests,
            all_warm(warmup),
            open,
        )?;
        all_counted(&d.report, requests)?;
        cg::dump(target.pid)?;
        cg::wait_for_dump(&out_file.with_extension("out.1"))?;
        // Opened now, read once the target has exited (its dump is then
        // whole): stopping it removes the run directory, not open files.
        // The part callgrind writes at exit is not needed: instrumentation
        // is off after the window, so it counts nothing.
        cg::dump_files(&out_file)?
            .iter()
            .map(|f| std::fs::File::open(f).with_context(|| format!("opening {}", f.display())))
            .collect()
    })();
    let stderr = target.stderr_tail();
    let exit = target.stop(Duration::from_secs(10));
    let parts = window.with_context(|| {
        format!(
            "callgrind window on {} ({}); valgrind stderr tail:\n{stderr}",
            spec.name,
            exit.describe()
        )
    })?;
    let mut text = String::new();
    for mut f in parts {
        std::io::Read::read_to_string(&mut f, &mut text).context("reading a callgrind dump")?;
        text.push('\n');
    }
    let profile = cg::parse(&text);
    let n = requests as f64;
    Ok(InstrWindow {
        backend: "callgrind",
        requests,
        total_ir: profile.total_ir,
        ir_per_request: metrics::per_request(profile.total_ir, Some(requests))
            .expect("requests checked nonzero"),
        functions: profile
            .functions
            .into_iter()
            .map(|f| FnCost {
                self_ir: f.self_ir / n,
                calls: f.calls / n,
                ..f
            })
            .collect(),
        note: cg::NOTE.into(),
    })
}

/// callgrind_control cannot reach a process valgrind forked (it is not
/// listed by vgdb, and it inherits the parent's output file), so a prefork
/// server's workers would go uncounted: refuse rather than report the
/// master's near-zero share as the server's cost.
fn refuse_prefork(spec: &TargetSpec, pid: u32) -> Result<()> {
    let children = crate::process::descendants(pid);
    if !children.is_empty() {
        bail!(
            "target {} runs as {} processes (a prefork master and workers?): the callgrind \
             window can count only the process rig launched, not the ones it forked \
             (pids {children:?}). Configure it as one process (nginx: `master_process off;`), \
             or use a host with a PMU (the perf backend counts the whole tree)",
            spec.name,
            children.len() + 1
        );
    }
    Ok(())
}

/// One keep-alive connection to a launched target on `port`.
fn connect(mut load: LoadSpec, port: u16) -> Result<Client> {
    load.addr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port);
    Ok(Client::connect(&load)?)
}

/// One keep-alive h1 connection to `path` of `spec`, with the spec's
/// expected response.
pub fn load_spec(spec: &TargetSpec, path: &str) -> Result<LoadSpec> {
    if !spec.protocols.h1 {
        bail!(
            "target {}: the callgrind window speaks HTTP/1.1; its spec has h1 = false",
            spec.name
        );
    }
    let expect = match spec.endpoints.iter().find(|e| e.path == path) {
        Some(ep) => Expect {
            status: ep.status,
            content_type: ep.content_type.clone(),
            body: match &ep.body {
                Some(Body::Literal(s)) => ExpectBody::Exact(s.clone().into_bytes().into()),
                Some(Body::File(f)) => ExpectBody::Exact(
                    std::fs::read(f)
                        .with_context(|| format!("body file {}", f.display()))?
                        .into(),
                ),
                _ => ExpectBody::Any,
            },
        },
        None => bail!(
            "target {} has no endpoint {path} (its endpoints: {})",
            spec.name,
            spec.endpoints
                .iter()
                .map(|e| e.path.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    Ok(LoadSpec {
        addr: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0),
        protocol: Protocol::H1 { keepalive: true },
        endpoint: Endpoint {
            path: path.into(),
            expect,
        },
        connections: 1,
        streams: 1,
        client_cpus: None,
        threads: Some(1),
        spin: None,
        request_timeout: crate::load::REQUEST_TIMEOUT,
        deadline: None,
    })
}

/// `spec` run under valgrind's callgrind, writing its profile to `out_file`
/// (dumps are `out_file.1`, `.2`, … and `out_file` at exit).
pub fn wrap_spec(spec: &TargetSpec, out_file: &Path) -> TargetSpec {
    let mut s = spec.clone();
    let mut argv: Vec<String> = vec!["valgrind".into()];
    argv.extend(cg::VALGRIND_ARGS.iter().map(|a| a.to_string()));
    argv.push(format!("--callgrind-out-file={}", out_file.display()));
    for (i, a) in spec.argv.iter().enumerate() {
        // argv[0] with a slash is relative to the spec's directory; once it
        // is an argument of valgrind, say so explicitly.
        if i == 0 && a.contains('/') && !a.starts_with('/') && !a.starts_with('{') {
            argv.push(format!("{{spec_dir}}/{a}"));
        } else {
            argv.push(a.clone());
        }
    }
    s.argv = argv;
    s.name = format!("{}-callgrind", spec.name);
    s.ready_timeout = s.ready_timeout.max(cg::READY_TIMEOUT);
    s
}
