//! Listening sockets on one port, asked of the kernel's `sock_diag`
//! netlink interface (`NETLINK_SOCK_DIAG`, `SOCK_DIAG_BY_FAMILY`), as `ss
//! -ltn` asks: the kernel filters by state, so the answer holds the
//! listeners alone. `/proc/net/tcp` lists every socket, TIME_WAIT ones
//! included: after a load test a machine holds 131,072 of them (the
//! default `tcp_max_tw_buckets`), a 20 MB file whose every read walks the
//! socket tables again; while other processes opened and closed sockets,
//! one port-holder proof through it took 5.5 s (measured here with
//! thousands of proofs in a loop beside two socket-churning processes).
//!
//! One request and its dump are the whole protocol (sock_diag(7)): a few
//! fixed C structs, written here rather than through a netlink crate
//! family. Where the kernel has no inet_diag (a module not loaded in a
//! guest kernel), callers fall back to `/proc/net`.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

const SOCK_DIAG_BY_FAMILY: u16 = 20;
const TCP_LISTEN: u8 = 10;
/// A UDP socket with no peer (`connect` never called): how a QUIC server's
/// socket looks; a connected one is a client's.
const UDP_UNCONNECTED: u8 = 7;

/// `struct inet_diag_sockid` (ports and addresses in network order).
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct SockId {
    sport: [u8; 2],
    dport: [u8; 2],
    src: [u32; 4],
    dst: [u32; 4],
    interface: u32,
    cookie: [u32; 2],
}

/// `struct inet_diag_req_v2`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct Request {
    family: u8,
    protocol: u8,
    ext: u8,
    pad: u8,
    states: u32,
    id: SockId,
}

/// `struct nlmsghdr` followed by the request.
#[repr(C)]
#[derive(Clone, Copy)]
struct Message {
    len: u32,
    kind: u16,
    flags: u16,
    seq: u32,
    pid: u32,
    req: Request,
}

const _: () = assert!(std::mem::size_of::<SockId>() == 48);
const _: () = assert!(std::mem::size_of::<Request>() == 56);
const _: () = assert!(std::mem::size_of::<Message>() == 72);

/// One socket of a dump: its state, local port, remote port and inode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Diag {
    pub state: u8,
    pub sport: u16,
    pub dport: u16,
    pub inode: u32,
}

/// The listening sockets of `protocol` (`IPPROTO_TCP` or `IPPROTO_UDP`) in
/// `family` (`AF_INET` or `AF_INET6`) of rig's network namespace: TCP in
/// LISTEN, UDP unconnected.
pub fn listening(family: u8, protocol: u8) -> io::Result<Vec<Diag>> {
    let state = match i32::from(protocol) {
        libc::IPPROTO_UDP => UDP_UNCONNECTED,
        _ => TCP_LISTEN,
    };
    // SAFETY: socket(2) with constant arguments; the fd is owned below.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            libc::NETLINK_SOCK_DIAG,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd was just opened and is owned by nothing else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let msg = Message {
        len: std::mem::size_of::<Message>() as u32,
        kind: SOCK_DIAG_BY_FAMILY,
        flags: (libc::NLM_F_REQUEST | libc::NLM_F_DUMP) as u16,
        seq: 1,
        pid: 0,
        req: Request {
            family,
            protocol,
            states: 1 << state,
            ..Request::default()
        },
    };
    // SAFETY: msg is a plain repr(C) value of the size given.
    let sent = unsafe {
        libc::send(
            fd.as_raw_fd(),
            (&msg as *const Message).cast(),
            std::mem::size_of::<Message>(),
            0,
        )
    };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut out = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        // SAFETY: buf is valid for its length.
        let n = unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        match parse(&buf[..n as usize], &mut out)? {
            true => return Ok(out),
            false if n == 0 => return Ok(out),
            false => {}
        }
    }
}

/// The sockets of one datagram of the dump into `out`; `Ok(true)` at its
/// end (`NLMSG_DONE`). A truncated or malformed message is an error, never
/// a read past the datagram.
fn parse(mut b: &[u8], out: &mut Vec<Diag>) -> io::Result<bool> {
    const HDR: usize = 16;
    const MSG: usize = 72; // struct inet_diag_msg
    let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidData, what.to_string());
    while b.len() >= HDR {
        let len = u32::from_ne_bytes(b[0..4].try_into().expect("4 bytes")) as usize;
        let kind = u16::from_ne_bytes(b[4..6].try_into().expect("2 bytes"));
        if len < HDR || len > b.len() {
            return Err(bad("a netlink message longer than its datagram"));
        }
        let body = &b[HDR..len];
        match i32::from(kind) {
            libc::NLMSG_DONE => return Ok(true),
            libc::NLMSG_ERROR => {
                let errno = body
                    .get(0..4)
                    .map(|e| i32::from_ne_bytes(e.try_into().expect("4 bytes")))
                    .unwrap_or(0);
                return Err(io::Error::from_raw_os_error(-errno));
            }
            _ if kind == SOCK_DIAG_BY_FAMILY => {
                if body.len() < MSG {
                    return Err(bad("a sock_diag message shorter than inet_diag_msg"));
                }
                out.push(Diag {
                    state: body[1],
                    sport: u16::from_be_bytes([body[4], body[5]]),
                    dport: u16::from_be_bytes([body[6], body[7]]),
                    inode: u32::from_ne_bytes(body[68..72].try_into().expect("4 bytes")),
                });
            }
            _ => {}
        }
        // Messages are 4-byte aligned within a datagram.
        let next = (len + 3) & !3;
        b = b.get(next..).unwrap_or(&[]);
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_a_listener_and_not_its_connections() {
        let l = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
        let port = l.local_addr().unwrap().port();
        let _c = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        let found: Vec<Diag> = listening(libc::AF_INET as u8, libc::IPPROTO_TCP as u8)
            .unwrap()
            .into_iter()
            .filter(|d| d.sport == port)
            .collect();
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].state, TCP_LISTEN);
        assert_ne!(found[0].inode, 0);
        let u = std::net::UdpSocket::bind(("127.0.0.1", 0)).unwrap();
        let uport = u.local_addr().unwrap().port();
        assert!(listening(libc::AF_INET as u8, libc::IPPROTO_UDP as u8)
            .unwrap()
            .iter()
            .any(|d| d.sport == uport && d.dport == 0));
    }

    #[test]
    fn malformed_dumps_are_errors_not_reads_past_the_end() {
        let mut out = Vec::new();
        // A header claiming more bytes than the datagram holds.
        let mut b = vec![0u8; 16];
        b[0..4].copy_from_slice(&64u32.to_ne_bytes());
        b[4..6].copy_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
        assert!(parse(&b, &mut out).is_err());
        // A sock_diag message too short for its body.
        b[0..4].copy_from_slice(&16u32.to_ne_bytes());
        assert!(parse(&b, &mut out).is_err());
        // The end of the dump.
        b[4..6].copy_from_slice(&(libc::NLMSG_DONE as u16).to_ne_bytes());
        assert!(parse(&b, &mut out).unwrap());
        assert!(out.is_empty());
    }
}
