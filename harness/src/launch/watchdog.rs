//! What a SIGKILLed rig cannot clean up itself, a watchdog does.
//!
//! `PR_SET_PDEATHSIG` (set in the launched child) kills the target's leader
//! when rig dies, but not the processes it forked, nor does it remove the
//! target's cgroup or its `{run_dir}`. So each launch also starts a tiny
//! `sh` that blocks reading a pipe from rig. When rig stops the target
//! normally it writes one line and the watchdog exits untouched; when rig
//! dies the pipe reaches EOF and the watchdog kills everything in the
//! target's cgroups (only processes rig launched are ever in there),
//! removes them and the run directory.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};

use std::os::unix::process::CommandExt;

const SCRIPT: &str = r#"
if read -r _; then exit 0; fi
run=$1; shift
i=0
while [ $i -lt 50 ]; do
  left=
  for d in "$@"; do
    [ -e "$d/cgroup.kill" ] && echo 1 > "$d/cgroup.kill"
    while read -r p; do kill -9 "$p"; left=1; done < "$d/cgroup.procs"
  done
  [ -z "$left" ] && break
  i=$((i+1))
  sleep 0.1
done
for d in "$@"; do
  j=0
  while [ -d "$d" ] && ! rmdir "$d" && [ $j -lt 20 ]; do j=$((j+1)); sleep 0.1; done
done
rm -rf -- "$run"
"#;

/// A running watchdog; dismissed (told all is clean) when dropped.
pub struct Watchdog {
    child: Child,
    stdin: Option<ChildStdin>,
}

impl Watchdog {
    /// Start one for a target whose files are in `run_dir` and whose
    /// cgroups are `cgroups`. `None` (with a warning) if `sh` cannot start:
    /// the launch goes on, as before watchdogs existed.
    pub fn start(run_dir: &Path, cgroups: &[PathBuf]) -> Option<Watchdog> {
        let mut cmd = Command::new("/bin/sh");
        cmd.arg("-c")
            .arg(SCRIPT)
            .arg("rig-watchdog")
            .arg(run_dir)
            .args(cgroups)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            // Its own group: a Ctrl-C at the terminal is rig's to handle.
            .process_group(0);
        match cmd.spawn() {
            Ok(mut child) => {
                let stdin = child.stdin.take();
                Some(Watchdog { child, stdin })
            }
            Err(e) => {
                log::warn!("cannot start the clean-up watchdog (/bin/sh): {e}");
                None
            }
        }
    }

    /// rig cleaned up itself: the watchdog exits without touching anything.
    pub fn dismiss(&mut self) {
        if let Some(mut s) = self.stdin.take() {
            let _ = s.write_all(b"done\n");
        }
        let _ = self.child.wait();
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.dismiss();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dismissed_watchdog_leaves_the_directory_alone() {
        let d = crate::fsutil::private_dir("rig-watchdog-test-").unwrap();
        let mut w = Watchdog::start(&d, &[]).unwrap();
        w.dismiss();
        assert!(d.is_dir());
        std::fs::remove_dir(&d).unwrap();
    }

    #[test]
    fn an_orphaned_watchdog_removes_the_run_directory() {
        let d = crate::fsutil::private_dir("rig-watchdog-test-").unwrap();
        std::fs::write(d.join("f"), "x").unwrap();
        let mut w = Watchdog::start(&d, &[]).unwrap();
        // As if rig died: the pipe closes without the "done" line.
        drop(w.stdin.take());
        let _ = w.child.wait();
        assert!(!d.exists());
    }
}
