//! Other clients of the target during a driven window: rig divides the
//! window's counts by the requests it sent, which is only right when rig
//! was the target's only client.
//!
//! In: the target's port. Out: the connections to that port that were
//! not rig's, seen while the window was open. A thread reads
//! `/proc/net/tcp{,6}` every few milliseconds: a server-side socket on the
//! port whose client-side twin is an open socket that rig does not hold
//! (not in `/proc/self/fd`) is another client's. A connection counts once
//! it is seen in two reads in a row: a socket of rig's that opened and
//! closed between the reads of rig's own descriptors around one table
//! read can look foreign once, never twice. A client connecting, asking
//! and closing between two reads is missed here; the accept calls of the
//! window catch it (see `foreign_accepts`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::Result;

use super::Counters;

/// How often the socket tables are read while the window is open.
const POLL: Duration = Duration::from_millis(5);

/// A TCP socket of one `/proc/net/tcp{,6}` line: the ports, the state
/// (`01` established) and the inode (0 once no process holds it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sock {
    pub local_port: u16,
    pub remote_port: u16,
    pub established: bool,
    pub inode: u64,
}

/// The sockets of a `/proc/net/tcp` or `/proc/net/tcp6` text.
pub fn parse_tcp(text: &str) -> Vec<Sock> {
    let port = |addr: &str| u16::from_str_radix(addr.rsplit_once(':')?.1, 16).ok();
    text.lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            Some(Sock {
                local_port: port(f.get(1)?)?,
                remote_port: port(f.get(2)?)?,
                established: *f.get(3)? == "01",
                inode: f.get(9)?.parse().ok()?,
            })
        })
        .collect()
}

/// Connections to `port` whose client side is held by a process (inode
/// not 0) other than rig (`own`): `(client port, client inode)`.
pub fn foreign(socks: &[Sock], port: u16, own: &BTreeSet<u64>) -> BTreeSet<(u16, u64)> {
    let clients: BTreeMap<u16, u64> = socks
        .iter()
        .filter(|s| s.remote_port == port && s.local_port != port)
        .map(|s| (s.local_port, s.inode))
        .collect();
    socks
        .iter()
        .filter(|s| s.local_port == port && s.established)
        .filter_map(|s| {
            let inode = *clients.get(&s.remote_port)?;
            (inode != 0 && !own.contains(&inode)).then_some((s.remote_port, inode))
        })
        .collect()
}

/// The socket inodes rig holds now.
fn own_sockets() -> BTreeSet<u64> {
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        return BTreeSet::new();
    };
    dir.filter_map(Result::ok)
        .filter_map(|e| {
            let link = std::fs::read_link(e.path()).ok()?;
            let l = link.to_str()?;
            l.strip_prefix("socket:[")?.strip_suffix(']')?.parse().ok()
        })
        .collect()
}

fn read_tables() -> Vec<Sock> {
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .flat_map(|t| parse_tcp(&t))
        .collect()
}

/// Other clients' connections seen while the window was open, as client
/// ports.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Peers {
    pub connections: BTreeSet<u16>,
}

/// One read: the foreign connections now.
fn look(port: u16) -> BTreeSet<(u16, u64)> {
    let mut own = own_sockets();
    let socks = read_tables();
    own.extend(own_sockets());
    foreign(&socks, port, &own)
}

/// Watches `port` from `start` to `stop`.
struct Watch {
    stop: Arc<AtomicBool>,
    seen: Arc<Mutex<BTreeSet<u16>>>,
    thread: JoinHandle<()>,
}

impl Watch {
    fn start(port: u16) -> Watch {
        let stop = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(Mutex::new(BTreeSet::new()));
        let (s, k) = (stop.clone(), seen.clone());
        let thread = std::thread::spawn(move || {
            let mut last = look(port);
            loop {
                let stopping = s.load(Ordering::Relaxed);
                let now = look(port);
                let twice: Vec<u16> = now.intersection(&last).map(|(p, _)| *p).collect();
                if let Ok(mut k) = k.lock() {
                    k.extend(twice);
                }
                last = now;
                if stopping {
                    break;
                }
                std::thread::sleep(POLL);
            }
        });
        Watch { stop, seen, thread }
    }

    fn stop(self) -> Peers {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.thread.join();
        let connections = self.seen.lock().map(|s| s.clone()).unwrap_or_default();
        Peers { connections }
    }
}

/// Counters `C` and a watch of the target's port over the same window.
pub struct Watched<C> {
    inner: C,
    port: u16,
    watch: Option<Watch>,
}

