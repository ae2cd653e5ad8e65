//! `--against-bpftrace`: a bpftrace uprobe on the same function beside
//! rig's probe, in the same rounds, and its table.

use super::*;

/// A bpftrace process counting hits of one uprobe in one process.
pub(super) struct Bpftrace {
    pub(super) child: std::process::Child,
}

impl Bpftrace {
    /// Start bpftrace on `at` in the hitloop `pid`; returns once its probe
    /// is attached (bpftrace runs `BEGIN` after attaching every probe).
    pub(super) fn start(pid: u32, at: BpftraceAt) -> Result<Bpftrace> {
        use std::os::unix::process::CommandExt;
        let (api, by_address) = match at {
            BpftraceAt::Symbol(s) => (s, false),
            BpftraceAt::Implementation(s) => (s, true),
        };
        let r = crate::probe::ifunc::resolve_in_libc(pid, api)
            .with_context(|| format!("resolving {api} for bpftrace"))?;
        let point = if by_address {
            format!("{}:{:#x}", r.lib, r.vaddr)
        } else {
            format!("{}:{api}", r.lib)
        };
        // bpftrace 0.17's uprobes fire in every process mapping the
        // library (its -p does not scope them): the predicate keeps the
        // count to the hitloop, as rig's probe is scoped to it.
        let program = format!(
            "uprobe:{point} /pid == {pid}/ {{ @[tid] = count(); }} BEGIN {{ printf(\"ready\\n\"); }}"
        );
        let mut cmd = Command::new("bpftrace");
        cmd.arg("-e")
            .arg(&program)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // A probe left behind by a killed rig would trap every process
        // mapping libc: bpftrace dies with rig.
        // SAFETY: prctl is async-signal-safe; nothing is allocated.
        unsafe {
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .with_context(|| format!("starting bpftrace -e '{program}'"))?;
        let mut b = Bpftrace { child };
        let out = b.child.stdout.as_mut().context("bpftrace stdout")?;
        let mut out = BufReader::new(out);
        let mut line = String::new();
        loop {
            line.clear();
            if out.read_line(&mut line)? == 0 {
                let mut err = String::new();
                if let Some(e) = b.child.stderr.as_mut() {
                    let _ = std::io::Read::read_to_string(e, &mut err);
                }
                bail!(
                    "bpftrace -e '{program}' ended before attaching: {}",
                    err.trim()
                );
            }
            if line.trim() == "ready" {
                return Ok(b);
            }
        }
    }

    /// Stop bpftrace (SIGINT: it prints its map and exits) and return the
    /// hits it counted.
    pub(super) fn stop(&mut self) -> Result<u64> {
        // SAFETY: plain syscall on our own unreaped child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
        let mut out = String::new();
        if let Some(o) = self.child.stdout.as_mut() {
            std::io::Read::read_to_string(o, &mut out)?;
        }
        let _ = self.child.wait();
        Ok(out
            .lines()
            .filter(|l| l.starts_with("@["))
            .filter_map(|l| l.rsplit(": ").next()?.trim().parse::<u64>().ok())
            .sum())
    }
}

impl Drop for Bpftrace {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Whether `bpftrace` is on the PATH.
pub(super) fn bpftrace_installed() -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|d| d.join("bpftrace").is_file()))
}

/// One probe measured against bpftrace's on the same function.
#[derive(Clone, Debug, Serialize)]
pub struct AgainstRow {
    pub kind: &'static str,
    pub iterations: u64,
    /// ns per iteration, every run, in run order.
    pub clean_runs: Vec<f64>,
    pub rig_runs: Vec<f64>,
    pub bpftrace_runs: Vec<f64>,
    pub clean_median: f64,
    pub rig_median: f64,
    pub bpftrace_median: f64,
    /// (arm median - clean median) / hits per iteration.
    pub rig_ns_per_hit: f64,
    pub bpftrace_ns_per_hit: f64,
    /// The hits bpftrace counted in each of its runs (the loop's
    /// iterations, and any call the hitloop makes after `go`).
    pub bpftrace_hits: Vec<u64>,
}

