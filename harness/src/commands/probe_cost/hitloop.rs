//! One run of a hitloop fixture, clean, probed or beside bpftrace.

use super::*;

/// One run of the hitloop: ns per loop iteration, the BPF program's ns per
/// run (rig's arms) and the hits bpftrace counted (its arm).
pub(super) struct Run {
    pub(super) ns: f64,
    pub(super) program: Option<f64>,
    pub(super) program_runs: u64,
    pub(super) bpftrace_hits: Option<u64>,
}

/// Run `hitloop KIND ITERS DEPTH` once, in one arm.
pub(super) fn run_once(kind: &Kind, iterations: u64, arm: Arm) -> Result<Run> {
    use std::os::unix::process::CommandExt;
    let mut cmd = kind.fixture.command();
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

pub(super) fn run_hitloop(
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
        let counting = match (arm, &kind.attach) {
            (Arm::Probed | Arm::Stacked, Attach::Counting { symbol }) => Some(
                crate::probe::CountingProbe::at_c_library(pid, symbol)
                    .map_err(anyhow::Error::msg)?,
            ),
            _ => None,
        };
        let probes = match (arm, &kind.attach) {
            (Arm::Clean | Arm::Bpftrace, _) | (_, Attach::Counting { .. }) => None,
            (_, Attach::Family) => Some(ProbeSet::attach_with(
                pid,
                &[kind.family],
                Scope::Process,
                stacks,
            )?),
            (_, Attach::User(spec)) => {
                let probe = match spec.split_once(' ') {
                    Some(("usdt", s)) => crate::probe::user::UserProbe::usdt(s),
                    Some(("interp-calls", s)) => crate::probe::user::UserProbe::interp_calls(s),
                    Some((_, s)) => crate::probe::user::UserProbe::func(s),
                    None => unreachable!(
                        "a user kind is `usdt SPEC`, `func SPEC` or `interp-calls LANGUAGE`"
                    ),
                }
                .map_err(anyhow::Error::msg)?;
                Some(ProbeSet::attach_named(
                    pid,
                    &[],
                    Scope::Process,
                    stacks,
                    false,
                    &[probe],
                )?)
            }
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
        let runtime = match (probes.as_ref(), counting.as_ref()) {
            (Some(p), _) => Some(p.program_runtime()),
            (None, Some(c)) => c.runtime(),
            (None, None) => None,
        };
        let (program, program_runs) = match runtime {
            Some((t, n)) => ((n > 0).then(|| t.as_nanos() as f64 / n as f64), n),
            None => (None, 0),
        };
        drop(probes);
        drop(counting);
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

/// A process running under valgrind, by the name of its tool's process
/// (`memcheck-amd64-linux`, `callgrind-amd64-linux`, ...): bpftrace 0.17's
/// uprobes go into every process that maps the library, and valgrind,
/// which runs the code it reads, dies of the breakpoint (SIGTRAP).
pub(super) fn valgrind_running() -> Option<String> {
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
