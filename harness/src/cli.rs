//! Command line: flags (clap) → validated settings → the session → output.

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand};

use crate::launch::spec::TargetSpec;
use crate::load::url::DriveChoice;
use crate::probe::{Family, ProbeError};
use crate::report::{table, Attribution};
use crate::session::{self, AttachSettings, Drive};

pub use crate::exit;

#[derive(Parser, Debug)]
#[command(
    name = "rig",
    version,
    about = "What one request costs a server: exact per-request counters at true call sites"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Cmd,
}

#[derive(Subcommand, Debug)]
pub enum Cmd {
    /// Attach probes to a running process for one window and attribute its costs to call sites.
    Attach(AttachArgs),
    /// Measure what each probe kind costs per hit on this host.
    ProbeCost(ProbeCostArgs),
    /// Run an attribution session against the bundled calibration server.
    Demo(DemoArgs),
    /// Run the scenario matrix against fresh servers: per-request counters next to rps, latency and memory.
    Run(RunArgs),
    /// Validate a target spec or a matrix file and explain each error with its line.
    CheckConfig(CheckConfigArgs),
    /// A/B of two or more builds: interleaved arms, proven arms, paired statistics.
    Ab(AbArgs),
    /// Instructions per request (callgrind window when the host has no PMU). Instructions are not time.
    Instructions(InstructionsArgs),
    /// Counter-only CI gate: deterministic per-request counters against a checked-in baseline (exit 7 on a breach).
    Gate(GateArgs),
    /// (Re)build report.html of an output directory of rig run, rig ab or rig gate.
    Report(ReportArgs),
    /// Render a flamegraph (SVG, folded stacks or pprof) from recorded results, without re-running.
    Flame(FlameArgs),
}

