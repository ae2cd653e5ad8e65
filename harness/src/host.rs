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

/// Ask the kernel for a user-space instructions counter on this thread.
/// A VM without a virtual PMU answers ENOENT/EOPNOTSUPP: rig then says so
/// and never reports instructions as zero.
pub fn detect_pmu() -> Pmu {
    // struct perf_event_attr, PERF_ATTR_SIZE_VER5 (112 bytes) is enough.
    let mut attr = [0u8; 112];
    attr[0..4].copy_from_slice(&0u32.to_ne_bytes()); // PERF_TYPE_HARDWARE
    attr[4..8].copy_from_slice(&112u32.to_ne_bytes()); // size
    attr[8..16].copy_from_slice(&1u64.to_ne_bytes()); // PERF_COUNT_HW_INSTRUCTIONS
                                                      // flags: disabled (bit 0), exclude_kernel (bit 5), exclude_hv (bit 6)
    let flags: u64 = 1 | (1 << 5) | (1 << 6);
    attr[40..48].copy_from_slice(&flags.to_ne_bytes());
    // SAFETY: attr is a valid perf_event_attr of the size it declares; the
    // returned fd is closed below.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            attr.as_ptr(),
            0 as libc::pid_t,
            -1 as libc::c_int,
            -1 as libc::c_int,
            0 as libc::c_ulong,
        )
    };
    if fd >= 0 {
        // SAFETY: fd was just returned by the kernel and is ours.
        unsafe { libc::close(fd as libc::c_int) };
        Pmu {
            instructions: true,
            detail: "perf_event_open(PERF_COUNT_HW_INSTRUCTIONS) succeeded".into(),
        }
    } else {
        let err = std::io::Error::last_os_error();
        Pmu {
            instructions: false,
            detail: format!(
                "no hardware PMU: perf_event_open(PERF_COUNT_HW_INSTRUCTIONS) failed: {err}; \
                 instructions per request need a callgrind window instead"
            ),
        }
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
