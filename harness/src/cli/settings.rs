//! Flags turned into each command's settings, refused up front (exit 2)
//! when they cannot work.

use super::*;
use crate::probe::user::Named;

/// A target spec and its TLS variant, if it names one.
pub(super) fn load_target(file: &std::path::Path) -> Result<(TargetSpec, Option<TargetSpec>)> {
    let spec = TargetSpec::load(file).with_context(|| format!("target spec {}", file.display()))?;
    user_probes(crate::named_probes!(spec))
        .with_context(|| format!("target spec {}", file.display()))?;
    let tls = match &spec.tls_variant {
        Some(p) => Some(
            TargetSpec::load(p).with_context(|| format!("tls_variant of {}", file.display()))?,
        ),
        None => None,
    };
    Ok((spec, tls))
}

/// The most concurrent streams one HTTP/2 connection of rig's may carry
/// (`SETTINGS_MAX_CONCURRENT_STREAMS` is rarely above a few hundred).
const MAX_STREAMS: usize = 1 << 16;

/// `n` connections fit in the file descriptors rig may open (exit 2
/// otherwise, before any is opened).
pub(super) fn check_connections(flag: &str, n: usize) -> Result<()> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: r is a valid out-pointer.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } != 0
        || r.rlim_max == libc::RLIM_INFINITY
    {
        return Ok(());
    }
    if n as u64 + 64 > r.rlim_max {
        crate::refuse!(
            "{flag} {n}: more connections than this process may open (RLIMIT_NOFILE hard limit {}, 64 kept for rig); give fewer or raise the limit (ulimit -Hn)",
            r.rlim_max
        );
    }
    Ok(())
}

pub(super) fn settings(a: &AttachArgs) -> Result<AttachSettings> {
    let pid = one_pid(&a.pid)?;
    let families = Family::parse_list(&a.common.probes)?;
    // A window of no time measures nothing; one of years overflows the
    // instant it ends at.
    if a.duration.is_zero() {
        crate::refuse!("--duration 0s: give the window's length, e.g. 10s");
    }
    time_ms("--duration", Some(a.duration))?;
    if a.live_heap && !families.contains(&Family::Alloc) {
        crate::refuse!(
            "--live-heap without the alloc probes: add alloc to --probes (e.g. --probes alloc --live-heap)"
        );
    }
    if a.per == Some(0) {
        crate::refuse!(
            "--per 0: give the number of requests your load tool completed in the window"
        );
    }
    let drive = match &a.drive {
        Some(url) => {
            if a.per.is_some() {
                crate::refuse!("--per and --drive together: with --drive rig counts the requests itself; drop --per");
            }
            if !a.command.is_empty() {
                crate::refuse!("--drive and a load command together: give one load, rig's (--drive) or yours (-- COMMAND)");
            }
            if a.requests == 0 || a.connections == 0 || a.streams == 0 {
                crate::refuse!("--requests, --connections and --streams must be at least 1");
            }
            check_connections("--connections", a.connections)?;
            if a.streams > MAX_STREAMS {
                crate::refuse!(
                    "--streams {}: more than the {MAX_STREAMS} concurrent streams an HTTP/2 connection may have; give fewer",
                    a.streams
                );
            }
            let choice = DriveChoice {
                protocol: a.protocol.clone(),
                new_connection: a.new_connection,
                ca: a.ca.clone(),
                server_name: a.server_name.clone(),
                insecure: a.insecure,
                connections: a.connections,
                streams: a.streams,
                request_timeout: time_ms("--request-timeout", a.request_timeout)?
                    .map(std::time::Duration::from_millis),
            };
            Some(Drive::new(url, &choice, a.warmup, a.requests)?)
        }
        None => None,
    };
    let named = crate::named_probes!(a);
    let user_probes = user_probes(named)?;
    if named.declares_allocators() && !families.contains(&Family::Alloc) {
        crate::refuse!(
            "--alloc-func/--free-func without the alloc probes, which count them: add alloc to \
             --probes (e.g. --probes alloc --alloc-func arena_alloc@0)"
        );
    }
    Ok(AttachSettings {
        pid,
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
        // A declared allocator is past the user site, as malloc is.
        wrappers: a
            .common
            .wrappers
            .iter()
            .cloned()
            .chain(user_probes.iter().filter_map(|p| match p {
                UserProbe::Alloc { name, .. } => name.rsplit('!').next().map(str::to_string),
                _ => None,
            }))
            .collect(),
        live_heap: a.live_heap,
        user_probes,
    })
}

