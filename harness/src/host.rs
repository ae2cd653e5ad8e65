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
    // perf-event2's builder starts disabled, user space only, on the
    // calling thread, any CPU, with FD_CLOEXEC.
    let opened = perf_event::Builder::new(perf_event::events::Hardware::INSTRUCTIONS).build();
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
