//! Waiting for a launched target: until its readiness check passes (TCP
//! connect, a stdout line, or an HTTP answer), then until its listener is
//! proven to be its own.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::port::{self, HolderCheck, PortProof};
use super::spec::{Ready, TargetSpec};
use super::start::{LaunchError, LaunchOptions, Launched};

/// Poll the spec's readiness check until it passes; a target that exits or
/// outlasts the timeout is stopped and the error says why (its exit, an
/// OOM kill, or another process holding the port).
#[allow(clippy::result_large_err)] // see start::mapped_objects
pub(super) fn wait_ready(
    l: &mut Launched,
    spec: &TargetSpec,
    opts: &LaunchOptions,
    started: Instant,
) -> Result<(), LaunchError> {
    let (pid, port) = (l.pid, l.port);
    let timeout = opts.ready_timeout.unwrap_or(spec.ready_timeout);
    let ready_desc = match &spec.ready {
        Ready::Tcp => format!("a TCP connect to port {port}"),
        Ready::Stdout(p) => format!("a stdout line containing {p:?}"),
        Ready::Http(p) => format!("GET {p} on port {port} to answer < 500"),
    };
    loop {
        let ready = match &spec.ready {
            Ready::Tcp => connect_any(port, Duration::from_millis(100)).is_some(),
            Ready::Stdout(_) => l.stdout.matched.load(Ordering::Acquire),
            Ready::Http(p) => http_ready(port, p),
        };
        if ready {
            return Ok(());
        }
        let exited = super::launched::exited_nowait(pid);
        if exited || started.elapsed() >= timeout {
            let waited = started.elapsed();
            // A target that lost its bind to someone else: name the holder.
            // (Its command line is read before the stop, which may take a
            // holder in the target's cgroup with it.)
            let other = port::port_holders(port)
                .into_iter()
                .find(|(p, _)| *p != pid && !port::descendants(pid).contains(p))
                .map(|(holder, _)| (holder, super::cmdline(holder)));
            let info = l.shutdown(Duration::from_millis(200));
            if let Some((holder_pid, holder_cmdline)) = other {
                return Err(LaunchError::PortHeldByOther {
                    port,
                    holder_pid,
                    holder_cmdline,
                    target_pid: Some(pid),
                });
            }
            return Err(LaunchError::NotReady {
                name: spec.name.clone(),
                pid,
                waited,
                ready: ready_desc,
                exit: exited.then(|| {
                    let oom = info.cgroup.and_then(|c| c.oom_kills).unwrap_or(0);
                    if oom > 0 {
                        format!(
                            "{}; its cgroup recorded {oom} OOM kill(s): the memory limit ({} MiB) is below what it needs to start",
                            info.describe(),
                            opts.memory_limit_mib.unwrap_or(0)
                        )
                    } else {
                        info.describe()
                    }
                }),
                stderr_tail: info.stderr_tail,
            });
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The listener on the port must be the target's own, whatever answered
/// the readiness check (a stale server on the port would be measured
/// instead). A stdout-ready target gets a moment to reach listen().
#[allow(clippy::result_large_err)] // see start::mapped_objects
pub(super) fn prove_port(l: &Launched, spec: &TargetSpec) -> Result<PortProof, LaunchError> {
    let mut proof: Option<PortProof> = None;
    for t in spec.transports() {
        let p = prove_port_on(l, spec, t)?;
        proof = Some(match proof {
            None => p,
            Some(mut all) => {
                all.inodes.extend(p.inodes);
                for h in p.holders {
                    if !all.holders.contains(&h) {
                        all.holders.push(h);
                    }
                }
                all.via_descendant |= p.via_descendant;
                all
            }
        });
    }
    Ok(proof.expect("a spec serves on at least one transport"))
}

/// [`prove_port`] for the listening sockets of one transport.
#[allow(clippy::result_large_err)] // see start::mapped_objects
fn prove_port_on(
    l: &Launched,
    spec: &TargetSpec,
    transport: port::Transport,
) -> Result<PortProof, LaunchError> {
    let (pid, port) = (l.pid, l.port);
    let t0 = Instant::now();
    loop {
        match port::check_holder_on(port, pid, transport) {
            HolderCheck::Proven(p) => return Ok(p),
            HolderCheck::Other {
                pid: holder,
                cmdline,
            } if left_behind(l, holder) && exits_soon(l) => {
                return Err(LaunchError::Daemonized {
                    name: spec.name.clone(),
                    pid,
                    exit: l.exit_status().unwrap_or_else(|| "exited".into()),
                    holder_pid: holder,
                    holder_cmdline: cmdline,
                })
            }
            HolderCheck::Other {
                pid: holder,
                cmdline,
            } => {
                return Err(LaunchError::PortHeldByOther {
                    port,
                    holder_pid: holder,
                    holder_cmdline: cmdline,
                    target_pid: Some(pid),
                })
            }
            HolderCheck::NoListener if t0.elapsed() < Duration::from_secs(1) => {
                std::thread::sleep(Duration::from_millis(10))
            }
            HolderCheck::NoListener => {
                return Err(LaunchError::NoListener {
                    name: spec.name.clone(),
                    pid,
                    port,
                })
            }
        }
    }
}

/// Whether the target has exited, or does within a second: the kernel
/// hands an exiting process's children to their new parent an instant
/// before the exit can be waited for, so a daemon can already be adopted
/// while its parent still looks alive.
fn exits_soon(l: &Launched) -> bool {
    let t0 = Instant::now();
    while !l.has_exited() {
        if t0.elapsed() > Duration::from_secs(1) {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    true
}

/// Process `holder` is one the target left behind: it is in the
/// target's cgroup, or rig (a child subreaper) adopted it when its parent
/// of the target's tree exited.
fn left_behind(l: &Launched, holder: u32) -> bool {
    let in_cgroup = l.cgroup_handle().is_some_and(|h| {
        std::fs::read_to_string(format!("/proc/{holder}/cgroup"))
            .is_ok_and(|c| c.lines().any(|x| x.ends_with(&format!("/{}", h.name))))
    });
    let adopted = std::fs::read_to_string(format!("/proc/{holder}/stat")).is_ok_and(|s| {
        s.rsplit_once(')')
            .and_then(|(_, r)| r.split_whitespace().nth(1)?.parse::<u32>().ok())
            == Some(std::process::id())
    });
    in_cgroup || adopted
}

fn connect_any(port: u16, t: Duration) -> Option<TcpStream> {
    let addrs: [SocketAddr; 2] = [
        ([127, 0, 0, 1], port).into(),
        (std::net::Ipv6Addr::LOCALHOST, port).into(),
    ];
    addrs
        .iter()
        .find_map(|a| TcpStream::connect_timeout(a, t).ok())
}

/// `GET path` answers with a status below 500.
fn http_ready(port: u16, path: &str) -> bool {
    let Some(mut s) = connect_any(port, Duration::from_millis(200)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
    let req = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n");
    if s.write_all(req.as_bytes()).is_err() {
        return false;
    }
    let mut buf = [0u8; 64];
    let mut got = 0;
    while got < 12 {
        match s.read(&mut buf[got..]) {
            Ok(0) | Err(_) => break,
            Ok(n) => got += n,
        }
    }
    parse_status_line(&buf[..got]).is_some_and(|c| c < 500)
}

/// Status code of an HTTP/1.x status line.
pub fn parse_status_line(b: &[u8]) -> Option<u16> {
    let s = std::str::from_utf8(b.get(..12)?).ok()?;
    if !s.starts_with("HTTP/1.") {
        return None;
    }
    s[9..12].parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_lines() {
        assert_eq!(parse_status_line(b"HTTP/1.1 200 OK\r\n"), Some(200));
        assert_eq!(parse_status_line(b"HTTP/1.0 503 x"), Some(503));
        assert_eq!(parse_status_line(b"SSH-2.0-OpenSSH"), None);
        assert_eq!(parse_status_line(b"HTTP/1.1"), None);
    }
}
