//! Counting the runs of many code addresses with one uprobe_multi link per
//! process (kernel 6.6 on): a per-CPU counter per attach cookie, no stack,
//! no argument. The links go in and out in one batch each (about 17 ms in
//! and 32 ms out for 240 addresses here), where a perf-event uprobe each
//! costs about 76 ms to take out: counting the 240 inlined paths of an
//! interpreter that way would add some 18 s to every window.
//!
//! aya 0.14 loads no program for a uprobe_multi link (its program loader
//! sets no `expected_attach_type` for uprobes), so this one program of 14
//! instructions is loaded, and its map made and read, with bpf(2)
//! directly.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

/// bpf(2) commands and constants (uapi/linux/bpf.h).
const BPF_MAP_CREATE: i64 = 0;
const BPF_MAP_LOOKUP_ELEM: i64 = 1;
const BPF_PROG_LOAD: i64 = 5;
const BPF_OBJ_GET_INFO_BY_FD: i64 = 15;
const BPF_LINK_CREATE: i64 = 28;
const BPF_MAP_TYPE_PERCPU_ARRAY: u32 = 6;
const BPF_PROG_TYPE_KPROBE: u32 = 2;
const BPF_TRACE_UPROBE_MULTI: u32 = 48;
const HELPER_MAP_LOOKUP_ELEM: i32 = 1;
const HELPER_GET_ATTACH_COOKIE: i32 = 174;

/// Per-CPU counters, one per cookie, and the program that counts into
/// them; the links that hold it on each process's addresses.
pub struct MultiCounts {
    map: OwnedFd,
    prog: OwnedFd,
    links: Vec<OwnedFd>,
    counters: u32,
    cpus: usize,
}

impl MultiCounts {
    /// `counters` counters, all zero, and the program; no link yet. Fails
    /// on a kernel without uprobe_multi links (before 6.6).
    pub fn new(counters: u32) -> Result<MultiCounts, String> {
        let cpus = aya::util::nr_cpus().map_err(|(what, e)| format!("{what}: {e}"))?;
        let mut attr = [0u8; 72];
        put32(&mut attr, 0, BPF_MAP_TYPE_PERCPU_ARRAY);
        put32(&mut attr, 4, 4);
        put32(&mut attr, 8, 8);
        put32(&mut attr, 12, counters.max(1));
        let map = bpf(BPF_MAP_CREATE, &mut attr).map_err(|e| format!("a counter map: {e}"))?;
        let prog = load_program(&map).map_err(|e| {
            format!("no uprobe_multi program on this kernel (links of many uprobes are 6.6 and later): {e}")
        })?;
        Ok(MultiCounts {
            map,
            prog,
            links: Vec::new(),
            counters: counters.max(1),
            cpus,
        })
    }

    /// One link on `sites` (file offset, counter) of the file at `path`,
    /// counting the runs of process `pid` only.
    pub fn attach(&mut self, path: &Path, sites: &[(u64, u32)], pid: u32) -> Result<(), String> {
        use std::os::unix::ffi::OsStrExt;
        if sites.is_empty() {
            return Ok(());
        }
        let mut cpath = path.as_os_str().as_bytes().to_vec();
        cpath.push(0);
        let offsets: Vec<u64> = sites.iter().map(|s| s.0).collect();
        let cookies: Vec<u64> = sites.iter().map(|s| u64::from(s.1)).collect();
        let mut attr = [0u8; 64];
        put32(&mut attr, 0, self.prog.as_raw_fd() as u32);
        put32(&mut attr, 8, BPF_TRACE_UPROBE_MULTI);
        put64(&mut attr, 16, cpath.as_ptr() as u64);
        put64(&mut attr, 24, offsets.as_ptr() as u64);
        put64(&mut attr, 40, cookies.as_ptr() as u64);
        put32(&mut attr, 48, sites.len() as u32);
        put32(&mut attr, 56, pid);
        let link = bpf(BPF_LINK_CREATE, &mut attr)
            .map_err(|e| format!("a uprobe_multi link on {}: {e}", path.display()))?;
        self.links.push(link);
        Ok(())
    }

    /// Every counter now, summed over the CPUs.
    pub fn read(&self) -> Result<Vec<u64>, String> {
        (0..self.counters)
            .map(|key| {
                let mut values = vec![0u64; self.cpus];
                let mut attr = [0u8; 32];
                put32(&mut attr, 0, self.map.as_raw_fd() as u32);
                put64(&mut attr, 8, &key as *const u32 as u64);
                put64(&mut attr, 16, values.as_mut_ptr() as u64);
                bpf_raw(BPF_MAP_LOOKUP_ELEM, &mut attr)
                    .map_err(|e| format!("counter {key}: {e}"))?;
                Ok(values.iter().sum())
            })
            .collect()
    }
}

