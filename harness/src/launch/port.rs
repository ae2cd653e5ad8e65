//! Ports: picking a free loopback port, and proving who listens on one.
//!
//! The proof: a stale server on the port once made two
//! "different" arms identical. Connecting to the port proves nothing about
//! who answers, so rig reads the kernel's socket tables: LISTEN sockets on
//! the port in `/proc/net/tcp{,6}` give socket inodes, and the process holding
//! `socket:[inode]` among its `/proc/<pid>/fd/*` is the holder.
//!
//! Caveat: `/proc/net/tcp*` lists the sockets of rig's own network
//! namespace; a target in another namespace has no listener there.

use std::collections::HashSet;
use std::net::TcpListener;

pub use crate::process::{all_pids, descendants, descendants_in, parse_stat_ppid};

/// A free loopback port: bind 127.0.0.1:0, read the port, close. The
/// port is also free for UDP (a target serving HTTP/3 binds the UDP port
/// of the same number), else another is tried.
///
/// There is a small race: between the close and the target's bind another
/// process may take the port. The launcher's holder proof then finds the
/// other process, so a loser is never measured, and the launch is made
/// again on a fresh port (`launch::start::launch`).
pub fn free_port() -> std::io::Result<u16> {
    let mut last = None;
    for _ in 0..64 {
        let l = TcpListener::bind(("127.0.0.1", 0))?;
        let port = l.local_addr()?.port();
        match std::net::UdpSocket::bind(("127.0.0.1", port)) {
            Ok(_) => return Ok(port),
            Err(e) => last = Some(e),
        }
    }
    Err(last.expect("64 tries"))
}

/// One LISTEN socket from `/proc/net/tcp{,6}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listener {
    pub port: u16,
    pub inode: u64,
    pub v6: bool,
}

/// Where a server listens: a TCP LISTEN socket, or (HTTP/3 over QUIC) an
/// unconnected UDP socket bound to the port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Tcp,
    Udp,
}

/// LISTEN sockets in the text of `/proc/net/tcp` (or `tcp6`).
pub fn parse_net_tcp(text: &str, v6: bool) -> Vec<Listener> {
    parse_net(text, v6, Transport::Tcp)
}

/// Listening sockets in the text of `/proc/net/{tcp,udp}{,6}`: TCP in
/// LISTEN (`0A`); UDP unconnected (`07`, no remote address), which is how
/// a QUIC server's socket looks (a connected UDP socket is a client's).
pub fn parse_net(text: &str, v6: bool, transport: Transport) -> Vec<Listener> {
    const TCP_LISTEN: &str = "0A";
    const UDP_UNCONNECTED: &str = "07";
    let mut out = Vec::new();
    for line in text.lines().skip(1) {
        // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 10 {
            continue;
        }
        let listening = match transport {
            Transport::Tcp => f[3] == TCP_LISTEN,
            Transport::Udp => {
                f[3] == UDP_UNCONNECTED && f[2].rsplit_once(':').is_some_and(|(_, p)| p == "0000")
            }
        };
        if !listening {
            continue;
        }
        let Some((_, port_hex)) = f[1].rsplit_once(':') else {
            continue;
        };
        let (Ok(port), Ok(inode)) = (u16::from_str_radix(port_hex, 16), f[9].parse::<u64>()) else {
            continue;
        };
        if inode != 0 {
            out.push(Listener { port, inode, v6 });
        }
    }
    out
}

/// Every LISTEN socket (IPv4 and IPv6) of rig's network namespace.
pub fn listeners() -> Vec<Listener> {
    listeners_on(Transport::Tcp)
}

/// Every listening socket of `transport` (IPv4 and IPv6) of rig's network
/// namespace: from the kernel's sock_diag, which answers with the
/// listeners alone however many other sockets there are, or (a kernel
/// without it) from `/proc/net`.
pub fn listeners_on(transport: Transport) -> Vec<Listener> {
    let protocol = match transport {
        Transport::Tcp => libc::IPPROTO_TCP,
        Transport::Udp => libc::IPPROTO_UDP,
    } as u8;
    let mut out = Vec::new();
    for (family, v6) in [(libc::AF_INET, false), (libc::AF_INET6, true)] {
        match super::sockdiag::listening(family as u8, protocol) {
            Ok(found) => out.extend(
                found
                    .into_iter()
                    .filter(|d| d.inode != 0 && (transport == Transport::Tcp || d.dport == 0))
                    .map(|d| Listener {
                        port: d.sport,
                        inode: u64::from(d.inode),
                        v6,
                    }),
            ),
            Err(_) => return listeners_in_proc(transport),
        }
    }
    out
}

