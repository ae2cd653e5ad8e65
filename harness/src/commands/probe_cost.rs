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

/// Which loop program a kind runs.
#[derive(Clone, Copy, PartialEq)]
enum Fixture {
    /// calib/hitloop.c (glibc).
    C,
    /// go/gohitloop (Go, no cgo).
    Go,
}

impl Fixture {
    fn path(self) -> PathBuf {
        match self {
            Fixture::C => rig_fixtures::hitloop().to_path_buf(),
            Fixture::Go => rig_fixtures::gohitloop(),
        }
    }

    /// Frames of the loop program itself under the probed call, counted
    /// from a backtrace at the probe (gdb's, inlined frames left out): C,
    /// 6 (the probed function, the loop, the last `descend`, main and
    /// libc's two start-up frames); Go's mallocgc, 7 (runtime.mallocgc,
    /// runtime.newobject, main.hitMalloc, the last main.descend,
    /// main.main, runtime.main, runtime.goexit); Go's syscall, 6
    /// (syscall.rawSyscallNoError, main.hitSyscall with syscall.Getppid
    /// inlined, the last main.descend, main.main, runtime.main,
    /// runtime.goexit).
    fn own_frames(self, hitloop: &str) -> u32 {
        match (self, hitloop) {
            (Fixture::Go, "malloc") => 7,
            _ => 6,
        }
    }
}

/// The arms of one cost measurement.
#[derive(Clone, Copy, PartialEq)]
enum Arm {
    Clean,
    Probed,
    Stacked,
    /// A bpftrace uprobe instead of rig's.
    Bpftrace,
}

