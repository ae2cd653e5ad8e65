//! Instructions per request without a hardware PMU: a fixed-count window
//! under valgrind's callgrind.
//!
//! In: a [`TargetSpec`], a request count and a warm-up count. Out: an
//! [`InstrWindow`]: Ir (instructions executed, user space, every thread)
//! per request and per function.
//!
//! How (a fixed-count window, so connection set-up, lazy binding and first
//! touch stay outside the count): the target runs under `valgrind --tool=callgrind
//! --instr-atstart=no`, so nothing is counted until rig says so. rig makes
//! one keep-alive HTTP/1.1 connection, sends the warm-up requests
//! (uncounted: lazy binding, first touch), turns instrumentation on with
//! `callgrind_control -i on <pid>` while the target is idle in `recv`, sends
//! exactly N requests, turns it off, dumps (`callgrind_control -d`), stops
//! the target and parses the profile. The denominator is N successful
//! requests; a window with any failed request is an error.
//!
//! Instructions are not time. valgrind bills `rep movsb` per
//! byte moved, a syscall as one instruction, and a cache miss as nothing;
//! [`InstrWindow::note`] says so and nothing here converts Ir into time.
//!
//! Names: callgrind demangles (C++, Rust) itself. It names a function it
//! entered in several contexts (recursion, `--separate-callers`) `name'2`;
//! [`parse`] strips that suffix and sums the contexts. With the default
//! `--skip-plt=yes` PLT stubs are not functions of their own (their few
//! instructions are billed to the caller); a profile made with
//! `--skip-plt=no` names them `sym@plt`, kept as written.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde::Serialize;

/// The sentence every instruction report carries: Ir is a count of executed
/// instructions, not of the time they took.
pub const NOTE: &str = "callgrind bills rep movsb per byte: instructions are not time \
(a syscall is 1 Ir, a cache miss 0); never convert Ir deltas into time";

/// valgrind flags for a parseable, window-only profile.
pub const VALGRIND_ARGS: &[&str] = &[
    "--tool=callgrind",
    "--instr-atstart=no",
    "--dump-instr=no",
    "--compress-strings=no",
    "--compress-pos=no",
    "--separate-threads=no",
];

/// Readiness under valgrind is slow (JIT of the loader and libc).
pub const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// Cost of one function (all its contexts summed).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FnCost {
    pub name: String,
    /// The ELF object (`ob=`), as callgrind printed it.
    pub object: String,
    /// Instructions executed in the function itself.
    pub self_ir: f64,
    /// Calls into the function (from `calls=` lines of its callers).
    pub calls: f64,
}

/// A parsed callgrind profile (totals over every part and thread).
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct CallgrindProfile {
    /// `totals:` (else `summary:`, else the sum of self costs).
    pub total_ir: u64,
    /// Sorted by self Ir, largest first.
    pub functions: Vec<FnCost>,
}

/// Instructions per request over a fixed-count window.
#[derive(Debug, Clone, Serialize)]
pub struct InstrWindow {
    pub backend: &'static str,
    pub requests: u64,
    pub total_ir: u64,
    pub ir_per_request: f64,
    /// Per request: `self_ir` and `calls` divided by `requests`.
    pub functions: Vec<FnCost>,
    pub note: String,
}

/// Turn callgrind's instrumentation of `pid` on or off
/// (`callgrind_control -i on|off PID`, which talks to valgrind via vgdb).
pub fn instrument(pid: u32, on: bool) -> Result<()> {
    control(pid, &["-i", if on { "on" } else { "off" }])
}

/// Ask callgrind in `pid` to write a dump now (`callgrind_control -d`).
pub fn dump(pid: u32) -> Result<()> {
    control(pid, &["-d"])
}