impl<C> Watched<C> {
    pub fn new(inner: C, port: u16) -> Watched<C> {
        Watched {
            inner,
            port,
            watch: None,
        }
    }
}

impl<C: Counters> Counters for Watched<C> {
    type Reading = (C::Reading, Peers);
    fn start(&mut self) -> Result<()> {
        self.inner.start()?;
        self.watch = Some(Watch::start(self.port));
        Ok(())
    }
    fn stop(self) -> Result<(C::Reading, Peers)> {
        let peers = self.watch.map(Watch::stop).unwrap_or_default();
        Ok((self.inner.stop()?, peers))
    }
}

/// The accept calls of a window that rig's own connections do not explain:
/// all of them when rig opened no connection inside the window (its
/// keep-alive connections were accepted before it), none otherwise (a
/// server's accept calls per connection are its own business).
pub fn foreign_accepts(accept_calls: u64, rig_tcp_handshakes: u64) -> u64 {
    if rig_tcp_handshakes == 0 {
        accept_calls
    } else {
        0
    }
}

/// The sentence a window with other clients carries, or `None`.
pub fn warning(peers: &Peers, accepts: u64, requests: u64) -> Option<String> {
    if peers.connections.is_empty() && accepts == 0 {
        return None;
    }
    let mut seen = Vec::new();
    if !peers.connections.is_empty() {
        let ports: Vec<String> = peers.connections.iter().map(u16::to_string).collect();
        seen.push(format!(
            "{} connection(s) that are not rig's were open to the target (client ports {})",
            peers.connections.len(),
            ports.join(", ")
        ));
    }
    if accepts > 0 {
        seen.push(format!(
            "the target accepted {accepts} connection(s) while rig opened none"
        ));
    }
    Some(format!(
        "OTHER TRAFFIC: {} during the window: the target served other clients, and their work \
         is in the counts, which are divided by rig's {requests} requests only; the window is \
         marked incomplete",
        seen.join("; ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TCP: &str = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 100 1 0000000000000000 100 0 0 10 0
   1: 0100007F:1F90 0100007F:9C40 01 00000000:00000000 00:00000000 00000000     0        0 101 1 0000000000000000 20 4 30 10 -1
   2: 0100007F:9C40 0100007F:1F90 01 00000000:00000000 00:00000000 00000000     0        0 201 1 0000000000000000 20 4 30 10 -1
   3: 0100007F:1F90 0100007F:9C41 01 00000000:00000000 00:00000000 00000000     0        0 102 1 0000000000000000 20 4 30 10 -1
   4: 0100007F:9C41 0100007F:1F90 01 00000000:00000000 00:00000000 00000000     0        0 202 1 0000000000000000 20 4 30 10 -1
   5: 0100007F:1F90 0100007F:9C42 01 00000000:00000000 00:00000000 00000000     0        0 103 1 0000000000000000 20 4 30 10 -1
   6: 0100007F:9C42 0100007F:1F90 04 00000000:00000000 00:00000000 00000000     0        0 0 1 0000000000000000 20 4 30 10 -1
";

    #[test]
    fn a_connection_is_foreign_when_its_client_socket_is_held_by_another_process() {
        let socks = parse_tcp(TCP);
        assert_eq!(socks.len(), 7);
        assert_eq!(
            socks[1],
            Sock {
                local_port: 8080,
                remote_port: 40000,
                established: true,
                inode: 101
            }
        );
        // 40000 is rig's (inode 201), 40001 another client's, 40002 closed
        // by its client (inode 0): only 40001 is foreign.
        let own: BTreeSet<u64> = [201].into();
        assert_eq!(foreign(&socks, 8080, &own), [(40001, 202)].into());
        assert!(foreign(&socks, 8080, &[201, 202].into()).is_empty());
        assert!(foreign(&socks, 9090, &own).is_empty());
    }

    #[test]
    fn accepts_are_foreign_only_when_rig_opened_no_connection() {
        assert_eq!(foreign_accepts(3, 0), 3);
        assert_eq!(foreign_accepts(3, 2), 0);
        assert!(warning(&Peers::default(), 0, 100).is_none());
        let w = warning(&Peers::default(), 2, 100).unwrap();
        assert!(w.contains("accepted 2 connection(s)"), "{w}");
        let p = Peers {
            connections: [40001].into(),
        };
        assert!(warning(&p, 0, 100).unwrap().contains("client ports 40001"));
    }
}