/// `--usdt` and `--func` as written, each checked for its form (what they
/// match is checked against the process when the probes go in).
pub(super) fn user_probes(named: Named<'_>) -> Result<Vec<UserProbe>> {
    UserProbe::of_spec(named).map_err(|e| anyhow::anyhow!("--{e}"))
}

/// A matrix's `[probes]`, checked for their form.
fn matrix_probes(m: &crate::scenario::Matrix, path: &std::path::Path) -> Result<()> {
    let p = &m.probes;
    user_probes(crate::named_probes!(p))
        .with_context(|| format!("[probes] of {}", path.display()))?;
    Ok(())
}

/// `--pid P`: one process. Several (`--pid $(pidof apache2)`) are refused,
/// naming the one whose process tree holds the others when there is one.
fn one_pid(pids: &[u32]) -> Result<u32> {
    let (&first, rest) = pids.split_first().context("--pid needs a process id")?;
    if rest.is_empty() {
        return Ok(first);
    }
    let list = pids
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(" ");
    let root = pids.iter().copied().find(|&p| {
        let below = crate::process::descendants(p);
        pids.iter().all(|q| *q == p || below.contains(q))
    });
    match root {
        Some(p) => crate::refuse!(
            "--pid {list}: rig attaches to one process; {p} ({}) is the parent of the others: \
             give --pid {p} --tree to measure them all",
            crate::process::cmdline(p)
        ),
        None => crate::refuse!(
            "--pid {list}: rig attaches to one process (with --tree, to it and its descendants); \
             these {} are not one tree: give one of them",
            pids.len()
        ),
    }
}

pub(super) fn cpu_list(flag: &str, v: &Option<String>) -> Result<Option<Vec<usize>>> {
    v.as_ref()
        .map(|s| {
            crate::launch::start::parse_cpu_list(s).ok_or_else(|| {
                anyhow::anyhow!("{flag} {s}: give CPUs as a list like 0 or 1,3 or 2-3")
            })
        })
        .transpose()
}

pub(super) fn run_settings(a: &RunArgs) -> Result<crate::run::RunSettings> {
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
    let mut matrix = crate::scenario::Matrix::load(&a.matrix)?;
    matrix_probes(&matrix, &a.matrix)?;
    time_ms("--soak-duration", a.soak_duration)?;
    if let Some(d) = a.soak_duration {
        if let Err(why) = matrix.set_soak_duration(d.as_millis() as u64) {
            crate::refuse!("--soak-duration {}: {why}", humantime::format_duration(d));
        }
    }
    let (request_ms, case_ms) = a.budget.timeouts()?;
    matrix.set_timeouts(request_ms, case_ms);
    // Counted now, before anything is allocated or started.
    let repeats = a.repeats.unwrap_or(matrix.defaults.repeats).max(1);
    matrix
        .case_count(&a.suite, targets.len(), repeats)
        .with_context(|| format!("--matrix {}", a.matrix.display()))?;
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

pub(super) fn bisect_settings(a: &BisectArgs) -> Result<crate::bisect::BisectSettings> {
    let families = Family::parse_list(&a.probes)?;
    if families.is_empty() {
        crate::refuse!(
            "--probes {}: give the families the counter needs (alloc, syscalls...)",
            a.probes
        );
    }
    if a.requests == 0 {
        crate::refuse!("--requests 0: give at least 1 request per window");
    }
    let (kind, _) = crate::compare::read::kind_of(&a.counter);
    let timing = kind == crate::compare::series::Kind::Timing;
    let repeats = a.repeats.unwrap_or(if timing { 5 } else { 1 });
    match repeats {
        0 => crate::refuse!("--repeats 0: give at least 1 window per commit"),
        1 if timing => crate::refuse!(
            "--repeats 1: `{}` is a timing metric, whose noise band comes from the repeats of \
             each end; give --repeats 2 or more (default 5)",
            a.counter
        ),
        _ => {}
    }
    let Some(repo) = crate::gitfacts::git(&a.repo, &["rev-parse", "--show-toplevel"]) else {
        crate::refuse!(
            "--repo {}: not a git work tree; give the repository's directory",
            a.repo.display()
        );
    };
    if let Err(e) = std::fs::metadata(&a.target) {
        crate::refuse!(
            "--target {}: {e}; give the target spec file",
            a.target.display()
        );
    }
    Ok(crate::bisect::BisectSettings {
        repo: std::path::PathBuf::from(repo),
        build: a.build.clone(),
        target: a.target.clone(),
        good: a.good.clone(),
        bad: a.bad.clone(),
        counter: a.counter.clone(),
        matrix: a.matrix.clone(),
        families,
        requests: a.requests,
        repeats,
        argv: std::env::args().collect(),
    })
}

pub(super) fn gate_settings(a: &GateArgs) -> Result<crate::gate::GateSettings> {
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
        user: match &a.user {
            Some(u) => {
                super::args::check_user(u)?;
                Some(u.clone())
            }
            None => None,
        },
    })
}

