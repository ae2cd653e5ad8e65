//! The other generators: started pinned, their CPU time taken from
//! `RUSAGE_CHILDREN`, their numbers read from their output.

use std::os::unix::process::CommandExt;
use std::process::Command;

use anyhow::{Context, Result};

/// oha's JSON (`--output-format json`): req/s from `summary.requestsPerSec`,
/// requests completed from `statusCodeDistribution`, errors from
/// `errorDistribution` less the requests cut off by the `-z` deadline.
pub fn oha_numbers(out: &str) -> Option<(f64, f64, u64)> {
    let v: serde_json::Value = serde_json::from_str(out.trim()).ok()?;
    let rps = v["summary"]["requestsPerSec"].as_f64()?;
    let codes = v["statusCodeDistribution"].as_object()?;
    let done: u64 = codes.values().filter_map(|n| n.as_u64()).sum();
    let non_200: u64 = codes
        .iter()
        .filter(|(k, _)| k.as_str() != "200")
        .filter_map(|(_, n)| n.as_u64())
        .sum();
    let errors: u64 = v["errorDistribution"]
        .as_object()
        .map(|m| {
            m.iter()
                .filter(|(k, _)| !k.contains("deadline"))
                .filter_map(|(_, n)| n.as_u64())
                .sum()
        })
        .unwrap_or(0);
    if errors + non_200 > 0 {
        eprintln!(
            "oha: status codes {}, errors {}",
            v["statusCodeDistribution"], v["errorDistribution"]
        );
    }
    Some((rps, done as f64, errors + non_200))
}

/// Run a load tool pinned to `cpu`; its output and its CPU time in µs.
pub fn tool_run(cpu: usize, name: &str, args: &[&str]) -> Result<(String, f64)> {
    let before = children_cpu_us();
    let mut cmd = Command::new(name);
    cmd.args(args);
    pin(&mut cmd, cpu);
    let out = cmd.output().with_context(|| format!("running {name}"))?;
    let cpu_us = children_cpu_us() - before;
    if !out.status.success() {
        eprintln!(
            "{name} exited with {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok((String::from_utf8_lossy(&out.stdout).into_owned(), cpu_us))
}

pub fn pin(cmd: &mut Command, cpu: usize) {
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut set);
            if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

fn children_cpu_us() -> f64 {
    // SAFETY: ru is a valid out-pointer.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru) };
    let tv = |t: libc::timeval| t.tv_sec as f64 * 1e6 + t.tv_usec as f64;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

pub fn field(out: &str, key: &str) -> Option<f64> {
    out.lines()
        .find_map(|l| l.trim().strip_prefix(key))
        .and_then(|v| v.trim().parse().ok())
}

/// h2load: req/s from "finished in 3.00s, 95000.00 req/s, ...", requests
/// done and failed+errored from "requests: N total, N started, N done, N
/// succeeded, N failed, N errored, ...".
pub fn h2load_numbers(out: &str) -> (f64, f64, u64) {
    let rps = out
        .lines()
        .find(|l| l.starts_with("finished in"))
        .and_then(|l| l.split(", ").nth(1))
        .and_then(|v| v.strip_suffix(" req/s"))
        .and_then(|v| v.parse().ok())
        .unwrap_or(f64::NAN);
    let req = out
        .lines()
        .find(|l| l.starts_with("requests:"))
        .unwrap_or("");
    let num = |what: &str| -> f64 {
        req.split(", ")
            .find(|p| p.ends_with(what))
            .and_then(|p| p.trim_start_matches("requests: ").split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(f64::NAN)
    };
    let failed = num("failed") + num("errored");
    (
        rps,
        num("done"),
        if failed.is_nan() { 0 } else { failed as u64 },
    )
}
