//! `rig attach` and `rig demo`: one window on a running process, printed
//! as the attribution table and written as `--json` and `--flame`.

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use anyhow::{Context, Result};

use crate::exit;
use crate::probe::Family;
use crate::report::{table, Attribution};
use crate::session::{self, AttachSettings, Drive};

/// Where a window's attribution goes besides the terminal.
#[derive(Clone, Debug)]
pub struct Output {
    /// Rows per table.
    pub top: usize,
    pub json: Option<PathBuf>,
    pub flame: Option<PathBuf>,
}

/// `rig demo`: the bundled calibration server, driven by rig.
#[derive(Clone, Debug)]
pub struct DemoSettings {
    pub probes: String,
    pub wrappers: Vec<String>,
    pub connections: usize,
    pub requests: u64,
    pub output: Output,
}

/// `rig attach`: exit 0, [`exit::INCOMPLETE`] when the window lost events,
/// [`exit::CASE_FAILED`] when its target exited during it.
pub fn attach(s: &AttachSettings, out: &Output, stop: &AtomicBool) -> Result<i32> {
    let attribution = session::run_attach(s, stop)?;
    output(&attribution, out)
}

/// `rig demo`: the calibration server, driven and attributed.
pub fn demo(d: &DemoSettings, stop: &AtomicBool) -> Result<i32> {
    let mut cmd = std::process::Command::new(rig_fixtures::calib_server());
    cmd.args(["--port", "0", "--threads", "2", "--contend"]);
    let target = session::Child::spawn_ready(cmd)?;
    crate::errln!(
        "rig demo: calibration server pid {} on 127.0.0.1:{} (costs per request: fixtures/calib/COSTS.md)",
        target.pid(),
        target.port
    );
    // Parsed after the server started, as `rig demo` always did: a bad
    // --probes still fails with exit 2, after the line above.
    let s = AttachSettings {
        pid: target.pid(),
        families: Family::parse_list(&d.probes)?,
        duration: Duration::ZERO,
        per: None,
        drive: Some(Drive::h1(
            &format!("http://127.0.0.1:{}/calib", target.port),
            d.connections,
            crate::window::WarmUp::ATTACH_DEFAULT,
            d.requests,
        )?),
        command: Vec::new(),
        tree: None,
        wrappers: d.wrappers.clone(),
        live_heap: false,
        user_probes: Vec::new(),
    };
    let attribution = session::run_attach(&s, stop)?;
    drop(target);
    output(&attribution, &d.output)
}

fn output(a: &Attribution, out: &Output) -> Result<i32> {
    crate::out!("{}", table::render(a, out.top));
    if let Some(path) = &out.json {
        let f = crate::fsutil::create_new(path).context("--json")?;
        serde_json::to_writer_pretty(std::io::BufWriter::new(f), a)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(dir) = &out.flame {
        let files = crate::flamegraph::write_window(dir, a)?;
        crate::outln!("flamegraphs: {} ({} files)", dir.display(), files.len());
    }
    // A target that died inside the window leaves counts of no request
    // the user can name: a failed window, as `rig run` fails such a case.
    Ok(match (a.window.end, a.complete) {
        (crate::probe::WindowEnd::TargetExited, _) => exit::CASE_FAILED,
        (_, true) => exit::OK,
        (_, false) => exit::INCOMPLETE,
    })
}
