//! A uprobe at a USDT marker whose semaphore the kernel raises.
//!
//! A marker guarded by a semaphore (PostgreSQL's, CPython's) runs its `nop`
//! only while the 16-bit counter beside it is non-zero. Writing the counter
//! into the target would leave it raised if rig died; the kernel instead
//! keeps it as a reference counter of the uprobe (`ref_ctr_offset`, Linux
//! 4.20): raised in every process the uprobe is installed in, lowered when
//! the uprobe goes — when rig closes it, and when rig is killed and the
//! kernel closes it. aya 0.14 opens uprobes without that offset, so this
//! one is opened here, through the uprobe PMU as aya does, and a BPF
//! program is attached to it by its descriptor.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use perf_event_open_sys as sys;

const UPROBE_PMU: &str = "/sys/bus/event_source/devices/uprobe";

/// An open uprobe perf event in one process, counting its marker's
/// semaphore up while it lives.
#[derive(Debug)]
pub struct GuardedUprobe {
    fd: OwnedFd,
}

/// The uprobe PMU's type and the first bit of `config` that holds the
/// reference counter offset, from sysfs; an error naming what the kernel
/// lacks otherwise.
fn pmu() -> io::Result<(u32, u32)> {
    let read = |f: &str| std::fs::read_to_string(format!("{UPROBE_PMU}/{f}"));
    let ty: u32 = read("type")?
        .trim()
        .parse()
        .map_err(|_| io::Error::other("the uprobe PMU's type is not a number"))?;
    let format = read("format/ref_ctr_offset").map_err(|_| {
        io::Error::other(
            "this kernel's uprobes have no reference counter (Linux 4.20 added it): \
             rig cannot raise a USDT semaphore",
        )
    })?;
    // `config:32-63`
    let shift = format
        .trim()
        .strip_prefix("config:")
        .and_then(|r| r.split('-').next())
        .and_then(|b| b.parse().ok())
        .ok_or_else(|| io::Error::other(format!("ref_ctr_offset format `{}`", format.trim())))?;
    Ok((ty, shift))
}

impl GuardedUprobe {
    /// A uprobe at `offset` of `file` in process `pid` (all its threads),
    /// with the semaphore at file offset `ref_ctr_offset` of the same file.
    /// Disabled until a program is attached ([`GuardedUprobe::attach`]),
    /// yet the semaphore is raised from here on.
    pub fn open(file: &Path, offset: u64, ref_ctr_offset: u64, pid: u32) -> io::Result<Self> {
        Self::open_in(file, offset, ref_ctr_offset, Some(pid))
    }

    /// [`GuardedUprobe::open`] in process `pid`, or (`None`) in every
    /// process that maps `file`, now or later (a forked child from its
    /// first instruction); `ref_ctr_offset` 0: no semaphore.
    pub fn open_in(
        file: &Path,
        offset: u64,
        ref_ctr_offset: u64,
        pid: Option<u32>,
    ) -> io::Result<Self> {
        let (ty, shift) = pmu()?;
        let path = CString::new(file.as_os_str().as_bytes())
            .map_err(|_| io::Error::other("a path with a NUL byte"))?;
        // SAFETY: perf_event_attr is plain data; all zero is its default.
        let mut attr: sys::bindings::perf_event_attr = unsafe { std::mem::zeroed() };
        attr.size = std::mem::size_of::<sys::bindings::perf_event_attr>() as u32;
        attr.type_ = ty;
        attr.config = ref_ctr_offset << shift;
        attr.__bindgen_anon_3.config1 = path.as_ptr() as u64;
        attr.__bindgen_anon_4.config2 = offset;
        // SAFETY: attr is initialized and `path` outlives the call.
        let fd = unsafe {
            // Every process: pid -1 on one CPU, as libbpf opens a
            // system-wide uprobe (its program runs on whichever CPU hits).
            sys::perf_event_open(
                &mut attr,
                pid.map_or(-1, |p| p as libc::pid_t),
                if pid.is_some() { -1 } else { 0 },
                -1,
                sys::bindings::PERF_FLAG_FD_CLOEXEC as libc::c_ulong,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a descriptor perf_event_open just returned, owned by none.
        Ok(GuardedUprobe {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    /// Run the loaded BPF program `prog` (a uprobe program) at each hit,
    /// handing it `cookie` (`bpf_get_attach_cookie`) through a BPF link, as
    /// aya attaches its uprobes (Linux 5.15). The link lives as long as the
    /// descriptor returned.
    pub fn attach_with_cookie(&self, prog: BorrowedFd<'_>, cookie: u64) -> io::Result<OwnedFd> {
        // union bpf_attr's `link_create`: prog_fd, target_fd, attach_type
        // (BPF_PERF_EVENT), flags, then perf_event.bpf_cookie at 16.
        const BPF_LINK_CREATE: libc::c_long = 28;
        const BPF_PERF_EVENT: u32 = 41;
        let mut attr = [0u8; 32];
        attr[0..4].copy_from_slice(&(prog.as_raw_fd() as u32).to_ne_bytes());
        attr[4..8].copy_from_slice(&(self.fd.as_raw_fd() as u32).to_ne_bytes());
        attr[8..12].copy_from_slice(&BPF_PERF_EVENT.to_ne_bytes());
        attr[16..24].copy_from_slice(&cookie.to_ne_bytes());
        // SAFETY: `attr` is a valid, zero-padded prefix of union bpf_attr.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_bpf,
                BPF_LINK_CREATE,
                attr.as_ptr(),
                attr.len() as libc::c_uint,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a descriptor the bpf syscall just returned, owned by none.
        Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
    }

    /// Run the loaded BPF program `prog` (a uprobe program) at each hit.
    pub fn attach(&self, prog: BorrowedFd<'_>) -> io::Result<()> {
        let fd = self.fd.as_raw_fd();
        // SAFETY: ioctls on a perf event descriptor this value owns.
        if unsafe { sys::ioctls::SET_BPF(fd, prog.as_raw_fd() as u32) } < 0 {
            return Err(io::Error::last_os_error());
        }
        if unsafe { sys::ioctls::ENABLE(fd, 0) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}