/// The program: `counts[bpf_get_attach_cookie(ctx)] += 1` on this CPU.
fn load_program(map: &OwnedFd) -> std::io::Result<OwnedFd> {
    let insns = [
        insn(0xbf, 6, 1, 0, 0),                        // r6 = r1
        insn(0x85, 0, 0, 0, HELPER_GET_ATTACH_COOKIE), // r0 = cookie
        insn(0x63, 10, 0, -4, 0),                      // *(u32 *)(r10 - 4) = r0
        insn(0xbf, 2, 10, 0, 0),                       // r2 = r10
        insn(0x07, 2, 0, 0, -4),                       // r2 += -4
        insn(0x18, 1, 1, 0, map.as_raw_fd()),          // r1 = the map (ld_imm64)
        insn(0, 0, 0, 0, 0),
        insn(0x85, 0, 0, 0, HELPER_MAP_LOOKUP_ELEM), // r0 = &counts[key]
        insn(0x15, 0, 0, 3, 0),                      // if r0 == 0 goto out
        insn(0x79, 1, 0, 0, 0),                      // r1 = *(u64 *)r0
        insn(0x07, 1, 0, 0, 1),                      // r1 += 1
        insn(0x7b, 0, 1, 0, 0),                      // *(u64 *)r0 = r1
        insn(0xb7, 0, 0, 0, 0),                      // out: r0 = 0
        insn(0x95, 0, 0, 0, 0),                      // exit
    ];
    let code: Vec<u8> = insns.concat();
    let license = b"GPL\0";
    let name = b"rig_unseen";
    let mut attr = [0u8; 72];
    put32(&mut attr, 0, BPF_PROG_TYPE_KPROBE);
    put32(&mut attr, 4, insns.len() as u32);
    put64(&mut attr, 8, code.as_ptr() as u64);
    put64(&mut attr, 16, license.as_ptr() as u64);
    attr[48..48 + name.len()].copy_from_slice(name);
    put32(&mut attr, 68, BPF_TRACE_UPROBE_MULTI);
    bpf(BPF_PROG_LOAD, &mut attr)
}

/// One eBPF instruction: opcode, registers, offset, immediate.
fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> [u8; 8] {
    let mut b = [0u8; 8];
    b[0] = code;
    b[1] = (src << 4) | dst;
    b[2..4].copy_from_slice(&off.to_le_bytes());
    b[4..8].copy_from_slice(&imm.to_le_bytes());
    b
}

fn put32(attr: &mut [u8], at: usize, v: u32) {
    attr[at..at + 4].copy_from_slice(&v.to_ne_bytes());
}

fn put64(attr: &mut [u8], at: usize, v: u64) {
    attr[at..at + 8].copy_from_slice(&v.to_ne_bytes());
}

/// bpf(2) with `attr`: what it returns.
fn bpf_raw(cmd: i64, attr: &mut [u8]) -> std::io::Result<i64> {
    // SAFETY: `attr` is a bpf_attr of the size passed, and every pointer
    // in it points at memory that outlives the call.
    let r = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.as_mut_ptr(), attr.len()) };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(r)
}

/// bpf(2) with `attr`, a command that makes an object: its fd.
fn bpf(cmd: i64, attr: &mut [u8]) -> std::io::Result<OwnedFd> {
    let fd = bpf_raw(cmd, attr)?;
    // SAFETY: the kernel returned a new fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

impl MultiCounts {
    /// The program's run time and runs so far, while the kernel's BPF
    /// run-time statistics are on (`None` when its id cannot be read).
    pub fn runtime(&self) -> Option<(std::time::Duration, u64)> {
        let mut info = [0u8; 256];
        let mut attr = [0u8; 16];
        put32(&mut attr, 0, self.prog.as_raw_fd() as u32);
        put32(&mut attr, 4, info.len() as u32);
        put64(&mut attr, 8, info.as_mut_ptr() as u64);
        bpf_raw(BPF_OBJ_GET_INFO_BY_FD, &mut attr).ok()?;
        let id = u32::from_ne_bytes(info[4..8].try_into().ok()?);
        aya::programs::loaded_programs()
            .flatten()
            .find(|p| p.id() == id)
            .map(|p| (p.run_time(), p.run_count()))
    }
}

/// One counting uprobe (the program above, in its own link) on the entry
/// of function `symbol` of process `pid`'s C library: what one hit of the
/// counting links costs, for `rig probe-cost`.
pub struct CountingProbe(MultiCounts);

impl CountingProbe {
    pub fn at_c_library(pid: u32, symbol: &str) -> Result<CountingProbe, String> {
        let maps = crate::process::maps::ProcMaps::read(pid).map_err(|e| e.to_string())?;
        let (lib, _) = crate::runtime::c_library(pid, &maps)
            .ok_or_else(|| format!("process {pid} maps no C library"))?;
        let open = maps.readable_path(&lib);
        let sym = crate::elf::lookup_symbol(&open, symbol)
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("{lib} has no {symbol}"))?;
        let mut counts = MultiCounts::new(1)?;
        counts.attach(&open, &[(sym.file_offset, 0)], pid)?;
        Ok(CountingProbe(counts))
    }

    /// Its program's run time and runs (see [`MultiCounts::runtime`]).
    pub fn runtime(&self) -> Option<(std::time::Duration, u64)> {
        self.0.runtime()
    }
}