pub(super) fn ab_settings(a: &AbArgs) -> Result<crate::ab::AbSettings> {
    let (server_cpus, client_cpus) = a.budget.cpus()?;
    let mut arms = Vec::new();
    for arg in &a.arms {
        let (name, file) = arg.split_once('=').ok_or_else(|| {
            anyhow::anyhow!(
                "--arm {arg}: write NAME=TARGET_SPEC, e.g. --arm A=config/targets/calib-dyn-a.toml"
            )
        })?;
        if arms.iter().any(|x: &crate::ab::Arm| x.name == name) {
            crate::refuse!("--arm {name}: two arms with one name");
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
        crate::refuse!("--arm: give at least two arms (--arm A=FILE --arm B=FILE)");
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
    let mut matrix = crate::scenario::Matrix::load(&a.matrix)?;
    matrix_probes(&matrix, &a.matrix)?;
    let (request_ms, case_ms) = a.budget.timeouts()?;
    matrix.set_timeouts(request_ms, case_ms);
    Ok(crate::ab::AbSettings {
        arms,
        matrix_path: a.matrix.clone(),
        matrix,
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

/// Where `rig attach` and `rig demo` write their window besides the terminal.
pub(super) fn output(c: &Common) -> Output {
    Output {
        top: c.top,
        json: c.json.clone(),
        flame: c.flame.clone(),
    }
}

pub(super) fn probe_cost_settings(
    p: &ProbeCostArgs,
) -> Result<crate::commands::probe_cost::ProbeCostSettings> {
    if p.iterations == 0 || p.rounds == 0 {
        crate::refuse!(
            "--iterations {} --rounds {}: give at least 1 of each",
            p.iterations,
            p.rounds
        );
    }
    Ok(crate::commands::probe_cost::ProbeCostSettings {
        iterations: p.iterations,
        rounds: p.rounds,
        json: p.json.clone(),
        against_bpftrace: p.against_bpftrace,
    })
}

/// `rig demo`'s window: at least one request on at least one connection,
/// within the descriptors rig may open.
pub(super) fn check_demo(d: &DemoArgs) -> Result<()> {
    if d.requests == 0 || d.connections == 0 {
        crate::refuse!("--requests and --connections must be at least 1");
    }
    check_connections("--connections", d.connections)
}

pub(super) fn instructions_settings(
    a: &InstructionsArgs,
) -> Result<crate::commands::instructions::InstructionsSettings> {
    if a.requests == 0 {
        crate::refuse!("--requests 0: give at least 1 request for the window");
    }
    let choice = crate::probe::instructions::Choice::parse(&a.backend)
        .map_err(|e| anyhow::anyhow!("--backend: {e}"))?;
    let mut spec =
        TargetSpec::load(&a.target).with_context(|| format!("--target {}", a.target.display()))?;
    super::args::apply_user(a.user.as_deref(), &mut spec)?;
    Ok(crate::commands::instructions::InstructionsSettings {
        spec,
        path: a.path.clone(),
        requests: a.requests,
        warmup: a.warmup,
        top: a.top,
        choice,
    })
}

pub(super) fn flame_settings(a: &FlameArgs) -> Result<crate::flamegraph::FlameSettings> {
    let format = a
        .format
        .parse()
        .map_err(|e: String| anyhow::Error::new(crate::usage::BadValue(format!("--format {e}"))))?;
    Ok(crate::flamegraph::FlameSettings {
        file: a.file.clone(),
        case: a.case.clone(),
        graph: a.family.clone(),
        format,
        out: a.out.clone(),
    })
}
