//! The flags of every command (clap), each with what it means.

use super::*;

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
    /// Result directories over builds side by side: every metric's series, its noise band, its steps and their commits.
    Compare(CompareArgs),
    /// The first commit between a good and a bad one where a counter moved (builds in a temporary worktree; exit 8 when it stops at an ambiguous commit).
    Bisect(BisectArgs),
    /// Which functions two builds of an ELF file (executables or shared objects) add, remove, change or rename.
    Funcdiff(FuncdiffArgs),
    /// What a running process offers to probe by name: its USDT markers and, for a pattern, its functions (like `bpftrace -l`).
    Probes(ProbesArgs),
}

#[derive(Args, Debug)]
pub struct ProbesArgs {
    /// The process.
    #[arg(long)]
    pub pid: u32,
    /// A glob over `PROVIDER:NAME` and `FILE:PROVIDER:NAME` of markers and `NAME` and `FILE!NAME` of functions (`postgresql:query__*`, `libc.so.6!mem*`); without it, every marker.
    pub pattern: Option<String>,
}

#[derive(Args, Debug)]
pub struct FuncdiffArgs {
    /// The first build (the old one).
    pub a: PathBuf,
    /// The second build (the new one).
    pub b: PathBuf,
    /// Also write the diff as JSON here (a new file).
    #[arg(long)]
    pub json: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct CompareArgs {
    /// Result directories of rig run, rig ab or rig gate, oldest build first.
    #[arg(required = true, num_args = 1..)]
    pub dirs: Vec<PathBuf>,
    /// Also write the comparison as JSON here (a new file).
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Also write its page here (a new file): each metric's series as a
    /// chart with its band and steps, self-contained.
    #[arg(long)]
    pub html: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct BisectArgs {
    /// The git repository (its work tree is never touched: commits are checked out in a temporary worktree).
    #[arg(long)]
    pub repo: PathBuf,
    /// Shell command that builds a commit, run in the worktree's top directory (`sh -c`).
    #[arg(long)]
    pub build: String,
    /// Target spec; its paths inside --repo are moved into the worktree.
    #[arg(long)]
    pub target: PathBuf,
    /// A commit where the counter has its old value.
    #[arg(long)]
    pub good: String,
    /// A commit, descending from --good, where it has moved.
    #[arg(long)]
    pub bad: String,
    /// The counter, as rig compare names it: an exact one (allocs/req, syscalls/req, `malloc calls @ FUNCTION`,
    /// `syscall NAME`) or a timing metric (rps, `latency p99 µs`, `server CPU µs/req`...).
    #[arg(long)]
    pub counter: String,
    /// Windows per commit, each in a fresh server (default: 1 for an exact counter, 5 for a timing metric,
    /// whose noise band comes from them; at least 2 there).
    #[arg(long)]
    pub repeats: Option<u32>,
    /// Probe families of the counted window.
    #[arg(long, default_value = "syscalls,alloc")]
    pub probes: String,
    /// Requests of each counted window.
    #[arg(long, default_value_t = 200)]
    pub requests: u64,
    /// Matrix of the one case measured (default: one h1 connection on the spec's first endpoint).
    #[arg(long)]
    pub matrix: Option<PathBuf>,
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

#[derive(Args, Debug)]
pub struct ReportArgs {
    /// The output directory (it has cases.jsonl); report.html is written into it.
    pub dir: PathBuf,
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
    /// Run the server as this user (name or uid), overriding the spec's
    /// `user`; rig drops to it after setting up the cgroup and pinning.
    #[arg(long)]
    pub user: Option<String>,
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
    /// Run the server as this user (name or uid), overriding the spec's `user`.
    #[arg(long)]
    pub user: Option<String>,
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
    /// Soak suites run this long (e.g. 30m, 2h) instead of their
    /// duration_ms; each still needs two whole intervals.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub soak_duration: Option<std::time::Duration>,
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
    /// A request not answered within this long fails as `timeout` (e.g.
    /// 2s; default 10s), overriding every suite's `request_timeout_ms`.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub request_timeout: Option<Duration>,
    /// A case not finished this long after it started is cut and fails
    /// (e.g. 5m), overriding every suite's `case_timeout_ms` (default: 5
    /// minutes plus twice the case's warm-up and duration).
    #[arg(long, value_parser = humantime::parse_duration)]
    pub case_timeout: Option<Duration>,
}

impl Budget {
    /// `--request-timeout` and `--case-timeout` in ms, checked (exit 2).
    pub(super) fn timeouts(&self) -> Result<(Option<u64>, Option<u64>)> {
        Ok((
            time_ms("--request-timeout", self.request_timeout)?,
            time_ms("--case-timeout", self.case_timeout)?,
        ))
    }
}

/// A time flag in whole ms: at least 1 ms, at most a year (exit 2
/// otherwise: a zero never lets anything finish, a huge one overflows the
/// deadline it sets).
pub(super) fn time_ms(flag: &str, d: Option<Duration>) -> Result<Option<u64>> {
    let Some(d) = d else { return Ok(None) };
    let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    if ms == 0 {
        crate::refuse!(
            "{flag} {}: give at least 1ms",
            humantime::format_duration(d)
        );
    }
    if ms > crate::scenario::MAX_MS {
        crate::refuse!(
            "{flag} {}: more than a year; give a time a run can wait out",
            humantime::format_duration(d)
        );
    }
    Ok(Some(ms))
}

impl Budget {
    /// `--user` over each spec's own `user` (checked now: exit 2).
    pub(super) fn apply_user(&self, spec: &mut TargetSpec) -> Result<()> {
        apply_user(self.user.as_deref(), spec)
    }
}

/// `--user U` over a spec's own `user` (U checked now: exit 2).
pub(crate) fn apply_user(user: Option<&str>, spec: &mut TargetSpec) -> Result<()> {
    if let Some(u) = user {
        check_user(u)?;
        spec.user = Some(u.to_string());
        spec.group = None;
    }
    Ok(())
}

/// `--user U` names a user this host has (exit 2 otherwise).
pub(crate) fn check_user(u: &str) -> Result<()> {
    crate::launch::user::resolve(u, None)
        .map(|_| ())
        .map_err(|m| anyhow::Error::new(crate::usage::BadValue(format!("--user: {m}"))))
}

impl Budget {
    /// The server and client CPU sets, checked disjoint, and the quota checked.
    #[allow(clippy::type_complexity)]
    pub(super) fn cpus(&self) -> Result<(Option<Vec<usize>>, Option<Vec<usize>>)> {
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
        // A limit above what the host has is no limit (and u64::MAX MiB in
        // bytes overflowed into one that looked set).
        if let (Some(m), Some(total)) = (self.memory_mib, host_memory_mib()) {
            if m > total {
                return Err(format!(
                    "--memory-mib {m}: more than this host's memory ({total} MiB); give at most {total}, or leave it out for no limit"
                ));
            }
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

/// MemTotal of /proc/meminfo, in MiB.
fn host_memory_mib() -> Option<u64> {
    let m = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib: u64 = m
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))?
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse()
        .ok()?;
    Some(kib / 1024)
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
    /// Process to attach to (all its threads are covered). Several pids
    /// (`$(pidof apache2)`) are refused with the one whose tree holds the
    /// others; a thread id is measured as its process, and said so.
    #[arg(long, num_args = 1.., required = true)]
    pub pid: Vec<u32>,
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
    /// --drive protocol: h1, h2c, h2 (over TLS) or h3 (over QUIC, to the
    /// UDP port of the URL's number). Default: h1 for http://, h2 for
    /// https://.
    #[arg(long, requires = "drive")]
    pub protocol: Option<String>,
    /// --drive over HTTP/1.1: a new TCP connection for every request.
    #[arg(long, requires = "drive")]
    pub new_connection: bool,
    /// --drive over HTTP/2 or HTTP/3: concurrent streams per connection.
    #[arg(long, default_value_t = 1)]
    pub streams: usize,
    /// --drive: a request not answered within this long fails as `timeout`
    /// (default 10s); connects and TLS handshakes are bounded by it too.
    #[arg(long, requires = "drive", value_parser = humantime::parse_duration)]
    pub request_timeout: Option<Duration>,
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
    /// With the alloc probes: also report the live heap, every block
    /// allocated in the window and not freed by its end, by call site
    /// (uretprobes on the allocators: dearer than the entry probes alone).
    #[arg(long)]
    pub live_heap: bool,
    /// Count a USDT marker per request, by call site and whole stack:
    /// `[BINARY:]PROVIDER:NAME` (`*` and `?` glob; `rig probes --pid P`
    /// lists them); `@N` also sums its argument N (from 0). Repeatable.
    #[arg(long, value_name = "[BINARY:]PROVIDER:NAME[@N]")]
    pub usdt: Vec<String>,
    /// Count calls of the functions a glob names, per request, by caller
    /// and whole stack: `[MODULE!]PATTERN` over names as reports print
    /// them (e.g. `ngx_http_core_run_phases`, `libc.so.6!mem*`). Repeatable.
    #[arg(long, value_name = "[MODULE!]PATTERN")]
    pub func: Vec<String>,
    /// With --func: also the time inside each function per request, from
    /// a return probe (the outermost call of a recursion, per thread).
    /// Refused for Go code, where a return probe breaks the program.
    #[arg(long)]
    pub func_time: bool,
    /// Count a function of the server's own as an allocator (its pools, an
    /// arena), with the alloc probes: its calls and bytes per request by
    /// call site, as a layer beside the heap's. `@N`: its size is argument
    /// N (from 0); without it, calls are counted unsized. haproxy's,
    /// APR's, nginx's, PostgreSQL's and glib's are known without it.
    /// Repeatable.
    #[arg(long, value_name = "[MODULE!]NAME[@N]")]
    pub alloc_func: Vec<String>,
    /// The free of a declared allocator (`--alloc-func`). Repeatable.
    #[arg(long, value_name = "[MODULE!]NAME")]
    pub free_func: Vec<String>,
    /// Count every call of an interpreted function per request, by the
    /// function: `python` (CPython 3.11, whose own call marker fires only
    /// under a profiler), at the interpreter's handler of a call's first
    /// instruction (each Python call and generator step a uprobe hit).
    #[arg(long, value_name = "LANGUAGE")]
    pub interp_calls: Vec<String>,
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
    /// Rounds per probe kind; each round runs clean, probed, probed with
    /// stacks, then the same three in reverse (A B C C B A), a fresh
    /// process each run.
    #[arg(long, default_value_t = 2)]
    pub rounds: usize,
    /// Also write the measurements as JSON.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Measure rig's probes on free, the memcpy implementation and
    /// pthread_mutex_lock side by side with a bpftrace uprobe on the same
    /// functions, in the same rounds (needs bpftrace).
    #[arg(long)]
    pub against_bpftrace: bool,
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

pub(super) fn spin_us(v: &str) -> Result<f64, String> {
    match v.parse::<f64>() {
        Ok(us) if us.is_finite() && (0.0..=100_000.0).contains(&us) => Ok(us),
        _ => Err(format!(
            "`{v}` is not a spin window; give µs from 0 to 100000 (e.g. 60)"
        )),
    }
}