/// `callgrind_control ARGS pid`, given up at a signal or after 30 s: it
/// talks to valgrind through vgdb, which waits for ever when the valgrind
/// it talks to is killed half-way (as rig's own clean-up does at Ctrl-C).
///
/// It runs as the user valgrind runs as (a target dropped to `--user`):
/// vgdb reaches valgrind through FIFOs valgrind made in /tmp, and root may
/// not open another user's FIFO in a sticky directory (`protected_fifos`),
/// so a root vgdb waits for ever. It gets a process group of its own, so
/// that giving up stops the vgdb it started too (an orphaned vgdb would
/// keep the target's tree alive).
fn control(pid: u32, args: &[&str]) -> Result<()> {
    use std::os::unix::process::CommandExt;
    let mut cmd = Command::new("callgrind_control");
    cmd.args(args)
        .arg(pid.to_string())
        .process_group(0)
        .stdin(std::process::Stdio::null());
    if let Some((uid, gid)) = owner(pid).filter(|&(uid, _)| uid != 0) {
        cmd.uid(uid).gid(gid);
    }
    let mut child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .context(
            "running callgrind_control (part of the valgrind package): is valgrind installed?",
        )?;
    let t0 = Instant::now();
    loop {
        if child.try_wait()?.is_some() {
            break;
        }
        let why = if crate::interrupt::requested() {
            Some("interrupted")
        } else if t0.elapsed() > Duration::from_secs(30) {
            Some("no answer within 30 s")
        } else {
            None
        };
        if let Some(why) = why {
            // Our own child and the vgdb it started, in its own group.
            // SAFETY: a plain syscall; the group is the child's, made above.
            unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
            let _ = child.wait();
            bail!("callgrind_control {} {pid}: {why}", args.join(" "));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let out = child.wait_with_output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() || !text.contains("OK") {
        bail!(
            "callgrind_control {} {pid} failed ({}): {}{}",
            args.join(" "),
            out.status,
            text.trim(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// The real uid and gid of `pid` (from `/proc/<pid>/status`).
fn owner(pid: u32) -> Option<(u32, u32)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| -> Option<u32> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    };
    Some((field("Uid:")?, field("Gid:")?))
}

/// A dump is complete once its `totals:` line is written.
pub fn wait_for_dump(file: &Path) -> Result<()> {
    let t0 = Instant::now();
    loop {
        if let Ok(t) = std::fs::read_to_string(file) {
            if t.lines().any(|l| l.starts_with("totals:")) {
                return Ok(());
            }
        }
        if t0.elapsed() > Duration::from_secs(30) {
            bail!("callgrind did not write {} within 30 s", file.display());
        }
        if crate::interrupt::requested() {
            bail!("interrupted while callgrind wrote {}", file.display());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `out_file` and its numbered parts, in order.
pub fn dump_files(out_file: &Path) -> Result<Vec<PathBuf>> {
    let dir = out_file.parent().unwrap_or(Path::new("."));
    let base = out_file
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| {
            p.file_name().is_some_and(|n| {
                let n = n.to_string_lossy();
                n == base
                    || n.strip_prefix(&format!("{base}."))
                        .is_some_and(|s| s.parse::<u32>().is_ok())
            })
        })
        .collect();
    v.sort();
    Ok(v)
}

// ---------------------------------------------------------------------------
// Parser.

/// `name'2` → `name` (callgrind's context/recursion suffix).
fn strip_context(name: &str) -> &str {
    match name.rfind('\'') {
        Some(i) if i + 1 < name.len() && name[i + 1..].bytes().all(|b| b.is_ascii_digit()) => {
            &name[..i]
        }
        _ => name,
    }
}

/// Name compression: `(id) name` defines, `(id)` refers.
#[derive(Default)]
struct Names(BTreeMap<String, String>);

impl Names {
    fn resolve(&mut self, v: &str) -> String {
        let v = v.trim();
        if let Some(rest) = v.strip_prefix('(') {
            if let Some(close) = rest.find(')') {
                let id = &rest[..close];
                let name = rest[close + 1..].trim();
                if name.is_empty() {
                    return self.0.get(id).cloned().unwrap_or_else(|| format!("({id})"));
                }
                self.0.insert(id.to_string(), name.to_string());
                return name.to_string();
            }
        }
        v.to_string()
    }
}

/// Parse a callgrind profile (one or several concatenated parts). Self cost
/// is every cost line not directly after a `calls=` line (that one is the
/// call's inclusive cost); calls come from `calls=` lines, billed to the
/// `cfn=` function. Only the `Ir` event is read.
// Long by design: one pass of a line-oriented state machine over the
// callgrind format (current file, object, function, call target); split,
// that state would be threaded through every piece.
pub fn parse(text: &str) -> CallgrindProfile {
    let mut obs = Names::default();
    let mut fns = Names::default();
    let mut files = Names::default();
    // (name, object) -> (self, calls)
    let mut acc: BTreeMap<(String, String), (u64, u64)> = BTreeMap::new();
    let mut npos = 1usize;
    let mut ir_col = 0usize;
    let mut ob = String::new();
    let mut cur: Option<(String, String)> = None;
    let mut cob: Option<String> = None;
    let mut cfn: Option<String> = None;
    let mut after_calls = false;
    let mut totals: Option<u64> = None;
    let mut summary: Option<u64> = None;
    for line in text.lines() {
        let line = line.trim_end();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let first = line.as_bytes()[0];
        if first.is_ascii_digit() || first == b'+' || first == b'-' || first == b'*' {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let ir = fields
                .get(npos + ir_col)
                .and_then(|f| f.parse::<u64>().ok())
                .unwrap_or(0);
            if after_calls {
                after_calls = false;
            } else if let Some(k) = &cur {
                acc.entry(k.clone()).or_default().0 += ir;
            }
            continue;
        }
        let Some((key, val)) = line
            .split_once('=')
            .filter(|(k, _)| !k.contains(':'))
            .or_else(|| line.split_once(':'))
        else {
            continue;
        };
        match key.trim() {
            "positions" => npos = val.split_whitespace().count().max(1),
            "events" => ir_col = val.split_whitespace().position(|e| e == "Ir").unwrap_or(0),
            "totals" => {
                *totals.get_or_insert(0) += val
                    .split_whitespace()
                    .nth(ir_col)
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or(0)
            }
            "summary" => {
                *summary.get_or_insert(0) += val
                    .split_whitespace()
                    .nth(ir_col)
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or(0)
            }
            "ob" => ob = obs.resolve(val),
            "cob" => cob = Some(obs.resolve(val)),
            "fl" | "fi" | "fe" | "cfi" | "cfl" => {
                files.resolve(val);
            }
            "fn" => {
                let name = strip_context(&fns.resolve(val)).to_string();
                cur = Some((name, ob.clone()));
                cob = None;
                cfn = None;
            }
            "cfn" => cfn = Some(strip_context(&fns.resolve(val)).to_string()),
            "calls" => {
                let n = val
                    .split_whitespace()
                    .next()
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or(0);
                if let Some(callee) = cfn.clone() {
                    let object = cob.take().unwrap_or_else(|| ob.clone());
                    acc.entry((callee, object)).or_default().1 += n;
                }
                after_calls = true;
            }
            _ => {}
        }
    }
    let sum_self: u64 = acc.values().map(|v| v.0).sum();
    let mut functions: Vec<FnCost> = acc
        .into_iter()
        .map(|((name, object), (s, c))| FnCost {
            name,
            object,
            self_ir: s as f64,
            calls: c as f64,
        })
        .collect();
    functions.sort_by(|a, b| b.self_ir.total_cmp(&a.self_ir).then(a.name.cmp(&b.name)));
    CallgrindProfile {
        total_ir: totals.or(summary.filter(|s| *s > 0)).unwrap_or(sum_self),
        functions,
    }
}

/// The report `rig instructions` prints: top `top` functions by self Ir
/// (a perf window has no functions and says so).
pub fn render(w: &InstrWindow, top: usize) -> String {
    let mut s = format!(
        "backend: {}\nrequests in window: {}\ninstructions (Ir) per request: {:.1}  (total {})\n\n",
        w.backend, w.requests, w.ir_per_request, w.total_ir
    );
    if w.functions.is_empty() {
        s.push_str("no per-function split: a hardware counter has no call sites (use --backend callgrind)\n");
    } else {
        s.push_str(&format!(
            "{:>12} {:>10}  function (object)\n",
            "self Ir/req", "calls/req"
        ));
    }
    for f in w.functions.iter().take(top) {
        s.push_str(&format!(
            "{:>12.1} {:>10.2}  {} ({})\n",
            f.self_ir, f.calls, f.name, f.object
        ));
    }
    s.push_str(&format!("\nnote: {}\n", w.note));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strip_context_only_strips_digit_suffix() {
        assert_eq!(strip_context("foo'2"), "foo");
        assert_eq!(strip_context("foo'bar"), "foo'bar");
        assert_eq!(strip_context("foo"), "foo");
        assert_eq!(strip_context("malloc@plt"), "malloc@plt");
    }
}
