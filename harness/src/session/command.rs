//! The load command of `rig attach -- COMMAND`: started after the probes
//! are attached and the window opened, its standard output passed through
//! to rig's standard error (rig's own standard output stays the report)
//! and kept to read the request count from.

use std::io::{Read, Write};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread::JoinHandle;

use anyhow::{Context, Result};

use crate::load::tools::{read_count, CommandRun, Tool};

/// Output kept for parsing: the summary is at the end, so past this the
/// oldest half is dropped.
const KEEP: usize = 8 << 20;

pub struct Running {
    argv: Vec<String>,
    child: Child,
    out: Option<JoinHandle<Vec<u8>>>,
}

impl Running {
    pub fn spawn(argv: &[String]) -> Result<Running> {
        use std::os::unix::process::CommandExt;
        let (prog, args) = argv.split_first().context("an empty load command")?;
        // A process group of its own: when the window ends first, the
        // command and whatever it started (`su -c pgbench`: su's child)
        // are stopped together.
        let mut child = Command::new(prog)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .process_group(0)
            .spawn()
            .with_context(|| format!("starting the load command `{prog}`"))?;
        let mut stdout = child.stdout.take().context("load command stdout")?;
        let out = std::thread::spawn(move || {
            let mut kept = Vec::new();
            let mut buf = [0u8; 16 * 1024];
            let mut err = std::io::stderr();
            while let Ok(n) = stdout.read(&mut buf) {
                if n == 0 {
                    break;
                }
                let _ = err.write_all(&buf[..n]);
                kept.extend_from_slice(&buf[..n]);
                if kept.len() > KEEP {
                    kept.drain(..KEEP / 2);
                }
            }
            kept
        });
        Ok(Running {
            argv: argv.to_vec(),
            child,
            out: Some(out),
        })
    }

    pub fn try_wait(&mut self) -> Result<Option<ExitStatus>> {
        Ok(self.child.try_wait()?)
    }

    /// The window ended before the command did (Ctrl-C, the target
    /// exited): stop it. Only ever the process rig started.
    pub fn kill(&mut self) -> Result<ExitStatus> {
        self.kill_group();
        Ok(self.child.wait()?)
    }

    /// SIGKILL to the command's process group (its own, made at spawn:
    /// only what rig started).
    fn kill_group(&mut self) {
        if let Ok(pid) = i32::try_from(self.child.id()) {
            // SAFETY: kill(2) with a negative pid signals that process
            // group; the group is the command's own.
            unsafe { libc::kill(-pid, libc::SIGKILL) };
        }
        let _ = self.child.kill();
    }

    /// The record of the run; the count is read from the output unless
    /// the user gave one (`per`).
    pub fn finish(mut self, status: ExitStatus, per: Option<u64>) -> CommandRun {
        use std::os::unix::process::ExitStatusExt;
        let out = self
            .out
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default();
        let text = String::from_utf8_lossy(&out);
        let (count, count_error) = match (per, Tool::of(&self.argv)) {
            (Some(_), _) => (None, None),
            (None, Some(tool)) => match read_count(tool, &text) {
                Ok(c) => (Some(c), None),
                Err(e) => (None, Some(format!("{}: {e}", tool.name()))),
            },
            (None, None) => (
                None,
                Some(format!(
                    "`{}` is not a load tool rig reads (wrk, h2load, oha, redis-benchmark); \
                     give --per N",
                    self.argv[0]
                )),
            ),
        };
        CommandRun {
            argv: self.argv.clone(),
            exit_code: status.code(),
            signal: status.signal(),
            count,
            count_error,
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        // Whatever happened, the command rig started does not outlive it.
        if let Ok(None) = self.child.try_wait() {
            self.kill_group();
            let _ = self.child.wait();
        }
    }
}
