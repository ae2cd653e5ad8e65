//! `rig probe-cost`: what a probe hit costs on this host, measured, not
//! assumed. A command, not part of the probe stage: it starts processes and
//! drives them, and only attaches through `probe`.
//!
//! The `hitloop` fixture runs a tight loop of one kind of call (malloc+free,
//! memcpy, mutex lock+unlock, a syscall) and reports its own elapsed time;
//! its Go twin `gohitloop` loops on `runtime.mallocgc` or a syscall, so the
//! Go allocator probe and the walk of Go frames (rows made from
//! `.gopclntab`, no `.eh_frame`) are measured the same way.
//! Each kind runs clean, probed and probed with stacks in palindromic rounds
//! (A B C C B A ...), a fresh process each run; the difference of the
//! medians over the number of probe hits per iteration is the cost of one
//! hit.
//!
//! `--against-bpftrace` measures, in the same rounds, a bpftrace uprobe on
//! the same function (a count per thread, bpftrace's usual one-liner)
//! beside rig's probe, for the probes whose first instruction the kernel
//! would single-step: a benchmark, not a test, and it needs `bpftrace` on
//! the PATH.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};
use serde::Serialize;

use crate::exit;
use crate::probe::{Family, ProbeSet, Scope, Stacks};

#[derive(Clone, Debug)]
pub struct ProbeCostSettings {
    /// Loop iterations per run.
    pub iterations: u64,
    /// A B C C B A rounds per probe kind.
    pub rounds: usize,
    /// Also write the measurements here, as JSON.
    pub json: Option<PathBuf>,
    /// Measure rig's probes against bpftrace's instead.
    pub against_bpftrace: bool,
}

/// Measure, print the table, write `--json`.
pub fn command(s: &ProbeCostSettings) -> Result<i32> {
    let json = if s.against_bpftrace {
        let rows = measure_against_bpftrace(s.iterations, s.rounds)?;
        crate::outln!("{}", render_against_bpftrace(&rows));
        serde_json::to_vec_pretty(&rows)?
    } else {
        let rows = measure(s.iterations, s.rounds)?;
        crate::outln!("{}", render(&rows));
        serde_json::to_vec_pretty(&rows)?
    };
    if let Some(path) = &s.json {
        crate::fsutil::write_new(path, &json).context("--json")?;
    }
    Ok(exit::OK)
}

/// One probe kind's measured cost.
#[derive(Clone, Debug, Serialize)]
pub struct CostRow {
    pub kind: &'static str,
    pub family: Family,
    /// What fires per loop iteration.
    pub hits: &'static str,
    pub hits_per_iteration: u32,
    pub iterations: u64,
    /// ns per iteration, every run, in run order.
    pub clean_runs: Vec<f64>,
    pub probed_runs: Vec<f64>,
    pub clean_median: f64,
    pub probed_median: f64,
    /// (probed median - clean median) / hits per iteration.
    pub ns_per_hit: f64,
    /// The same probe walking the whole user stack, from `stack_depth`
    /// frames deep.
    pub stacked_runs: Vec<f64>,
    pub stacked_median: f64,
    pub ns_per_hit_stacks: f64,
    pub stack_depth: u32,
    /// Time inside the BPF program per run (the kernel's own accounting,
    /// `run_time_ns / run_cnt`, median over runs): what the program costs
    /// without the trap that enters it, and far less disturbed by other
    /// load on the machine than the loop timings.
    pub program_ns: f64,
    pub program_ns_stacks: f64,
    /// Runs of the BPF programs in each probed run (no stacks), in run
    /// order: at least the loop's hits, so the probe was on the function
    /// the loop calls (the syscall tracepoints also run for every other
    /// process's syscalls, and filter them out).
    pub program_runs: Vec<u64>,
}

/// Frames between the probed call and the stack's top in every run: the
/// loop descends extra frames first, as many as make this depth with the
/// frames of its own (`Fixture::own_frames`).
pub const STACK_DEPTH: u32 = 20;

mod bpftrace;
mod hitloop;
mod kinds;

use bpftrace::*;
pub use bpftrace::{measure_against_bpftrace, render_against_bpftrace, AgainstRow};
use hitloop::*;
use kinds::*;

/// The median of `v`; NaN for none.
fn median(v: &[f64]) -> f64 {
    crate::stats::median(v).unwrap_or(f64::NAN)
}