#[derive(Args, Debug)]
pub struct FlameArgs {
    /// The JSON of `rig attach --json`, or a cases.jsonl of `rig run`, `rig ab` or `rig gate`.
    pub file: PathBuf,
    /// Case id (or its file-name slug) in a cases.jsonl; not needed when it holds one counted case.
    #[arg(long)]
    pub case: Option<String>,
    /// Family, or one of its other weights: alloc, alloc_bytes, copy, copy_calls, locks, lock_wait,
    /// faults, syscalls, sched (off-CPU ns), sched_switches, cpu (on-CPU ns), cpu_samples.
    #[arg(long, default_value = "alloc")]
    pub family: String,
    /// svg, folded or pprof (gzipped profile.proto with every weight of the family).
    #[arg(long, default_value = "svg")]
    pub format: String,
    /// Write here (a new file) instead of standard output.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

fn flame(a: &FlameArgs) -> Result<i32> {
    let format = a
        .format
        .parse()
        .map_err(|e: String| anyhow::Error::new(crate::usage::BadValue(format!("--format {e}"))))?;
    new_output_file("--out", &a.out)?;
    let bytes = crate::flamegraph::render(&crate::flamegraph::FlameSettings {
        file: a.file.clone(),
        case: a.case.clone(),
        graph: a.family.clone(),
        format,
        out: a.out.clone(),
    })?;
    match &a.out {
        Some(p) => crate::fsutil::write_new(p, &bytes).context("--out")?,
        None => std::io::Write::write_all(&mut std::io::stdout(), &bytes)?,
    }
    Ok(exit::OK)
}

#[derive(Args, Debug)]
pub struct ReportArgs {
    /// The output directory (it has cases.jsonl); report.html is written into it.
    pub dir: PathBuf,
}

/// The path of report.html, when the command wrote one.
fn print_report_path(dir: &std::path::Path) {
    let p = dir.join(crate::html::FILE);
    if p.exists() {
        println!("report: {}", p.display());
    }
}

#[derive(Args, Debug)]
pub struct GateArgs {
    /// Baseline file (TOML; see docs/guide.md, "Counter-only CI gates").
    #[arg(long)]
    pub baseline: PathBuf,
    /// Run this target spec instead of the baseline's (e.g. the build under test).
    #[arg(long)]
    pub target: Option<PathBuf>,
    /// Write the current deterministic values into the baseline file (limits kept) and exit 0.
    #[arg(long)]
    pub bless: bool,
    /// Output directory for manifest.json, cases.jsonl and gate.json; must not exist.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct InstructionsArgs {
    /// Target spec (TOML).
    #[arg(long)]
    pub target: PathBuf,
    /// Endpoint path to request (must be one of the spec's endpoints).
    #[arg(long)]
    pub path: String,
    /// Requests in the counted window (one keep-alive HTTP/1.1 connection).
    #[arg(long, default_value_t = 200)]
    pub requests: u64,
    /// Uncounted warm-up requests before the window.
    #[arg(long, default_value_t = crate::window::WarmUp::INSTRUCTIONS_COMMAND)]
    pub warmup: u64,
    /// Functions shown, by self Ir per request (callgrind only).
    #[arg(long, default_value_t = 15)]
    pub top: usize,
    /// Who counts: auto (perf when the host has a PMU, else callgrind), perf, callgrind.
    #[arg(long, default_value = "auto")]
    pub backend: String,
}

fn instructions(a: &InstructionsArgs) -> Result<i32> {
    use crate::probe::instructions::{self as instr, Choice};
    let choice = Choice::parse(&a.backend).map_err(|e| anyhow::anyhow!("--backend: {e}"))?;
    let (backend, why) = instr::select(choice, &crate::host::detect_pmu())?;
    println!("instructions counted by {why}");
    let spec = crate::launch::spec::TargetSpec::load(&a.target)
        .with_context(|| format!("--target {}", a.target.display()))?;
    let w = crate::window::instructions::measure(backend, &spec, &a.path, a.requests, a.warmup)?;
    print!("{}", crate::probe::callgrind::render(&w, a.top));
    Ok(exit::OK)
}

#[derive(Args, Debug)]
pub struct AbArgs {
    /// An arm: NAME=TARGET_SPEC (repeat; at least two). The first is the baseline.
    #[arg(long = "arm", required = true)]
    pub arms: Vec<String>,
    /// Scenario matrix.
    #[arg(long, default_value = "config/matrix.toml")]
    pub matrix: PathBuf,
    /// Suites to compare (repeatable).
    #[arg(long, required = true)]
    pub suite: Vec<String>,
    /// Negative-control suites: legs the change must not move, interleaved the same way.
    #[arg(long)]
    pub control: Vec<String>,
    /// Rounds of A B B A blocks.
    #[arg(long, default_value_t = 2)]
    pub rounds: u32,
    /// Output directory; must not exist.
    #[arg(long)]
    pub out: PathBuf,
    /// Probe families for the counted pass.
    #[arg(long, default_value = "syscalls,alloc,copy,faults")]
    pub probes: String,
    /// Passes per case.
    #[arg(long, default_value = "clean,counted")]
    pub passes: String,
    /// Response headers masked before comparing outputs (repeatable).
    #[arg(long = "mask-header", default_value = "date")]
    pub masks: Vec<String>,
    #[command(flatten)]
    pub budget: Budget,
}

#[derive(Args, Debug)]
pub struct RunArgs {
    /// Target spec (TOML); repeat for several implementations (order is reversed every round).
    #[arg(long, required = true)]
    pub target: Vec<PathBuf>,
    /// Scenario matrix.
    #[arg(long, default_value = "config/matrix.toml")]
    pub matrix: PathBuf,
    /// Only these suites (repeatable); default: all suites of the matrix.
    #[arg(long)]
    pub suite: Vec<String>,
    /// Output directory; must not exist.
    #[arg(long)]
    pub out: PathBuf,
    /// Probe families for the counted pass: all, or a list (syscalls,alloc,copy,locks,faults,sched).
    #[arg(long, default_value = "syscalls,alloc,copy,faults,sched")]
    pub probes: String,
    /// Passes per case: clean (no uprobes: timing, memory) and/or counted (probes: per-request counters).
    #[arg(long, default_value = "clean,counted")]
    pub passes: String,
    /// Rounds of the whole matrix (overrides the matrix default).
    #[arg(long)]
    pub repeats: Option<u32>,
    #[command(flatten)]
    pub budget: Budget,
}

/// Pinning and budgets of the server under test (`rig run`, `rig ab`).
#[derive(Args, Debug)]
pub struct Budget {
    /// Pin the server to these CPUs (e.g. 0 or 0-1).
    #[arg(long)]
    pub server_cpu: Option<String>,
    /// Pin the load generator to these CPUs (disjoint from --server-cpu).
    #[arg(long)]
    pub client_cpus: Option<String>,
    /// Open loop: the generator sleeps until this many µs before each send
    /// time and spins the rest (default: calibrated from the measured
    /// wake-up lateness at start, shown in the manifest).
    #[arg(long, value_parser = spin_us)]
    pub spin_us: Option<f64>,
    /// Memory limit of the server's cgroup, swap 0.
    #[arg(long)]
    pub memory_mib: Option<u64>,
    /// CPU quota of the server's cgroup, in cores (e.g. 1 or 0.5).
    #[arg(long)]
    pub cpu_quota: Option<f64>,
    /// Run the server as this user (name or uid), overriding the spec's
    /// `user`; rig drops to it after setting up the cgroup and pinning.
    #[arg(long)]
    pub user: Option<String>,
}

impl Budget {
    /// `--user` over each spec's own `user` (checked now: exit 2).
    fn apply_user(&self, spec: &mut TargetSpec) -> Result<()> {
        if let Some(u) = &self.user {
            crate::launch::user::resolve(u, None)
                .map_err(|m| anyhow::Error::new(crate::usage::BadValue(format!("--user: {m}"))))?;
            spec.user = Some(u.clone());
            spec.group = None;
        }
        Ok(())
    }
}

impl Budget {
    /// The server and client CPU sets, checked disjoint, and the quota checked.
    #[allow(clippy::type_complexity)]
    fn cpus(&self) -> Result<(Option<Vec<usize>>, Option<Vec<usize>>)> {
        let server = cpu_list("--server-cpu", &self.server_cpu)?;
        let client = cpu_list("--client-cpus", &self.client_cpus)?;
        if let (Some(s), Some(c)) = (&server, &client) {
            if let Some(x) = s.iter().find(|x| c.contains(x)) {
                crate::refuse!(
                    "--client-cpus {} overlaps --server-cpu {} on CPU {x}; give disjoint CPU sets",
                    self.client_cpus.as_deref().unwrap_or_default(),
                    self.server_cpu.as_deref().unwrap_or_default()
                );
            }
        }
        if self.cpu_quota.is_some_and(|q| !q.is_finite() || q <= 0.0) {
            crate::refuse!("--cpu-quota must be a positive number of cores, e.g. 1 or 0.5");
        }
        self.check_host(server.as_deref(), client.as_deref())
            .map_err(|m| anyhow::Error::new(crate::usage::BadValue(m)))?;
        Ok((server, client))
    }