/// Measure rig's probe and bpftrace's on each function both probe:
/// `rounds` blocks of clean, rig, bpftrace, bpftrace, rig, clean runs.
pub fn measure_against_bpftrace(iterations: u64, rounds: usize) -> Result<Vec<AgainstRow>> {
    if !bpftrace_installed() {
        bail!(
            "--against-bpftrace: bpftrace is not on the PATH (Debian: apt-get install bpftrace); \
             nothing was measured"
        );
    }
    let mut rows = Vec::new();
    for kind in KINDS.iter().filter(|k| k.bpftrace.is_some()) {
        let (mut clean, mut rig, mut bpf, mut hits) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for _ in 0..rounds {
            for arm in [
                Arm::Clean,
                Arm::Probed,
                Arm::Bpftrace,
                Arm::Bpftrace,
                Arm::Probed,
                Arm::Clean,
            ] {
                if crate::interrupt::requested() {
                    bail!(
                        "interrupted by SIGINT/SIGTERM before the {} probe was measured",
                        kind.name
                    );
                }
                if arm == Arm::Bpftrace {
                    if let Some(v) = valgrind_running() {
                        bail!(
                            "{v} runs under valgrind: bpftrace's uprobe would go into it too \
                             (bpftrace 0.17 does not scope uprobes to one process) and kill it \
                             with SIGTRAP; run --against-bpftrace when no valgrind is running"
                        );
                    }
                }
                let run = run_once(kind, iterations, arm)
                    .with_context(|| format!("measuring the {} probe", kind.name))?;
                match arm {
                    Arm::Clean => clean.push(run.ns),
                    Arm::Probed => rig.push(run.ns),
                    _ => {
                        let n = run.bpftrace_hits.unwrap_or(0);
                        if n < iterations {
                            bail!(
                                "bpftrace counted {n} hits of the {} probe in a loop of {iterations}: \
                                 its probe was not on the function the loop calls",
                                kind.name
                            );
                        }
                        bpf.push(run.ns);
                        hits.push(n);
                    }
                }
            }
        }
        let (cm, rm, bm) = (median(&clean), median(&rig), median(&bpf));
        let per = kind.hits_per_iteration as f64;
        rows.push(AgainstRow {
            // Both probes are on the function, not necessarily its entry.
            kind: kind.name.trim_end_matches(" entry"),
            iterations,
            clean_median: cm,
            rig_median: rm,
            bpftrace_median: bm,
            rig_ns_per_hit: (rm - cm) / per,
            bpftrace_ns_per_hit: (bm - cm) / per,
            clean_runs: clean,
            rig_runs: rig,
            bpftrace_runs: bpf,
            bpftrace_hits: hits,
        });
    }
    Ok(rows)
}

/// The side-by-side table for a terminal.
pub fn render_against_bpftrace(rows: &[AgainstRow]) -> String {
    use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED).set_header(vec![
        "probe",
        "clean ns/iter (median)",
        "rig ns/iter (median)",
        "bpftrace ns/iter (median)",
        "rig ns per hit",
        "bpftrace ns per hit",
        "bpftrace ÷ rig",
    ]);
    for r in rows {
        t.add_row(vec![
            r.kind.to_string(),
            format!("{:.1}", r.clean_median),
            format!("{:.1}", r.rig_median),
            format!("{:.1}", r.bpftrace_median),
            format!("{:.0}", r.rig_ns_per_hit),
            format!("{:.0}", r.bpftrace_ns_per_hit),
            format!("{:.1}", r.bpftrace_ns_per_hit / r.rig_ns_per_hit),
        ]);
    }
    format!(
        "rig's probes against bpftrace's on the same functions ({} iterations per run, {} runs \
         per arm, interleaved clean, rig, bpftrace, bpftrace, rig, clean; bpftrace: `uprobe:LIB:FUNCTION \
         /pid == PID/ {{ @[tid] = count(); }}`, the copy implementation by address)\n{t}",
        rows.first().map_or(0, |r| r.iterations),
        rows.first().map_or(0, |r| r.clean_runs.len()),
    )
}