/// Measure every probe kind: `rounds` A B C C B A blocks of clean, probed
/// and probed-with-stacks runs.
pub fn measure(iterations: u64, rounds: usize) -> Result<Vec<CostRow>> {
    // The kernel accounts BPF run time only while someone holds this.
    let _stats = aya::sys::enable_stats(aya::sys::Stats::RunTime).ok();
    let mut rows = Vec::new();
    for kind in KINDS {
        if let Some(why) = kind.fixture.missing() {
            crate::errln!("rig: probe-cost: {} not measured: {why}", kind.name);
            continue;
        }
        let (mut clean, mut probed, mut stacked) = (Vec::new(), Vec::new(), Vec::new());
        let (mut prog, mut prog_stacked) = (Vec::new(), Vec::new());
        let mut runs = Vec::new();
        for _ in 0..rounds {
            // Palindromic order: drift over the round hits every arm alike.
            for arm in [
                Arm::Clean,
                Arm::Probed,
                Arm::Stacked,
                Arm::Stacked,
                Arm::Probed,
                Arm::Clean,
            ] {
                if crate::interrupt::requested() {
                    bail!(
                        "interrupted by SIGINT/SIGTERM before the {} probe was measured",
                        kind.name
                    );
                }
                let Run {
                    ns,
                    program,
                    program_runs,
                    ..
                } = run_once(kind, iterations, arm)
                    .with_context(|| format!("measuring the {} probe", kind.name))?;
                match arm {
                    Arm::Clean => clean.push(ns),
                    Arm::Probed => {
                        probed.push(ns);
                        runs.push(program_runs);
                    }
                    Arm::Stacked | Arm::Bpftrace => stacked.push(ns),
                }
                match (arm, program) {
                    (Arm::Probed, Some(p)) => prog.push(p),
                    (Arm::Stacked, Some(p)) => prog_stacked.push(p),
                    _ => {}
                }
            }
        }
        let (cm, pm, sm) = (median(&clean), median(&probed), median(&stacked));
        rows.push(CostRow {
            kind: kind.name,
            family: kind.family,
            hits: kind.hits,
            hits_per_iteration: kind.hits_per_iteration,
            iterations,
            clean_median: cm,
            probed_median: pm,
            ns_per_hit: (pm - cm) / kind.hits_per_iteration as f64,
            clean_runs: clean,
            probed_runs: probed,
            stacked_median: sm,
            ns_per_hit_stacks: (sm - cm) / kind.hits_per_iteration as f64,
            stacked_runs: stacked,
            stack_depth: STACK_DEPTH,
            program_ns: median(&prog),
            program_ns_stacks: median(&prog_stacked),
            program_runs: runs,
        });
    }
    Ok(rows)
}

/// The cost table for a terminal.
pub fn render(rows: &[CostRow]) -> String {
    use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED).set_header(vec![
        "probe",
        "kind",
        "clean ns/iter (median)",
        "probed ns/iter (median)",
        "ns per hit",
        "with stacks ns/iter (median)",
        "ns per hit with stacks",
        "stacks ÷ no stacks",
        "BPF program ns/run",
        "with stacks",
    ]);
    for r in rows {
        t.add_row(vec![
            r.kind.to_string(),
            format!("{} x{}/iter", r.hits, r.hits_per_iteration),
            format!("{:.1}", r.clean_median),
            format!("{:.1}", r.probed_median),
            format!("{:.0}", r.ns_per_hit),
            format!("{:.1}", r.stacked_median),
            format!("{:.0}", r.ns_per_hit_stacks),
            format!("{:.2}", r.ns_per_hit_stacks / r.ns_per_hit),
            format!("{:.0}", r.program_ns),
            format!("{:.0}", r.program_ns_stacks),
        ]);
    }
    format!(
        "probe cost on this host ({} iterations per run, {} runs per arm, interleaved A B C C B A; \
         every probed call sits {} frames deep, and \"with stacks\" walks all of them)\n{t}\n\
         Counts are exact whatever the cost; timings taken while uprobes are attached are \
         inflated by about this much per hit.",
        rows.first().map_or(0, |r| r.iterations),
        rows.first().map_or(0, |r| r.clean_runs.len()),
        rows.first().map_or(0, |r| r.stack_depth),
    )
}

#[cfg(test)]
mod tests {
    use super::median;

    #[test]
    fn median_of_even_and_odd() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
    }
}