    /// What this host cannot give, refused before the first case (exit 2)
    /// instead of failing every case.
    fn check_host(&self, server: Option<&[usize]>, client: Option<&[usize]>) -> Result<(), String> {
        let online = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap_or_default();
        let cpus = crate::launch::start::parse_cpu_list(&online).unwrap_or_default();
        for (flag, set) in [("--server-cpu", server), ("--client-cpus", client)] {
            if let Some(c) = set.into_iter().flatten().find(|c| !cpus.contains(c)) {
                return Err(format!(
                    "{flag}: CPU {c} is not online here (online: {}); give CPUs from that list",
                    online.trim()
                ));
            }
            if set.is_some_and(|s| s.is_empty()) {
                return Err(format!("{flag}: give at least one CPU"));
            }
        }
        if self.memory_mib == Some(0) {
            return Err("--memory-mib 0: give the memory limit in MiB, at least 1".into());
        }
        if let Some(q) = self.cpu_quota {
            if !cpus.is_empty() && q > cpus.len() as f64 {
                return Err(format!(
                    "--cpu-quota {q}: more cores than this host has online ({}); give at most {}",
                    cpus.len(),
                    cpus.len()
                ));
            }
        }
        Ok(())
    }
}

/// A target spec and its TLS variant, if it names one.
fn load_target(file: &std::path::Path) -> Result<(TargetSpec, Option<TargetSpec>)> {
    let spec = TargetSpec::load(file).with_context(|| format!("target spec {}", file.display()))?;
    let tls = match &spec.tls_variant {
        Some(p) => Some(
            TargetSpec::load(p).with_context(|| format!("tls_variant of {}", file.display()))?,
        ),
        None => None,
    };
    Ok((spec, tls))
}

#[derive(Args, Debug)]
pub struct CheckConfigArgs {
    /// A target spec or a matrix file.
    pub file: PathBuf,
}

#[derive(Args, Debug)]
pub struct Common {
    /// Probe families: all, or a list of syscalls,alloc,copy,locks,faults,sched,cpu.
    #[arg(long, default_value = "all")]
    pub probes: String,
    /// A function that wraps allocation, copying or syscalls in the target
    /// (e.g. ngx_alloc, or ngx_p* for a prefix): skipped, like the built-in
    /// allocators and standard libraries, when naming a stack's user site.
    /// Repeatable.
    #[arg(long = "wrapper", value_name = "PATTERN")]
    pub wrappers: Vec<String>,
    /// Rows per table.
    #[arg(long, default_value_t = 15)]
    pub top: usize,
    /// Also write the full attribution as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Write flamegraphs of every family (SVG, folded stacks, pprof) into this new directory.
    #[arg(long, value_name = "DIR")]
    pub flame: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct AttachArgs {
    /// Process to attach to (all its threads are covered).
    #[arg(long)]
    pub pid: u32,
    /// Window length when you drive the load yourself (e.g. 10s, 500ms).
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub duration: Duration,
    /// Divide by this many requests (what your load tool reported for the window).
    #[arg(long)]
    pub per: Option<u64>,
    /// Drive the load from rig: a loopback http:// or https:// URL; the
    /// window is then exactly --requests requests after a warm-up.
    #[arg(long)]
    pub drive: Option<String>,
    /// --drive protocol: h1, h2c or h2 (over TLS). Default: h1 for http://,
    /// h2 for https://.
    #[arg(long, requires = "drive")]
    pub protocol: Option<String>,
    /// --drive over HTTP/1.1: a new TCP connection for every request.
    #[arg(long, requires = "drive")]
    pub new_connection: bool,
    /// --drive over HTTP/2: concurrent streams per connection.
    #[arg(long, default_value_t = 1)]
    pub streams: usize,
    /// --drive https://: the CA (PEM) that signed the server's certificate.
    #[arg(long, requires = "drive")]
    pub ca: Option<PathBuf>,
    /// --drive https://: the name to verify and send as SNI (default: the URL's host).
    #[arg(long, requires = "drive")]
    pub server_name: Option<String>,
    /// --drive https://: accept any certificate (a self-signed one included); said in the report.
    #[arg(long, requires = "drive")]
    pub insecure: bool,
    /// Requests in a driven window.
    #[arg(long, default_value_t = 2000)]
    pub requests: u64,
    /// Keep-alive connections for a driven window.
    #[arg(long, default_value_t = 2)]
    pub connections: usize,
    /// Warm-up requests before a driven window.
    #[arg(long, default_value_t = crate::window::WarmUp::ATTACH_DEFAULT)]
    pub warmup: u64,
    /// Measure the process tree rooted at --pid: every descendant, and every
    /// process forked during the session (prefork servers: nginx, Apache,
    /// PostgreSQL). The default when --pid has children.
    #[arg(long, overrides_with = "no_tree")]
    pub tree: bool,
    /// Measure --pid alone even when it has children.
    #[arg(long, overrides_with = "tree")]
    pub no_tree: bool,
    #[command(flatten)]
    pub common: Common,
    /// `-- COMMAND ARGS...`: the load. The window opens before it starts and
    /// closes when it exits (--duration is then unused); without --per, the
    /// request count is read from the output of wrk, h2load, oha and
    /// redis-benchmark.
    #[arg(last = true)]
    pub command: Vec<String>,
}

#[derive(Args, Debug)]
pub struct ProbeCostArgs {
    /// Loop iterations per run.
    #[arg(long, default_value_t = 50_000)]
    pub iterations: u64,
    /// A B B A rounds per probe kind.
    #[arg(long, default_value_t = 2)]
    pub rounds: usize,
    /// Also write the measurements as JSON.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct DemoArgs {
    /// Requests in the window.
    #[arg(long, default_value_t = 2000)]
    pub requests: u64,
    /// Keep-alive connections.
    #[arg(long, default_value_t = 2)]
    pub connections: usize,
    #[command(flatten)]
    pub common: Common,
}

fn settings(a: &AttachArgs) -> Result<AttachSettings> {
    let families = Family::parse_list(&a.common.probes)?;
    if a.per == Some(0) {
        bail!("--per 0: give the number of requests your load tool completed in the window");
    }
    let drive = match &a.drive {
        Some(url) => {
            if a.per.is_some() {
                bail!("--per and --drive together: with --drive rig counts the requests itself; drop --per");
            }
            if !a.command.is_empty() {
                bail!("--drive and a load command together: give one load, rig's (--drive) or yours (-- COMMAND)");
            }
            if a.requests == 0 || a.connections == 0 || a.streams == 0 {
                bail!("--requests, --connections and --streams must be at least 1");
            }
            let choice = DriveChoice {
                protocol: a.protocol.clone(),
                new_connection: a.new_connection,
                ca: a.ca.clone(),
                server_name: a.server_name.clone(),
                insecure: a.insecure,
                connections: a.connections,
                streams: a.streams,
            };
            Some(Drive::new(url, &choice, a.warmup, a.requests)?)
        }
        None => None,
    };
    Ok(AttachSettings {
        pid: a.pid,
        families,
        duration: a.duration,
        per: a.per,
        drive,
        command: a.command.clone(),
        tree: match (a.tree, a.no_tree) {
            (true, _) => Some(true),
            (_, true) => Some(false),
            _ => None,
        },
        wrappers: a.common.wrappers.clone(),
    })
}

fn output(a: &Attribution, common: &Common) -> Result<i32> {
    print!("{}", table::render(a, common.top));
    if let Some(path) = &common.json {
        let f = crate::fsutil::create_new(path).context("--json")?;
        serde_json::to_writer_pretty(std::io::BufWriter::new(f), a)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(dir) = &common.flame {
        let files = crate::flamegraph::write_window(dir, a)?;
        println!("flamegraphs: {} ({} files)", dir.display(), files.len());
    }
    Ok(if a.complete {
        exit::OK
    } else {
        exit::INCOMPLETE
    })
}

/// The load may open as many connections as the matrix check allowed.
fn raise_nofile() {
    if let Some(n) = crate::scenario::raise_nofile() {
        eprintln!(
            "rig: raised the open-file limit (RLIMIT_NOFILE) to {n} for the load's connections"
        );
    }
}

/// An output file flag, refused now (exit 2) rather than after the work:
/// it must be a new path (no file, no symlink) in an existing directory.
fn new_output_file(flag: &str, path: &Option<PathBuf>) -> Result<()> {
    if let Some(p) = path {
        crate::fsutil::check_new_file(flag, p)
            .map_err(|m| anyhow::Error::new(crate::usage::BadValue(m)))?;
    }
    Ok(())
}

/// An output directory flag, refused now (exit 2) when it exists.
fn new_output_dir(flag: &str, path: &Option<PathBuf>) -> Result<()> {
    match path {
        Some(p) if std::fs::symlink_metadata(p).is_ok() => {
            Err(anyhow::Error::new(crate::usage::BadValue(format!(
                "{flag} {}: already exists; give a new directory",
                p.display()
            ))))
        }
        _ => Ok(()),
    }
}

fn stop_flag() -> Result<Arc<AtomicBool>> {
    crate::interrupt::install(|| {
        let n = crate::launch::start::cleanup_all();
        if n > 0 {
            eprintln!("rig: interrupted: stopped {n} target(s) rig had started");
        }
    })
    .context("installing signal handlers")
}

fn cpu_list(flag: &str, v: &Option<String>) -> Result<Option<Vec<usize>>> {
    v.as_ref()
        .map(|s| {
            crate::launch::start::parse_cpu_list(s).ok_or_else(|| {
                anyhow::anyhow!("{flag} {s}: give CPUs as a list like 0 or 1,3 or 2-3")
            })
        })
        .transpose()
}

fn run_settings(a: &RunArgs) -> Result<crate::run::RunSettings> {
    let (server_cpus, client_cpus) = a.budget.cpus()?;
    let passes = crate::run::Passes::parse(&a.passes).map_err(anyhow::Error::msg)?;
    let families = if a.probes == "none" {
        Vec::new()
    } else {
        Family::parse_list(&a.probes)?
    };
    if a.repeats == Some(0) {
        crate::refuse!("--repeats 0: give at least 1 round");
    }
    let mut targets = a
        .target
        .iter()
        .map(|t| load_target(t).with_context(|| format!("--target {}", t.display())))
        .collect::<Result<Vec<_>>>()?;
    for (spec, tls) in &mut targets {
        a.budget.apply_user(spec)?;
        if let Some(t) = tls {
            a.budget.apply_user(t)?;
        }
    }
    let matrix = crate::scenario::Matrix::load(&a.matrix)?;
    raise_nofile();
    Ok(crate::run::RunSettings {
        targets,
        matrix_path: a.matrix.clone(),
        matrix,
        suites: a.suite.clone(),
        out: a.out.clone(),
        families,
        passes,
        repeats: a.repeats,
        server_cpus,
        client_cpus,
        spin: a
            .budget
            .spin_us
            .map(|us| std::time::Duration::from_nanos((us * 1e3) as u64)),
        memory_mib: a.budget.memory_mib,
        cpu_quota: a.budget.cpu_quota,
        argv: std::env::args().collect(),
        verify_arms: false,
    })
}

fn gate_settings(a: &GateArgs) -> Result<crate::gate::GateSettings> {
    let baseline = crate::gate::Baseline::load(&a.baseline)?;
    if !Family::parse_list(&baseline.probes)?.is_empty() {
        crate::probe::require_root()?;
    }
    Ok(crate::gate::GateSettings {
        baseline_path: a.baseline.clone(),
        baseline,
        target_override: a.target.clone(),
        out: a.out.clone(),
        argv: std::env::args().collect(),
        blessing: a.bless,
    })
}

fn ab_settings(a: &AbArgs) -> Result<crate::ab::AbSettings> {
    let (server_cpus, client_cpus) = a.budget.cpus()?;
    let mut arms = Vec::new();
    for arg in &a.arms {
        let (name, file) = arg.split_once('=').ok_or_else(|| {
            anyhow::anyhow!(
                "--arm {arg}: write NAME=TARGET_SPEC, e.g. --arm A=config/targets/calib-dyn-a.toml"
            )
        })?;
        if arms.iter().any(|x: &crate::ab::Arm| x.name == name) {
            bail!("--arm {name}: two arms with one name");
        }
        let (mut spec, mut tls) = load_target(std::path::Path::new(file))
            .with_context(|| format!("--arm {name}={file}"))?;
        a.budget.apply_user(&mut spec)?;
        if let Some(t) = &mut tls {
            a.budget.apply_user(t)?;
        }
        arms.push(crate::ab::Arm {
            name: name.to_string(),
            spec,
            tls,
        });
    }
    if arms.len() < 2 {
        bail!("--arm: give at least two arms (--arm A=FILE --arm B=FILE)");
    }
    if a.rounds == 0 {
        crate::refuse!("--rounds 0: give at least one A B B A round");
    }
    raise_nofile();
    let families = if a.probes == "none" {
        Vec::new()
    } else {
        Family::parse_list(&a.probes)?
    };
    Ok(crate::ab::AbSettings {
        arms,
        matrix_path: a.matrix.clone(),
        matrix: crate::scenario::Matrix::load(&a.matrix)?,
        suites: a.suite.clone(),
        controls: a.control.clone(),
        rounds: a.rounds,
        out: a.out.clone(),
        families,
        passes: crate::run::Passes::parse(&a.passes).map_err(anyhow::Error::msg)?,
        server_cpus,
        client_cpus,
        memory_mib: a.budget.memory_mib,
        cpu_quota: a.budget.cpu_quota,
        masks: a.masks.clone(),
        argv: std::env::args().collect(),
    })
}

/// Validate one config file: a matrix (it has `[[suite]]`) or a target spec.
fn check_config(path: &std::path::Path) -> Result<i32> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    // A matrix has suites or defaults; a target spec has neither.
    if text.contains("[[suite]]") || text.contains("[defaults]") {
        match crate::scenario::Matrix::load(path) {
            Ok(m) => {
                println!(
                    "{}: a valid matrix with {} suites",
                    path.display(),
                    m.suites.len()
                );
                Ok(exit::OK)
            }
            Err(e) => {
                eprintln!("{e}");
                Ok(exit::ERROR)
            }
        }
    } else {
        match crate::launch::spec::check_config(path) {
            Ok(summary) => {
                println!("{summary}");
                Ok(exit::OK)
            }
            Err(errors) => {
                for e in &errors {
                    eprintln!("{e}");
                }
                Ok(exit::ERROR)
            }
        }
    }
}

/// Parse flags and run; returns the exit code.
pub fn run() -> Result<i32> {
    let cli = Cli::parse();
    // Every command obeys SIGINT/SIGTERM at once (exit 130), not only those
    // that look at the flag themselves.
    stop_flag()?;
    match cli.command {
        Cmd::Attach(a) => {
            let s = settings(&a)?;
            new_output_file("--json", &a.common.json)?;
            new_output_dir("--flame", &a.common.flame)?;
            let stop = stop_flag()?;
            let attribution = session::run_attach(&s, &stop)?;
            output(&attribution, &a.common)
        }
        Cmd::ProbeCost(p) => probe_cost(&p),
        Cmd::Run(a) => run_matrix(&a),
        Cmd::CheckConfig(c) => check_config(&c.file),
        Cmd::Instructions(a) => instructions(&a),
        Cmd::Ab(a) => ab(&a),
        Cmd::Gate(g) => {
            let s = gate_settings(&g)?;
            let code = crate::gate::command(&s, &*stop_flag()?)?;
            if let Some(d) = &s.out {
                print_report_path(d);
            }
            Ok(code)
        }
        Cmd::Report(r) => {
            let p = crate::html::write(&r.dir)?;
            println!("report: {}", p.display());
            Ok(exit::OK)
        }
        Cmd::Flame(a) => flame(&a),
        Cmd::Demo(d) => demo(&d),
    }
}

/// `rig probe-cost`.
fn probe_cost(p: &ProbeCostArgs) -> Result<i32> {
    crate::probe::require_root()?;
    new_output_file("--json", &p.json)?;
    let rows = crate::probe::cost::measure(p.iterations, p.rounds)?;
    println!("{}", crate::probe::cost::render(&rows));
    if let Some(path) = &p.json {
        crate::fsutil::write_new(path, &serde_json::to_vec_pretty(&rows)?).context("--json")?;
    }
    Ok(exit::OK)
}

/// `rig run`: exit 130 when interrupted, 6 when a case failed or nothing
/// was measured.
fn run_matrix(a: &RunArgs) -> Result<i32> {
    let s = run_settings(a)?;
    if !s.families.is_empty() && s.passes.counted {
        crate::probe::require_root()?;
    }
    let stop = stop_flag()?;
    let results = crate::run::run(&s, &stop)?;
    println!("{}", crate::run::table::render(&results));
    let counted = results
        .iter()
        .filter_map(|r| Some((r.case.id.as_str(), &r.counted.as_ref()?.attribution)));
    print!("{}", crate::flamegraph::top_sites(counted, 3));
    let flames = crate::flamegraph::write_cases(&s.out)?;
    print!("{}", crate::flamegraph::where_written(&s.out, &flames));
    // After the flamegraphs: the page embeds them.
    crate::html::write_or_warn(&s.out);
    println!("results: {}", s.out.display());
    print_report_path(&s.out);
    let failed = results
        .iter()
        .any(|r| r.status == crate::run::Status::Failed);
    let measured = results.iter().any(|r| r.status.measured());
    if !measured && !failed {
        eprintln!(
            "rig: nothing was measured: all {} case(s) were skipped (see the reasons above and in {}/report.json)",
            results.len(),
            s.out.display()
        );
    }
    Ok(if stop.load(std::sync::atomic::Ordering::Relaxed) {
        exit::INTERRUPTED
    } else if failed || !measured {
        exit::CASE_FAILED
    } else {
        exit::OK
    })
}

/// `rig ab`.
fn ab(a: &AbArgs) -> Result<i32> {
    let s = ab_settings(a)?;
    if !s.families.is_empty() && s.passes.counted {
        crate::probe::require_root()?;
    }
    let stop = stop_flag()?;
    let report = crate::ab::run(&s, &stop)?;
    print!("{}", crate::ab::render(&report));
    let flames = crate::flamegraph::write_ab(&s.out, &report.arms)?;
    print!("{}", crate::flamegraph::where_written(&s.out, &flames));
    // After the flamegraphs: the page embeds them.
    crate::html::write_or_warn(&s.out);
    println!("results: {}", s.out.display());
    print_report_path(&s.out);
    if !report.measured && !report.interrupted {
        eprintln!("rig ab: {}", report.verdict);
    }
    Ok(if report.interrupted {
        exit::INTERRUPTED
    } else if !report.failed_runs.is_empty() || !report.measured {
        exit::CASE_FAILED
    } else {
        exit::OK
    })
}

/// `rig demo`: the calibration server, driven and attributed.
fn demo(d: &DemoArgs) -> Result<i32> {
    new_output_file("--json", &d.common.json)?;
    new_output_dir("--flame", &d.common.flame)?;
    let mut cmd = std::process::Command::new(rig_fixtures::calib_server());
    cmd.args(["--port", "0", "--threads", "2", "--contend"]);
    let target = session::Child::spawn_ready(cmd)?;
    eprintln!(
        "rig demo: calibration server pid {} on 127.0.0.1:{} (costs per request: fixtures/calib/COSTS.md)",
        target.pid(),
        target.port
    );
    let s = AttachSettings {
        pid: target.pid(),
        families: Family::parse_list(&d.common.probes)?,
        duration: Duration::ZERO,
        per: None,
        drive: Some(Drive::h1(
            &format!("http://127.0.0.1:{}/calib", target.port),
            d.connections,
            crate::window::WarmUp::ATTACH_DEFAULT,
            d.requests,
        )?),
        command: Vec::new(),
        tree: None,
        wrappers: d.common.wrappers.clone(),
    };
    let stop = stop_flag()?;
    let attribution = session::run_attach(&s, &stop)?;
    drop(target);
    output(&attribution, &d.common)
}

/// Map an error to its documented exit code.
pub fn exit_code(err: &anyhow::Error) -> i32 {
    match err.downcast_ref::<ProbeError>() {
        Some(
            ProbeError::NotRoot { .. }
            | ProbeError::SelfTarget { .. }
            | ProbeError::KernelThread { .. },
        ) => exit::PERMISSION,
        Some(ProbeError::NoSuchProcess { .. } | ProbeError::Zombie { .. }) => exit::NO_PROCESS,
        Some(ProbeError::MapsUnreadable { .. }) => exit::PERMISSION,
        Some(ProbeError::UnknownFamily(_)) => exit::USAGE,
        _ if err.downcast_ref::<crate::usage::BadValue>().is_some() => exit::USAGE,
        _ if err.downcast_ref::<crate::scenario::MatrixError>().is_some() => exit::USAGE,
        _ if matches!(
            err.downcast_ref::<crate::launch::SpecError>(),
            Some(crate::launch::SpecError::Invalid(_))
        ) =>
        {
            exit::USAGE
        }
        _ if err.downcast_ref::<crate::gate::RunsFailed>().is_some() => exit::CASE_FAILED,
        _ => exit::ERROR,
    }
}

fn spin_us(v: &str) -> Result<f64, String> {
    match v.parse::<f64>() {
        Ok(us) if us.is_finite() && (0.0..=100_000.0).contains(&us) => Ok(us),
        _ => Err(format!(
            "`{v}` is not a spin window; give µs from 0 to 100000 (e.g. 60)"
        )),
    }
}