/// [`listeners_on`] from `/proc/net/{tcp,udp}{,6}`: every socket of the
/// namespace is listed there, so this is slow on a machine with many.
pub fn listeners_in_proc(transport: Transport) -> Vec<Listener> {
    let files = match transport {
        Transport::Tcp => [("/proc/net/tcp", false), ("/proc/net/tcp6", true)],
        Transport::Udp => [("/proc/net/udp", false), ("/proc/net/udp6", true)],
    };
    let mut out = Vec::new();
    for (file, v6) in files {
        if let Ok(text) = std::fs::read_to_string(file) {
            out.extend(parse_net(&text, v6, transport));
        }
    }
    out
}

/// `(pid, inode)` for every process holding a LISTEN socket on `port` (any
/// address, v4 or v6). One socket shared by several processes (inherited
/// across fork) appears once per process.
pub fn port_holders(port: u16) -> Vec<(u32, u64)> {
    port_holders_on(port, Transport::Tcp)
}

/// [`port_holders`] for the listening sockets of `transport`. Reads the
/// descriptors of every process: it stops early when rig is interrupted
/// (the caller then sees fewer holders, and stops itself).
pub fn port_holders_on(port: u16, transport: Transport) -> Vec<(u32, u64)> {
    let inodes: HashSet<u64> = listeners_on(transport)
        .into_iter()
        .filter(|l| l.port == port)
        .map(|l| l.inode)
        .collect();
    if inodes.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::new();
    for pid in all_pids() {
        if crate::interrupt::requested() {
            break;
        }
        let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
            continue;
        };
        for fd in fds.filter_map(Result::ok) {
            let Ok(link) = std::fs::read_link(fd.path()) else {
                continue;
            };
            if let Some(inode) = socket_inode(&link.to_string_lossy()) {
                if inodes.contains(&inode) && !out.contains(&(pid, inode)) {
                    out.push((pid, inode));
                }
            }
        }
    }
    out.sort_unstable();
    out
}

/// `socket:[123]` → 123.
pub fn socket_inode(link: &str) -> Option<u64> {
    link.strip_prefix("socket:[")?
        .strip_suffix(']')?
        .parse()
        .ok()
}

/// Process group from the text of `/proc/<pid>/stat`.
pub fn parse_stat_pgrp(stat: &str) -> Option<u32> {
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(2)?
        .parse()
        .ok()
}

/// Who holds the listener on a launched target's port, proven.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PortProof {
    pub port: u16,
    /// The socket inodes of the LISTEN sockets on the port.
    pub inodes: Vec<u64>,
    /// Holders: the launched pid and/or its descendants.
    pub holders: Vec<u32>,
    /// True when a holder is a descendant rather than the launched pid
    /// itself (a pre-fork server, or a wrapper that forks).
    pub via_descendant: bool,
}

/// Outcome of checking a port's holders against the process rig started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HolderCheck {
    Proven(PortProof),
    /// Nothing listens on the port.
    NoListener,
    /// Someone outside the launched process tree holds a listener.
    Other {
        pid: u32,
        cmdline: String,
    },
}

/// Check that every LISTEN socket on `port` is held by `pid` or one of its
/// descendants.
pub fn check_holder(port: u16, pid: u32) -> HolderCheck {
    check_holder_on(port, pid, Transport::Tcp)
}

