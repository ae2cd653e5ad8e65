//! Command line: flags (clap) → validated settings → the session → output.

mod args;
mod settings;

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

pub use args::*;
use settings::*;

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

/// The path of report.html, when the command wrote one.
fn print_report_path(dir: &std::path::Path) {
    let p = dir.join(crate::html::FILE);
    if p.exists() {
        println!("report: {}", p.display());
    }
}

fn instructions(a: &InstructionsArgs) -> Result<i32> {
    use crate::probe::instructions::{self as instr, Choice};
    let choice = Choice::parse(&a.backend).map_err(|e| anyhow::anyhow!("--backend: {e}"))?;
    // The flags first (exit 2), then the host.
    let mut spec = crate::launch::spec::TargetSpec::load(&a.target)
        .with_context(|| format!("--target {}", a.target.display()))?;
    args::apply_user(a.user.as_deref(), &mut spec)?;
    let (backend, why) = instr::select(choice, &crate::host::detect_pmu())?;
    println!("instructions counted by {why}");
    let w = crate::window::instructions::measure(backend, &spec, &a.path, a.requests, a.warmup)?;
    print!("{}", crate::probe::callgrind::render(&w, a.top));
    Ok(exit::OK)
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