/// Where bpftrace's uprobe goes, in the C library the hitloop maps.
#[derive(Clone, Copy)]
enum BpftraceAt {
    /// At this exported function's entry, by name.
    Symbol(&'static str),
    /// At the implementation this IFUNC resolves to in the live hitloop, by
    /// address (glibc exports no name for it).
    Implementation(&'static str),
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
    /// The loop program, and the loop it runs.
    fixture: Fixture,
    hitloop: &'static str,
    family: Family,
    attach: Attach,
    hits: &'static str,
    hits_per_iteration: u32,
    /// The same function for bpftrace, for the probes `--against-bpftrace`
    /// compares.
    bpftrace: Option<BpftraceAt>,
}

/// One row per probe, so a costly one is not hidden in an average: on x86 a
/// uprobe whose first instruction the kernel can emulate (push, jmp) is far
/// cheaper than one it must single-step out of line (mov, test).
const KINDS: &[Kind] = &[
    Kind {
        name: "malloc entry",
        fixture: Fixture::C,
        hitloop: "malloc",
        family: Family::Alloc,
        attach: Attach::Single {
            program: "rig_alloc_arg1",
            symbol: "malloc",
        },
        hits: "uprobe",
        hits_per_iteration: 1,
        bpftrace: None,
    },
    // Every allocator entry point also has this uretprobe: the return of
    // a thread's outer allocator call is what ends it, so a malloc or free
    // costs the entry's hit plus this one.
    Kind {
        name: "malloc return",
        fixture: Fixture::C,
        hitloop: "malloc",
        family: Family::Alloc,
        attach: Attach::Single {
            program: "rig_alloc_ret",
            symbol: "malloc",
        },
        hits: "uretprobe",
        hits_per_iteration: 1,
        bpftrace: None,
    },
    Kind {
        name: "free entry",
        fixture: Fixture::C,
        hitloop: "malloc",
        family: Family::Alloc,
        attach: Attach::Single {
            program: "rig_alloc_free",
            symbol: "free",
        },
        hits: "uprobe",
        hits_per_iteration: 1,
        bpftrace: Some(BpftraceAt::Symbol("free")),
    },
    Kind {
        name: "memcpy implementation entry",
        fixture: Fixture::C,
        hitloop: "memcpy",
        family: Family::Copy,
        attach: Attach::Single {
            program: "rig_copy",
            symbol: "memcpy",
        },
        hits: "uprobe",
        hits_per_iteration: 1,
        bpftrace: Some(BpftraceAt::Implementation("memcpy")),
    },
    Kind {
        name: "pthread_mutex_lock entry",
        fixture: Fixture::C,
        hitloop: "lock",
        family: Family::Locks,
        attach: Attach::Single {
            program: "rig_mutex_lock",
            symbol: "pthread_mutex_lock",
        },
        hits: "uprobe",
        hits_per_iteration: 1,
        bpftrace: Some(BpftraceAt::Symbol("pthread_mutex_lock")),
    },
    Kind {
        name: "pthread_mutex_lock return",
        fixture: Fixture::C,
        hitloop: "lock",
        family: Family::Locks,
        attach: Attach::Single {
            program: "rig_mutex_lock_ret",
            symbol: "pthread_mutex_lock",
        },
        hits: "uretprobe",
        hits_per_iteration: 1,
        bpftrace: None,
    },
    Kind {
        name: "pthread_mutex_unlock entry",
        fixture: Fixture::C,
        hitloop: "lock",
        family: Family::Locks,
        attach: Attach::Single {
            program: "rig_mutex_unlock",
            symbol: "pthread_mutex_unlock",
        },
        hits: "uprobe",
        hits_per_iteration: 1,
        bpftrace: None,
    },
    Kind {
        name: "syscall enter + exit",
        fixture: Fixture::C,
        hitloop: "syscall",
        family: Family::Syscalls,
        attach: Attach::Family,
        hits: "raw tracepoints",
        hits_per_iteration: 2,
        bpftrace: None,
    },
    // Go: the allocator probe (entry only: rig never plants a uretprobe in
    // Go code), attached as `--probes alloc` attaches it, and stacks walked
    // through Go frames, which have no `.eh_frame`.
    Kind {
        name: "Go runtime.mallocgc entry",
        fixture: Fixture::Go,
        hitloop: "malloc",
        family: Family::Alloc,
        attach: Attach::Family,
        hits: "uprobe",
        hits_per_iteration: 1,
        bpftrace: None,
    },
    Kind {
        name: "Go syscall enter + exit",
        fixture: Fixture::Go,
        hitloop: "syscall",
        family: Family::Syscalls,
        attach: Attach::Family,
        hits: "raw tracepoints",
        hits_per_iteration: 2,
        bpftrace: None,
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

/// One run of the hitloop: ns per loop iteration, the BPF program's ns per
/// run (rig's arms) and the hits bpftrace counted (its arm).
struct Run {
    ns: f64,
    program: Option<f64>,
    program_runs: u64,
    bpftrace_hits: Option<u64>,
}

/// Run `hitloop KIND ITERS DEPTH` once, in one arm.
fn run_once(kind: &Kind, iterations: u64, arm: Arm) -> Result<Run> {
    use std::os::unix::process::CommandExt;
    let mut cmd = Command::new(kind.fixture.path());
    let extra = STACK_DEPTH - kind.fixture.own_frames(kind.hitloop);
    cmd.arg(kind.hitloop)
        .arg(iterations.to_string())
        .arg(extra.to_string())
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
) -> Result<Run> {
    (|| -> Result<Run> {
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
        let mut bpftrace = match (arm, kind.bpftrace) {
            (Arm::Bpftrace, Some(at)) => Some(Bpftrace::start(pid, at)?),
            (Arm::Bpftrace, None) => bail!("{}: no bpftrace probe to compare", kind.name),
            _ => None,
        };
        let probes = match (arm, &kind.attach) {
            (Arm::Clean | Arm::Bpftrace, _) => None,
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
        let (program, program_runs) = match probes.as_ref() {
            Some(p) => {
                let (t, n) = p.program_runtime();
                ((n > 0).then(|| t.as_nanos() as f64 / n as f64), n)
            }
            None => (None, 0),
        };
        drop(probes);
        let bpftrace_hits = match bpftrace.as_mut() {
            Some(b) => Some(b.stop()?),
            None => None,
        };
        let ns: f64 = line
            .trim()
            .strip_prefix("ns=")
            .and_then(|s| s.parse().ok())
            .with_context(|| format!("hitloop printed {line:?}"))?;
        Ok(Run {
            ns: ns / iterations as f64,
            program,
            program_runs,
            bpftrace_hits,
        })
    })()
}

/// A bpftrace process counting hits of one uprobe in one process.
struct Bpftrace {
    child: std::process::Child,
}

impl Bpftrace {
    /// Start bpftrace on `at` in the hitloop `pid`; returns once its probe
    /// is attached (bpftrace runs `BEGIN` after attaching every probe).
    fn start(pid: u32, at: BpftraceAt) -> Result<Bpftrace> {
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
    fn stop(&mut self) -> Result<u64> {
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

/// A process running under valgrind, by the name of its tool's process
/// (`memcheck-amd64-linux`, `callgrind-amd64-linux`, ...): bpftrace 0.17's
/// uprobes go into every process that maps the library, and valgrind,
/// which runs the code it reads, dies of the breakpoint (SIGTRAP).
fn valgrind_running() -> Option<String> {
    let tools = [
        "memcheck-",
        "callgrind-",
        "cachegrind-",
        "helgrind-",
        "drd-",
        "massif-",
    ];
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .find_map(|e| {
            let comm = std::fs::read_to_string(e.path().join("comm")).ok()?;
            let comm = comm.trim();
            tools
                .iter()
                .any(|t| comm.starts_with(t))
                .then(|| format!("{comm} (pid {})", e.file_name().to_string_lossy()))
        })
}

/// Whether `bpftrace` is on the PATH.
fn bpftrace_installed() -> bool {
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

/// Measure every probe kind: `rounds` A B C C B A blocks of clean, probed
/// and probed-with-stacks runs.
pub fn measure(iterations: u64, rounds: usize) -> Result<Vec<CostRow>> {
    // The kernel accounts BPF run time only while someone holds this.
    let _stats = aya::sys::enable_stats(aya::sys::Stats::RunTime).ok();
    let mut rows = Vec::new();
    for kind in KINDS {
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
