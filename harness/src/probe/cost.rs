//! What a probe hit costs on this host, measured, not assumed.
//!
//! The `hitloop` fixture runs a tight loop of one kind of call (malloc+free,
//! memcpy, mutex lock+unlock, a syscall) and reports its own elapsed time.
//! Each kind runs clean and probed in interleaved rounds (A B B A ...), a fresh
//! process each run; the difference of the medians over the number of probe
//! hits per iteration is the cost of one hit.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};
use serde::Serialize;

use super::{Family, ProbeSet};

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

/// Run `hitloop KIND ITERS` once, probed or not; ns per iteration.
fn run_once(kind: &Kind, iterations: u64, probed: bool) -> Result<f64> {
    let mut child = Command::new(rig_fixtures::hitloop())
        .arg(kind.hitloop)
        .arg(iterations.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .context("starting the hitloop fixture")?;
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
        let r = run_hitloop(&mut child, kind, iterations, probed);
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
    probed: bool,
) -> Result<f64> {
    (|| -> Result<f64> {
        let mut out = BufReader::new(child.stdout.take().context("hitloop stdout")?);
        let mut line = String::new();
        out.read_line(&mut line)?;
        if line.trim() != "READY" {
            bail!("hitloop said {line:?} instead of READY");
        }
        let pid = child.id();
        let probes = match (probed, &kind.attach) {
            (false, _) => None,
            (true, Attach::Family) => Some(ProbeSet::attach(pid, &[kind.family])?),
            (true, Attach::Single { program, symbol }) => {
                Some(ProbeSet::attach_single(pid, kind.family, program, symbol)?)
            }
        };
        child
            .stdin
            .take()
            .context("hitloop stdin")?
            .write_all(b"go\n")?;
        line.clear();
        out.read_line(&mut line)?;
        drop(probes);
        let ns: f64 = line
            .trim()
            .strip_prefix("ns=")
            .and_then(|s| s.parse().ok())
            .with_context(|| format!("hitloop printed {line:?}"))?;
        Ok(ns / iterations as f64)
    })()
}

/// Measure every probe kind: `rounds` A B B A blocks of clean and probed runs.
pub fn measure(iterations: u64, rounds: usize) -> Result<Vec<CostRow>> {
    let mut rows = Vec::new();
    for kind in KINDS {
        let (mut clean, mut probed) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            for probed_run in [false, true, true, false] {
                if crate::interrupt::requested() {
                    bail!(
                        "interrupted by SIGINT/SIGTERM before the {} probe was measured",
                        kind.name
                    );
                }
                let ns = run_once(kind, iterations, probed_run)
                    .with_context(|| format!("measuring the {} probe", kind.name))?;
                if probed_run {
                    probed.push(ns);
                } else {
                    clean.push(ns);
                }
            }
        }
        let (cm, pm) = (median(&clean), median(&probed));
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
    ]);
    for r in rows {
        t.add_row(vec![
            r.kind.to_string(),
            format!("{} x{}/iter", r.hits, r.hits_per_iteration),
            format!("{:.1}", r.clean_median),
            format!("{:.1}", r.probed_median),
            format!("{:.0}", r.ns_per_hit),
        ]);
    }
    format!(
        "probe cost on this host ({} iterations per run, {} runs per arm, interleaved A B B A)\n{t}\n\
         Counts are exact whatever the cost; timings taken while uprobes are attached are \
         inflated by about this much per hit.",
        rows.first().map_or(0, |r| r.iterations),
        rows.first().map_or(0, |r| r.clean_runs.len()),
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
