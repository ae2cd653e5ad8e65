//! Command line: flags (clap) → validated settings → one command, and the
//! command's error → its documented exit code. What a command prints and
//! writes is the command's own (`commands/`, `run`, `ab`, `gate`,
//! `flamegraph`).

mod args;
mod settings;

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};

use crate::commands::attach::{DemoSettings, Output};
use crate::launch::spec::TargetSpec;
use crate::load::url::DriveChoice;
use crate::probe::user::UserProbe;
use crate::probe::{Family, ProbeError};
use crate::session::{AttachSettings, Drive};

pub use crate::exit;

pub use args::*;
use settings::*;

/// The load may open as many connections as the matrix check allowed.
fn raise_nofile() {
    if let Some(n) = crate::scenario::raise_nofile() {
        crate::errln!(
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

/// `--out` of `run`, `ab` and `gate`, refused now (exit 2) when the
/// directory it would be made in cannot be written (a read-only mount):
/// before the first case, not after it.
fn writable_out(flag: &str, path: &std::path::Path) -> Result<()> {
    let existing = path
        .ancestors()
        .skip(1)
        .map(|a| {
            if a.as_os_str().is_empty() {
                std::path::Path::new(".")
            } else {
                a
            }
        })
        .find(|a| a.exists());
    match existing {
        Some(dir) => crate::fsutil::check_writable_dir(flag, path, dir)
            .map_err(|m| anyhow::Error::new(crate::usage::BadValue(m))),
        None => Ok(()),
    }
}

/// An output directory flag, refused now (exit 2) when it exists, or when
/// the directory it would be made in cannot be written (a read-only
/// mount): found before the window, not after it.
fn new_output_dir(flag: &str, path: &Option<PathBuf>) -> Result<()> {
    let bad = |m: String| Err(anyhow::Error::new(crate::usage::BadValue(m)));
    let Some(p) = path else { return Ok(()) };
    if std::fs::symlink_metadata(p).is_ok() {
        return bad(format!(
            "{flag} {}: already exists; give a new directory",
            p.display()
        ));
    }
    // The parents are made as `mkdir -p` does: the first that exists is
    // where rig must be able to write.
    writable_out(flag, p)
}

fn stop_flag() -> Result<Arc<AtomicBool>> {
    crate::interrupt::install(|| {
        let n = crate::launch::start::cleanup_all();
        if n > 0 {
            crate::errln!("rig: interrupted: stopped {n} target(s) rig had started");
        }
    })
    .context("installing signal handlers")
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
            crate::commands::attach::attach(&s, &output(&a.common), &*stop_flag()?)
        }
        Cmd::ProbeCost(p) => {
            let s = probe_cost_settings(&p)?;
            crate::probe::require_root()?;
            new_output_file("--json", &p.json)?;
            crate::commands::probe_cost::command(&s)
        }
        Cmd::Run(a) => {
            writable_out("--out", &a.out)?;
            let s = run_settings(&a)?;
            if !s.families.is_empty() && s.passes.counted {
                crate::probe::require_root()?;
            }
            crate::run::command(&s, &*stop_flag()?)
        }
        Cmd::CheckConfig(c) => crate::commands::check_config::command(&c.file),
        Cmd::Instructions(a) => crate::commands::instructions::command(&instructions_settings(&a)?),
        Cmd::Ab(a) => {
            writable_out("--out", &a.out)?;
            let s = ab_settings(&a)?;
            if !s.families.is_empty() && s.passes.counted {
                crate::probe::require_root()?;
            }
            crate::ab::command(&s, &*stop_flag()?)
        }
        Cmd::Gate(g) => {
            if let Some(o) = &g.out {
                writable_out("--out", o)?;
            }
            let s = gate_settings(&g)?;
            crate::gate::command(&s, &*stop_flag()?)
        }
        Cmd::Report(r) => crate::commands::report(&r.dir),
        Cmd::Flame(a) => {
            let s = flame_settings(&a)?;
            new_output_file("--out", &a.out)?;
            crate::flamegraph::command(&s)
        }
        Cmd::Compare(c) => {
            new_output_file("--json", &c.json)?;
            new_output_file("--html", &c.html)?;
            crate::compare::command(&crate::compare::CompareSettings {
                dirs: c.dirs.clone(),
                json: c.json.clone(),
                html: c.html.clone(),
            })
        }
        Cmd::Probes(p) => crate::commands::probes::command(p.pid, p.pattern.as_deref()),
        Cmd::Funcdiff(f) => {
            new_output_file("--json", &f.json)?;
            crate::commands::funcdiff::command(&f.a, &f.b, f.json.as_deref())
        }
        Cmd::Bisect(b) => {
            let s = bisect_settings(&b)?;
            // A timing metric is read from the clean pass: no probes.
            if !crate::compare::read::kind_of(&s.counter).1 {
                crate::probe::require_root()?;
            }
            crate::bisect::command(&s, &*stop_flag()?)
        }
        Cmd::Demo(d) => {
            check_demo(&d)?;
            new_output_file("--json", &d.common.json)?;
            new_output_dir("--flame", &d.common.flame)?;
            let s = DemoSettings {
                probes: d.common.probes.clone(),
                wrappers: d.common.wrappers.clone(),
                connections: d.connections,
                requests: d.requests,
                output: output(&d.common),
            };
            crate::commands::attach::demo(&s, &*stop_flag()?)
        }
    }
}

/// An error as one line: its message, then each cause the text so far
/// does not already say (an error whose message quotes its source, as
/// `resolving memmove in …: {source}` does, printed it twice).
pub fn error_line(err: &anyhow::Error) -> String {
    let mut line = err.to_string();
    for cause in err.chain().skip(1) {
        let c = cause.to_string();
        if !line.contains(&c) {
            line.push_str(": ");
            line.push_str(&c);
        }
    }
    line
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
        _ if err.chain().any(crate::fsutil::is_not_a_config) => exit::USAGE,
        _ => exit::ERROR,
    }
}

#[cfg(test)]
mod tests {
    use super::error_line;

    #[test]
    fn a_cause_the_message_quotes_is_said_once() {
        let source = anyhow::anyhow!("symbol memmove not found in /srv/app");
        let quoted = anyhow::Error::new(crate::probe::ProbeError::Resolve {
            pid: 7,
            lib: "/srv/app".into(),
            api: "memmove".into(),
            source,
        });
        let line = error_line(&quoted);
        assert_eq!(
            line.matches("symbol memmove not found").count(),
            1,
            "{line}"
        );
        // A cause the message does not quote is still said.
        let e = anyhow::anyhow!("disk full").context("writing report.json");
        assert_eq!(error_line(&e), "writing report.json: disk full");
    }
}