/// [`check_holder`] for the listening sockets of `transport`.
pub fn check_holder_on(port: u16, pid: u32, transport: Transport) -> HolderCheck {
    let holders = port_holders_on(port, transport);
    if holders.is_empty() {
        return HolderCheck::NoListener;
    }
    let family: HashSet<u32> = std::iter::once(pid).chain(descendants(pid)).collect();
    if let Some(&(other, _)) = holders.iter().find(|(p, _)| !family.contains(p)) {
        return HolderCheck::Other {
            pid: other,
            cmdline: super::cmdline(other),
        };
    }
    let mut inodes: Vec<u64> = holders.iter().map(|h| h.1).collect();
    inodes.dedup();
    let mut pids: Vec<u32> = holders.iter().map(|h| h.0).collect();
    pids.dedup();
    HolderCheck::Proven(PortProof {
        port,
        inodes,
        via_descendant: !pids.contains(&pid),
        holders: pids,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TCP: &str = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:A8CB 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 123456 1 0000000000000000 100 0 0 10 0
   1: 0100007F:A8CB 0100007F:D2F0 01 00000000:00000000 00:00000000 00000000     0        0 0 1 0000000000000000 20 4 30 10 -1
   2: 00000000:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 777 1 0000000000000000 100 0 0 10 0
";
    const TCP6: &str = "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000001000000:1F90 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 999 1 0000000000000000 100 0 0 10 0
";

    #[test]
    fn a_udp_listener_is_an_unconnected_bound_socket() {
        let udp = "   sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops
  100: 0100007F:84C1 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 4242 2 0000000000000000 0
  101: 0100007F:D2F0 0100007F:84C1 01 00000000:00000000 00:00000000 00000000     0        0 4343 2 0000000000000000 0
";
        assert_eq!(
            parse_net(udp, false, Transport::Udp),
            vec![Listener {
                port: 0x84C1,
                inode: 4242,
                v6: false
            }]
        );
        assert!(parse_net(TCP, false, Transport::Udp).is_empty());
    }

    #[test]
    fn parses_only_listen_sockets() {
        assert_eq!(
            parse_net_tcp(TCP, false),
            vec![
                Listener {
                    port: 43211,
                    inode: 123456,
                    v6: false
                },
                Listener {
                    port: 22,
                    inode: 777,
                    v6: false
                },
            ]
        );
        assert_eq!(
            parse_net_tcp(TCP6, true),
            vec![Listener {
                port: 8080,
                inode: 999,
                v6: true
            }]
        );
    }

    #[test]
    fn socket_links() {
        assert_eq!(socket_inode("socket:[123]"), Some(123));
        assert_eq!(socket_inode("pipe:[123]"), None);
        assert_eq!(socket_inode("/dev/null"), None);
    }

    #[test]
    fn stat_fields_after_odd_comm() {
        let stat = "42 (a) b (c) S 7 42 42 0 -1";
        assert_eq!(parse_stat_ppid(stat), Some(7));
        assert_eq!(parse_stat_pgrp(stat), Some(42));
    }

    #[test]
    fn descendants_walk_the_tree() {
        let t = [(2, 1), (3, 2), (4, 3), (5, 1), (6, 9)];
        assert_eq!(descendants_in(2, &t), vec![3, 4]);
        assert_eq!(descendants_in(1, &t), vec![2, 3, 4, 5]);
        assert_eq!(descendants_in(6, &t), Vec::<u32>::new());
    }

    /// sock_diag and /proc/net agree on the listeners (a v4 TCP one, and
    /// an unconnected UDP one as a QUIC server's).
    #[test]
    fn sock_diag_and_proc_net_list_the_same_listeners() {
        use std::os::fd::AsRawFd;
        let t = TcpListener::bind(("127.0.0.1", 0)).unwrap();
        let u = std::net::UdpSocket::bind(("127.0.0.1", 0)).unwrap();
        let inode = |fd: i32| {
            socket_inode(
                &std::fs::read_link(format!("/proc/self/fd/{fd}"))
                    .unwrap()
                    .to_string_lossy(),
            )
            .unwrap()
        };
        for (transport, fd, port) in [
            (
                Transport::Tcp,
                t.as_raw_fd(),
                t.local_addr().unwrap().port(),
            ),
            (
                Transport::Udp,
                u.as_raw_fd(),
                u.local_addr().unwrap().port(),
            ),
        ] {
            // Other tests open and close sockets meanwhile: compare on this
            // test's own.
            let mine = |v: Vec<Listener>| -> Vec<Listener> {
                v.into_iter().filter(|l| l.inode == inode(fd)).collect()
            };
            let want = vec![Listener {
                port,
                inode: inode(fd),
                v6: false,
            }];
            assert_eq!(mine(listeners_on(transport)), want, "{transport:?}");
            assert_eq!(mine(listeners_in_proc(transport)), want, "{transport:?}");
        }
    }

    #[test]
    fn finds_its_own_listener() {
        let l = TcpListener::bind(("127.0.0.1", 0)).unwrap();
        let port = l.local_addr().unwrap().port();
        let me = std::process::id();
        let h = port_holders(port);
        assert_eq!(h.len(), 1, "{h:?}");
        assert_eq!(h[0].0, me);
        match check_holder(port, me) {
            HolderCheck::Proven(p) => assert!(!p.via_descendant && p.holders == vec![me]),
            other => panic!("{other:?}"),
        }
    }
}
