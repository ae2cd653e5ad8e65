//! `rig probe-cost`: what a probe hit costs on this host, measured, not
//! assumed. A command, not part of the probe stage: it starts processes and
//! drives them, and only attaches through `probe`.
//!
//! The `hitloop` fixture runs a tight loop of one kind of call (malloc+free,
//! memcpy, mutex lock+unlock, a syscall) and reports its own elapsed time.
//! Each kind runs clean and probed in interleaved rounds (A B B A ...), a fresh
//! process each run; the difference of the medians over the number of probe
//! hits per iteration is the cost of one hit.

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
}

/// Measure, print the table, write `--json`.
pub fn command(s: &ProbeCostSettings) -> Result<i32> {
    let rows = measure(s.iterations, s.rounds)?;
    println!("{}", render(&rows));
    if let Some(path) = &s.json {
        crate::fsutil::write_new(path, &serde_json::to_vec_pretty(&rows)?).context("--json")?;
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
}

/// Frames between the probed call and `_start` in every run: the hitloop
/// descends this many extra frames first (plus its own 6: the probed
/// function, the loop, the last `descend`, main and libc's two start-up
/// frames).
pub const STACK_DEPTH: u32 = 20;
const EXTRA_FRAMES: u32 = STACK_DEPTH - 6;

/// The three arms of one cost measurement.
#[derive(Clone, Copy, PartialEq)]
enum Arm {
    Clean,
    Probed,
    Stacked,
}

/// What to attach for one measurement.
enum Attach {
    /// One program at one libc function.
    Single {
        program: &'static str,
        symbol: &'static str,
    },
    /// A whole family.
    Family,
}

struct Kind {
    name: &'static str,
    /// The hitloop loop to run.
    hitloop: &'static str,
    family: Family,
    attach: Attach,
    hits: &'static str,
    hits_per_iteration: u32,
}

/// One row per probe, so a costly one is not hidden in an average: on x86 a
/// uprobe whose first instruction the kernel can emulate (push, jmp) is far
/// cheaper than one it must single-step out of line (mov, test).
const KINDS: &[Kind] = &[
    Kind {
        name: "malloc entry",
        hitloop: "malloc",
        family: Family::Alloc,
        attach: Attach::Single {
            program: "rig_alloc_arg1",
            symbol: "malloc",
        },
        hits: "uprobe",
        hits_per_iteration: 1,
    },
    Kind {
        name: "free entry",
        hitloop: "malloc",
        family: Family::Alloc,
        attach: Attach::Single {
            program: "rig_alloc_free",
            symbol: "free",
        },
        hits: "uprobe",
        hits_per_iteration: 1,
    },
    Kind {
        name: "memcpy implementation entry",
        hitloop: "memcpy",
        family: Family::Copy,
        attach: Attach::Single {
            program: "rig_copy",
            symbol: "memcpy",
        },
        hits: "uprobe",
        hits_per_iteration: 1,
    },
    Kind {
        name: "pthread_mutex_lock entry",
        hitloop: "lock",
        family: Family::Locks,
        attach: Attach::Single {
            program: "rig_mutex_lock",
            symbol: "pthread_mutex_lock",
        },
        hits: "uprobe",
        hits_per_iteration: 1,
    },
    Kind {
        name: "pthread_mutex_lock return",
        hitloop: "lock",
        family: Family::Locks,
        attach: Attach::Single {
            program: "rig_mutex_lock_ret",
            symbol: "pthread_mutex_lock",
        },
        hits: "uretprobe",
        hits_per_iteration: 1,
    },
    Kind {
        name: "pthread_mutex_unlock entry",
        hitloop: "lock",
        family: Family::Locks,
        attach: Attach::Single {
            program: "rig_mutex_unlock",
            symbol: "pthread_mutex_unlock",
        },
        hits: "uprobe",
        hits_per_iteration: 1,
    },
    Kind {
        name: "syscall enter + exit",
        hitloop: "syscall",
        family: Family::Syscalls,
        attach: Attach::Family,
        hits: "raw tracepoints",
        hits_per_iteration: 2,
    },
];

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let n = s.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

/// Run `hitloop KIND ITERS DEPTH` once, in one arm. One run: ns per loop iteration, and the BPF program's ns per run.
fn run_once(kind: &Kind, iterations: u64, arm: Arm) -> Result<(f64, Option<f64>)> {
    use std::os::unix::process::CommandExt;
    let mut cmd = Command::new(rig_fixtures::hitloop());
    cmd.arg(kind.hitloop)
        .arg(iterations.to_string())
        .arg(EXTRA_FRAMES.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    // A SIGKILLed rig must not leave the fixture looping: it dies with rig
    // (the thread that spawns it is the main thread, alive as long as rig).
    // If rig died before the prctl, the fixture is already orphaned: give up.
    let rig_pid = std::process::id() as libc::pid_t;
    // SAFETY: prctl and getppid are async-signal-safe; nothing is allocated.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::getppid() != rig_pid {
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().context("starting the hitloop fixture")?;
    // SIGINT/SIGTERM must not wait for a long probed loop: kill the
    // fixture (rig started it and has not reaped it, so the pid is its).
    let pid = child.id();
    let done = std::sync::atomic::AtomicBool::new(false);
    let result = std::thread::scope(|s| {
        s.spawn(|| {
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                if crate::interrupt::requested() {
                    // SAFETY: plain syscall on our unreaped child.
                    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        });
        let r = run_hitloop(&mut child, kind, iterations, arm);
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        r
    });
    if result.is_err() {
        let _ = child.kill();
    }
    let _ = child.wait();
    result
}

fn run_hitloop(
    child: &mut std::process::Child,
    kind: &Kind,
    iterations: u64,
    arm: Arm,
) -> Result<(f64, Option<f64>)> {
    (|| -> Result<(f64, Option<f64>)> {
        let mut out = BufReader::new(child.stdout.take().context("hitloop stdout")?);
        let mut line = String::new();
        out.read_line(&mut line)?;
        if line.trim() != "READY" {
            bail!("hitloop said {line:?} instead of READY");
        }
        let pid = child.id();
        let stacks = if arm == Arm::Stacked {
            Stacks::On
        } else {
            Stacks::Off
        };
        let probes = match (arm, &kind.attach) {
            (Arm::Clean, _) => None,
            (_, Attach::Family) => Some(ProbeSet::attach_with(
                pid,
                &[kind.family],
                Scope::Process,
                stacks,
            )?),
            (_, Attach::Single { program, symbol }) => Some(ProbeSet::attach_single(
                pid,
                kind.family,
                program,
                symbol,
                stacks,
            )?),
        };
        child
            .stdin
            .take()
            .context("hitloop stdin")?
            .write_all(b"go\n")?;
        line.clear();
        out.read_line(&mut line)?;
        let program = probes.as_ref().and_then(|p| {
            let (t, n) = p.program_runtime();
            (n > 0).then(|| t.as_nanos() as f64 / n as f64)
        });
        drop(probes);
        let ns: f64 = line
            .trim()
            .strip_prefix("ns=")
            .and_then(|s| s.parse().ok())
            .with_context(|| format!("hitloop printed {line:?}"))?;
        Ok((ns / iterations as f64, program))
    })()
}

/// Measure every probe kind: `rounds` A B C C B A blocks of clean, probed
/// and probed-with-stacks runs.
pub fn measure(iterations: u64, rounds: usize) -> Result<Vec<CostRow>> {
    // The kernel accounts BPF run time only while someone holds this.
    let _stats = aya::sys::enable_stats(aya::sys::Stats::RunTime).ok();
    let mut rows = Vec::new();
    for kind in KINDS {
        let (mut clean, mut probed, mut stacked) = (Vec::new(), Vec::new(), Vec::new());
        let (mut prog, mut prog_stacked) = (Vec::new(), Vec::new());
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
                let (ns, program) = run_once(kind, iterations, arm)
                    .with_context(|| format!("measuring the {} probe", kind.name))?;
                match arm {
                    Arm::Clean => clean.push(ns),
                    Arm::Probed => probed.push(ns),
                    Arm::Stacked => stacked.push(ns),
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
