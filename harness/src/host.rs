//! Facts about the machine a run measured on, for the manifest.

use serde::Serialize;

/// Whether the CPU exposes hardware counters to perf.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Pmu {
    pub instructions: bool,
    /// What the kernel said when asked for an instructions counter.
    pub detail: String,
}

#[derive(Clone, Debug, Serialize)]
pub struct HostFacts {
    pub rig_version: &'static str,
    pub cpu_model: String,
    pub online_cpus: usize,
    pub kernel: String,
    /// `v1`, `v2` or `hybrid` (v1 controllers plus a v2 mount).
    pub cgroup: String,
    pub pmu: Pmu,
    pub libc: Option<String>,
}

impl HostFacts {
    pub fn gather() -> HostFacts {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("model name"))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_string())
            .unwrap_or_else(|| "unknown".into());
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_string())
            .unwrap_or_default();
        HostFacts {
            rig_version: env!("CARGO_PKG_VERSION"),
            cpu_model,
            online_cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            kernel,
            cgroup: cgroup_version(),
            pmu: detect_pmu(),
            libc: glibc_version(),
        }
    }
}

fn cgroup_version() -> String {
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    let v1 = mounts
        .lines()
        .any(|l| l.split_whitespace().nth(2) == Some("cgroup"));
    let v2 = mounts
        .lines()
        .any(|l| l.split_whitespace().nth(2) == Some("cgroup2"));
    match (v1, v2) {
        (true, true) => "hybrid".into(),
        (true, false) => "v1".into(),
        (false, true) => "v2".into(),
        (false, false) => "none".into(),
    }
}

fn glibc_version() -> Option<String> {
    // SAFETY: gnu_get_libc_version returns a static NUL-terminated string.
    unsafe {
        extern "C" {
            fn gnu_get_libc_version() -> *const libc::c_char;
        }
        let p = gnu_get_libc_version();
        (!p.is_null()).then(|| std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned())
    }
}

/// The fields of `struct perf_event_attr` rig sets; the rest are zero.
#[derive(Clone, Copy, Debug, Default)]
pub struct PerfAttr {
    /// `PERF_TYPE_*`.
    pub kind: u32,
    pub config: u64,
    pub read_format: u64,
    /// The flags word (`PERF_ATTR_*` bits below).
    pub flags: u64,
}

impl PerfAttr {
    /// The struct as the kernel reads it.
    pub fn bytes(&self) -> [u8; 112] {
        let mut a = [0u8; 112];
        a[0..4].copy_from_slice(&self.kind.to_ne_bytes());
        a[4..8].copy_from_slice(&112u32.to_ne_bytes());
        a[8..16].copy_from_slice(&self.config.to_ne_bytes());
        a[32..40].copy_from_slice(&self.read_format.to_ne_bytes());
        a[40..48].copy_from_slice(&self.flags.to_ne_bytes());
        a
    }
}

pub const PERF_TYPE_HARDWARE: u32 = 0;
pub const PERF_TYPE_SOFTWARE: u32 = 1;
pub const PERF_COUNT_HW_INSTRUCTIONS: u64 = 1;
pub const PERF_COUNT_SW_CPU_CLOCK: u64 = 0;
pub const PERF_FORMAT_TOTAL_TIME_ENABLED: u64 = 1 << 0;
pub const PERF_FORMAT_TOTAL_TIME_RUNNING: u64 = 1 << 1;
pub const PERF_ATTR_DISABLED: u64 = 1 << 0;
pub const PERF_ATTR_INHERIT: u64 = 1 << 1;
pub const PERF_ATTR_EXCLUDE_KERNEL: u64 = 1 << 5;
pub const PERF_ATTR_EXCLUDE_HV: u64 = 1 << 6;

/// `perf_event_open(attr, pid, cpu = any, no group, FD_CLOEXEC)`: the one
/// place rig lays out a `perf_event_attr` (PERF_ATTR_SIZE_VER5, 112 bytes:
/// every field rig sets is in it, and every kernel rig supports takes it).
pub fn perf_event_open(attr: &PerfAttr, pid: i32) -> std::io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 1 << 3;
    let a = attr.bytes();
    // SAFETY: `a` is a perf_event_attr of the size it declares and outlives
    // the call; the kernel returns a new fd or -1.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            a.as_ptr(),
            pid as libc::pid_t,
            -1 as libc::c_int,
            -1 as libc::c_int,
            PERF_FLAG_FD_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fd was just returned by the kernel and nobody else owns it.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as i32) })
}

/// Ask the kernel for a user-space instructions counter on this thread.
/// A VM without a virtual PMU answers ENOENT/EOPNOTSUPP: rig then says so
/// and never reports instructions as zero.
pub fn detect_pmu() -> Pmu {
    let opened = perf_event_open(
        &PerfAttr {
            kind: PERF_TYPE_HARDWARE,
            config: PERF_COUNT_HW_INSTRUCTIONS,
            read_format: 0,
            flags: PERF_ATTR_DISABLED | PERF_ATTR_EXCLUDE_KERNEL | PERF_ATTR_EXCLUDE_HV,
        },
        0,
    );
    match opened {
        Ok(_) => Pmu {
            instructions: true,
            detail: "perf_event_open(PERF_COUNT_HW_INSTRUCTIONS) succeeded".into(),
        },
        Err(err) => Pmu {
            instructions: false,
            detail: format!(
                "no hardware PMU: perf_event_open(PERF_COUNT_HW_INSTRUCTIONS) failed: {err}; \
                 instructions per request need a callgrind window instead"
            ),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gathers_host_facts_and_states_the_pmu() {
        let h = HostFacts::gather();
        assert!(!h.kernel.is_empty());
        assert!(h.online_cpus >= 1);
        // Whatever this machine has, the answer is explicit, never silent.
        if h.pmu.instructions {
            assert!(h.pmu.detail.contains("succeeded"));
        } else {
            assert!(
                h.pmu.detail.starts_with("no hardware PMU"),
                "{}",
                h.pmu.detail
            );
        }
        // Cross-check with perf itself when it is installed.
        if let Ok(out) = std::process::Command::new("perf")
            .args(["stat", "-e", "instructions:u", "true"])
            .output()
        {
            let text = String::from_utf8_lossy(&out.stderr);
            if text.contains("not supported") {
                assert!(!h.pmu.instructions, "perf says not supported: {text}");
            }
        }
    }
}
