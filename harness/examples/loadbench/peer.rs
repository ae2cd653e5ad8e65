//! The HTTP/3 target: rig-peer `--tls --h3 --workers 1` with the repository's
//! localhost certificate, pinned to the server CPU. Debian 12's nginx (1.22)
//! has no `http_v3`, so h3 has no nginx leg.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result};
use rig::load::Expect;
use rig::session::Child;

use crate::tools::pin;

pub struct H3 {
    pub addr: SocketAddr,
    pub ca: PathBuf,
    pub expect: Expect,
    _peer: Child,
}

/// `$RIG_PEER`, else the rig-peer of the same cargo profile as this example
/// (`target/<profile>/examples/loadbench` → `target/<profile>/rig-peer`).
fn binary() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("RIG_PEER") {
        return Ok(PathBuf::from(p));
    }
    let exe = std::env::current_exe()?;
    let profile = exe
        .parent()
        .and_then(Path::parent)
        .context("no directory above the example")?;
    let p = profile.join("rig-peer");
    if !p.is_file() {
        anyhow::bail!(
            "no rig-peer at {}; build it with `cargo build --release -p rig-peer` or set RIG_PEER",
            p.display()
        );
    }
    Ok(p)
}

/// rig-peer serving h3 on a free port, pinned to `cpu`, past its READY line.
pub fn start(cpu: usize) -> Result<H3> {
    let tls = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/tls");
    let tls = tls.canonicalize().context("fixtures/tls")?;
    let mut cmd = Command::new(binary()?);
    cmd.args(["--port", "0", "--workers", "1", "--tls", "--h3", "--cert"])
        .arg(tls.join("localhost.pem"))
        .arg("--key")
        .arg(tls.join("localhost.key"));
    pin(&mut cmd, cpu);
    let peer = Child::spawn_ready(cmd).context("starting rig-peer --h3")?;
    Ok(H3 {
        addr: SocketAddr::from(([127, 0, 0, 1], peer.port)),
        ca: tls.join("ca.pem"),
        expect: Expect::ok_exact(Some("text/plain"), "hello"),
        _peer: peer,
    })
}
