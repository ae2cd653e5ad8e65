//! rig's own /proc readers against the `procfs` crate's, side by side.
//!
//! `cargo run --release -p rig --example procfs_bench [-- ITERATIONS]`
//!
//! Each round reads the same process once with each reader, alternating
//! which goes first, so both see the same machine load; the report is the
//! median per reader and the ratio of the medians. Three readings, each
//! where rig makes it:
//! - maps + stat + status of one process (what the `--tree` follower and
//!   attach read for every process that joins), for a large process (this
//!   one, after mapping `LARGE_MAPPINGS` separate file regions) and a fresh
//!   small one (`sleep`);
//! - the (pid, ppid) table of every process (what `process::descendants`
//!   reads for the sampler every 50 ms and for every tree listing);
//! - the socket descriptors of every process (the port-holder proof).
//!
//! Machines are shared: quote the ratios and medians of one run, never a
//! single time.

use std::time::Instant;

use rig::process::maps::ProcMaps;
use rig::sample::{parse_stat, parse_status};

/// Separate file mappings added to this process, so its maps is as long as
/// a large server's (a JVM or a browser has thousands of lines).
const LARGE_MAPPINGS: usize = 4000;

fn rig_one(pid: u32) -> usize {
    let maps = ProcMaps::read(pid).expect("rig maps");
    let stat = parse_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap()).unwrap();
    let status = parse_status(&std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap());
    maps.mappings.len() + stat.threads as usize + status.threads as usize
}

fn procfs_one(pid: u32) -> usize {
    let p = procfs::process::Process::new(pid as i32).expect("procfs process");
    let maps = p.maps().expect("procfs maps");
    let stat = p.stat().expect("procfs stat");
    let status = p.status().expect("procfs status");
    maps.0.len() + stat.num_threads as usize + status.threads as usize
}

fn rig_table() -> usize {
    rig::process::all_pids()
        .into_iter()
        .filter_map(|p| {
            let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).ok()?;
            rig::process::parse_stat_ppid(&stat).map(|pp| (p, pp))
        })
        .count()
}

fn procfs_table() -> usize {
    procfs::process::all_processes()
        .expect("procfs all_processes")
        .filter_map(|p| Some((p.ok()?.stat().ok()?.pid, 0)))
        .count()
}

/// Socket inodes held by every process (what the port-holder proof reads:
/// `launch::port::port_holders_on`).
fn rig_sockets() -> usize {
    let mut n = 0;
    for pid in rig::process::all_pids() {
        let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
            continue;
        };
        for fd in fds.filter_map(Result::ok) {
            let Ok(link) = std::fs::read_link(fd.path()) else {
                continue;
            };
            n += usize::from(rig::launch::port::socket_inode(&link.to_string_lossy()).is_some());
        }
    }
    n
}

fn procfs_sockets() -> usize {
    let mut n = 0;
    for p in procfs::process::all_processes().expect("procfs all_processes") {
        let Ok(fds) = p.and_then(|p| p.fd()) else {
            continue;
        };
        for fd in fds.filter_map(Result::ok) {
            n += usize::from(matches!(fd.target, procfs::process::FDTarget::Socket(_)));
        }
    }
    n
}

fn median(v: &mut [u128]) -> u128 {
    v.sort_unstable();
    v[v.len() / 2]
}

fn compare(what: &str, iterations: usize, a: impl Fn() -> usize, b: impl Fn() -> usize) {
    // The two readers must see the same thing, or the times compare nothing.
    let (x, y) = (a(), b());
    let (mut ta, mut tb) = (Vec::new(), Vec::new());
    for i in 0..iterations {
        let time = |f: &dyn Fn() -> usize| {
            let t = Instant::now();
            std::hint::black_box(f());
            t.elapsed().as_nanos()
        };
        if i % 2 == 0 {
            ta.push(time(&a));
            tb.push(time(&b));
        } else {
            tb.push(time(&b));
            ta.push(time(&a));
        }
    }
    let (ma, mb) = (median(&mut ta), median(&mut tb));
    println!(
        "{what:<44} rig {:>9.1} µs   procfs {:>9.1} µs   procfs/rig {:>5.2}   (items rig {x}, procfs {y})",
        ma as f64 / 1e3,
        mb as f64 / 1e3,
        mb as f64 / ma as f64,
    );
}

fn main() {
    let iterations: usize = std::env::args()
        .nth(1)
        .map(|s| s.parse().expect("ITERATIONS is a number"))
        .unwrap_or(1000);
    // Map this binary LARGE_MAPPINGS times, each a separate line in maps
    // (same offset, so the kernel cannot merge neighbours).
    let exe = std::fs::File::open("/proc/self/exe").unwrap();
    for _ in 0..LARGE_MAPPINGS {
        use std::os::fd::AsRawFd;
        // SAFETY: a fresh read-only private mapping of an open file; never
        // unmapped, never touched.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ,
                libc::MAP_PRIVATE,
                exe.as_raw_fd(),
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
    }
    let me = std::process::id();
    let mut small = std::process::Command::new("sleep")
        .arg("600")
        .spawn()
        .unwrap();
    // Let it exec before reading its maps.
    while rig::process::Image::of(small.id()).is_none_or(|i| !i.exe.ends_with("sleep")) {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let lines = ProcMaps::read(me).unwrap().mappings.len();
    let small_lines = ProcMaps::read(small.id()).unwrap().mappings.len();
    println!("{iterations} rounds, medians, readers alternating first");
    compare(
        &format!("maps+stat+status, large ({lines} maps lines)"),
        iterations,
        || rig_one(me),
        || procfs_one(me),
    );
    compare(
        &format!("maps+stat+status, small ({small_lines} maps lines)"),
        iterations,
        || rig_one(small.id()),
        || procfs_one(small.id()),
    );
    compare(
        &format!("(pid, ppid) of every process ({} pids)", rig_table()),
        iterations / 10,
        rig_table,
        procfs_table,
    );
    compare(
        &format!("socket fds of every process ({} sockets)", rig_sockets()),
        iterations / 10,
        rig_sockets,
        procfs_sockets,
    );
    let _ = small.kill();
    let _ = small.wait();
}
