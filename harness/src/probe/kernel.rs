//! What the running kernel lets the probe families do, probed once.
//!
//! In: the kernel itself (helper and map probes through aya, BTF in sysfs,
//! a software perf event opened and closed, the mounted cgroup
//! hierarchies). Out: one [`Kernel`] value, read by every family: which of
//! the two builds of its BPF object to load (`rig_ebpf::Object`), whether
//! it may walk whole stacks, and what it gave up and why
//! ([`Degraded`]), for the attach line and the JSON. Nothing else in rig
//! asks the kernel's version what it can do.

use std::sync::OnceLock;

use aya::maps::MapType;
use aya::programs::ProgramType;
use aya::sys::{is_helper_supported, is_map_supported, BpfHelper};
use serde::Serialize;

use super::stacks::Stacks;
use super::Family;

/// What the kernel offers, each probed by trying it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Features {
    /// /sys/kernel/btf/vmlinux: the CO-RE reads of task fields (the fork
    /// follower, sched's next task, the stack walk's saved registers and
    /// uretprobe return addresses) are relocated against it.
    pub btf: bool,
    /// Global BPF functions (BTF `FUNC` with global linkage, Linux 5.6): the
    /// stack walk is one, verified once per program.
    pub global_functions: bool,
    /// `bpf_loop` (Linux 5.17): the frame walk as a callback.
    pub bpf_loop: bool,
    /// `bpf_get_attach_cookie` from a uprobe (Linux 5.15): which allocator
    /// entry or copy implementation fired.
    pub attach_cookie: bool,
    /// The sched_switch tracepoint passes `prev_state` (Linux 5.18); before,
    /// sched reads it from the task, as those kernels' accounting did.
    pub sched_switch_prev_state: bool,
    /// BPF ring buffer maps (Linux 5.8). No family needs one; reported so a
    /// result says what the kernel had.
    pub ring_buffer: bool,
    /// Software perf events (cpu-clock, page faults) with BPF programs.
    pub perf_software_events: bool,
    /// The uretprobe trampoline returns through the `uretprobe` syscall
    /// (335, Linux 6.11); before, through a trap. Where it exists rig sees
    /// one such syscall per uretprobe hit in the target and keeps it out of
    /// the syscall table (`probe_syscalls_excluded`); before, there is none.
    pub uretprobe_syscall: bool,
    pub cgroup_v1: bool,
    pub cgroup_v2: bool,
}

/// Which build of a family's BPF object the kernel takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Build {
    /// `bpf_loop` walks frames, `bpf_get_attach_cookie` names entries.
    Full,
    /// Built with `RIG_COMPAT`: the walk is a bounded loop (the same
    /// frames), cookies are looked up by address in `attach_cookies`.
    Compat,
}

/// One thing a family does differently, or not at all, on this kernel.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Degraded {
    /// The missing feature, as named in [`Features`].
    pub feature: &'static str,
    pub families: Vec<Family>,
    /// What the families do instead.
    pub effect: String,
}

/// The running kernel: its release and features.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Kernel {
    /// `uname -r`.
    pub version: String,
    pub features: Features,
}

/// Whether the kernel has the `uretprobe` syscall: its entry is in
/// /proc/kallsyms. Calling it is no probe, since outside the trampoline it
/// raises SIGILL.
fn has_uretprobe_syscall() -> bool {
    std::fs::read_to_string("/proc/kallsyms").is_ok_and(|k| {
        k.lines()
            .any(|l| l.rsplit(' ').next() == Some("__x64_sys_uretprobe"))
    })
}

/// The running kernel, probed on first use.
pub fn kernel() -> &'static Kernel {
    static KERNEL: OnceLock<Kernel> = OnceLock::new();
    KERNEL.get_or_init(Kernel::probe)
}

impl Kernel {
    fn probe() -> Kernel {
        let helper = |h| is_helper_supported(ProgramType::KProbe, h).unwrap_or(false);
        let btf = std::path::Path::new("/sys/kernel/btf/vmlinux").exists();
        let global_functions = aya::features().btf().is_some_and(|b| b.btf_func_global());
        let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
        Kernel {
            version: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .map(|s| s.trim().to_string())
                .unwrap_or_default(),
            features: Features {
                btf,
                global_functions,
                bpf_loop: helper(BpfHelper::BPF_FUNC_loop),
                attach_cookie: helper(BpfHelper::BPF_FUNC_get_attach_cookie),
                sched_switch_prev_state: btf && sched_switch_has_four_args(),
                ring_buffer: is_map_supported(MapType::RingBuf).unwrap_or(false),
                perf_software_events: software_event_opens(),
                uretprobe_syscall: has_uretprobe_syscall(),
                cgroup_v1: mounts
                    .lines()
                    .any(|l| l.split(' ').nth(2) == Some("cgroup")),
                cgroup_v2: mounts
                    .lines()
                    .any(|l| l.split(' ').nth(2) == Some("cgroup2")),
            },
        }
    }

    /// A kernel with every feature: what tests of the choices start from.
    #[cfg(test)]
    fn full() -> Kernel {
        Kernel {
            version: "6.18.0".into(),
            features: Features {
                btf: true,
                global_functions: true,
                bpf_loop: true,
                attach_cookie: true,
                sched_switch_prev_state: true,
                ring_buffer: true,
                perf_software_events: true,
                uretprobe_syscall: true,
                cgroup_v1: false,
                cgroup_v2: true,
            },
        }
    }

    /// The object build every family loads.
    pub fn build(&self) -> Build {
        if self.features.bpf_loop && self.features.attach_cookie {
            Build::Full
        } else {
            Build::Compat
        }
    }

    /// Whether uprobe cookies come from `attach_cookies` (filled by the
    /// harness at attach) rather than the kernel.
    pub fn cookies_by_address(&self) -> bool {
        self.build() == Build::Compat
    }

    /// The stack mode the families get when `asked` is wanted: the walk
    /// needs global functions (without them it would be verified again
    /// at every call site, past the verifier's limit) and BTF (it reads
    /// the task's saved registers through CO-RE).
    pub fn stacks(&self, asked: Stacks) -> Stacks {
        if self.features.global_functions && self.features.btf {
            asked
        } else {
            Stacks::Off
        }
    }

    /// The sched family's sched_switch program.
    pub fn sched_switch_program(&self) -> &'static str {
        if self.features.sched_switch_prev_state {
            "rig_sched_switch"
        } else {
            "rig_sched_switch_task_state"
        }
    }

    /// Whether `family` can be loaded at all here; `Err` says why not.
    pub fn allows(&self, family: Family) -> Result<(), String> {
        let f = &self.features;
        match family {
            Family::Sched if !f.btf => {
                Err("the kernel has no BTF (/sys/kernel/btf/vmlinux): sched reads the next task's ids through CO-RE".into())
            }
            Family::Faults | Family::Cpu if !f.perf_software_events => Err(format!(
                "the kernel opens no software perf events: {family} is driven by them"
            )),
            _ => Ok(()),
        }
    }

    /// What `families` give up on this kernel, one entry per missing
    /// feature; empty on a kernel with everything.
    pub fn degraded(&self, families: &[Family]) -> Vec<Degraded> {
        let f = &self.features;
        let mut out = Vec::new();
        let mut add = |feature, of: &dyn Fn(Family) -> bool, effect: String| {
            let families: Vec<Family> = families.iter().copied().filter(|&x| of(x)).collect();
            if !families.is_empty() {
                out.push(Degraded {
                    feature,
                    families,
                    effect,
                });
            }
        };
        let stacks_of = |_: Family| true;
        let uprobes = |x: Family| matches!(x, Family::Alloc | Family::Copy | Family::User);
        if !f.btf {
            add(
                "btf",
                &stacks_of,
                "no whole stacks (one frame per event), no process trees, no sched family: CO-RE reads need the kernel's BTF".into(),
            );
        } else if !f.global_functions {
            add(
                "global_functions",
                &stacks_of,
                "no whole stacks: one frame per event (the leaf call site)".into(),
            );
        }
        if !f.bpf_loop && self.stacks(Stacks::On) == Stacks::On {
            add(
                "bpf_loop",
                &stacks_of,
                format!(
                    "stacks walked by a bounded loop of {} frames, as with bpf_loop; programs verify more slowly",
                    rig_ebpf::abi::STACK_MAX_FRAMES
                ),
            );
        }
        if !f.attach_cookie {
            add(
                "attach_cookie",
                &uprobes,
                "each uprobe named by its address in a map rig fills as it attaches".into(),
            );
        }
        if f.btf && !f.sched_switch_prev_state {
            add(
                "sched_switch_prev_state",
                &|x| x == Family::Sched,
                "voluntary or not from the switched-out task's state, read at the tracepoint"
                    .into(),
            );
        }
        if !f.perf_software_events {
            add(
                "perf_software_events",
                &|x| matches!(x, Family::Faults | Family::Cpu),
                "not loaded".into(),
            );
        }
        out
    }
}

/// The degraded features as one line for the attach output, or `None` on a
/// kernel that lacks nothing the families use.
pub fn degraded_line(kernel: &Kernel, degraded: &[Degraded]) -> Option<String> {
    if degraded.is_empty() {
        return None;
    }
    let parts: Vec<String> = degraded
        .iter()
        .map(|d| {
            let fams: Vec<&str> = d.families.iter().map(|f| f.name()).collect();
            format!("no {} ({}): {}", d.feature, fams.join(","), d.effect)
        })
        .collect();
    Some(format!(
        "kernel {} degraded: {}",
        kernel.version,
        parts.join("; ")
    ))
}

/// Whether the kernel attaches a raw tracepoint program that reads a fourth
/// argument of sched_switch: it refuses one that reads past the
/// tracepoint's arguments. The program (`r2 = ctx->args[3]; return 0`) is
/// attached for the moment of the probe and closed.
fn sched_switch_has_four_args() -> bool {
    const BPF_PROG_LOAD: libc::c_long = 5;
    const BPF_RAW_TRACEPOINT_OPEN: libc::c_long = 17;
    const BPF_PROG_TYPE_RAW_TRACEPOINT: u32 = 17;
    let insns: [[u8; 8]; 3] = [
        [0x79, 0x12, 24, 0, 0, 0, 0, 0], // r2 = *(u64 *)(r1 + 24)
        [0xb7, 0, 0, 0, 0, 0, 0, 0],     // r0 = 0
        [0x95, 0, 0, 0, 0, 0, 0, 0],     // exit
    ];
    let license = c"GPL";
    let mut attr = [0u8; 128];
    attr[0..4].copy_from_slice(&BPF_PROG_TYPE_RAW_TRACEPOINT.to_ne_bytes());
    attr[4..8].copy_from_slice(&(insns.len() as u32).to_ne_bytes());
    attr[8..16].copy_from_slice(&(insns.as_ptr() as u64).to_ne_bytes());
    attr[16..24].copy_from_slice(&(license.as_ptr() as u64).to_ne_bytes());
    // SAFETY: attr is a bpf_attr for BPF_PROG_LOAD whose pointers (insns,
    // license) outlive the call; the kernel returns a new fd or -1.
    let prog = unsafe { libc::syscall(libc::SYS_bpf, BPF_PROG_LOAD, attr.as_ptr(), attr.len()) };
    if prog < 0 {
        return false;
    }
    let name = c"sched_switch";
    let mut attr = [0u8; 128];
    attr[0..8].copy_from_slice(&(name.as_ptr() as u64).to_ne_bytes());
    attr[8..12].copy_from_slice(&(prog as u32).to_ne_bytes());
    // SAFETY: as above, for BPF_RAW_TRACEPOINT_OPEN (name, prog_fd).
    let tp = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_RAW_TRACEPOINT_OPEN,
            attr.as_ptr(),
            attr.len(),
        )
    };
    // SAFETY: both fds were returned by the kernel above and are ours.
    unsafe {
        if tp >= 0 {
            libc::close(tp as i32);
        }
        libc::close(prog as i32);
    }
    tp >= 0
}

/// Opens (and closes) a software cpu-clock event on this thread.
fn software_event_opens() -> bool {
    // Kernel time counted too (the builder excludes it by default): the
    // question is whether the kernel opens perf events at all.
    perf_event::Builder::new(perf_event::events::Software::CPU_CLOCK)
        .exclude_kernel(false)
        .exclude_hv(false)
        .build()
        .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kernel_with_everything_loads_the_full_build_and_lacks_nothing() {
        let k = Kernel::full();
        assert_eq!(k.build(), Build::Full);
        assert!(k.degraded(&Family::ALL).is_empty());
        assert_eq!(degraded_line(&k, &k.degraded(&Family::ALL)), None);
        assert_eq!(k.stacks(Stacks::On), Stacks::On);
    }

    #[test]
    fn linux_5_10_loads_the_compat_build_with_whole_stacks() {
        let mut k = Kernel::full();
        k.version = "5.10.0-32-amd64".into();
        k.features.bpf_loop = false;
        k.features.attach_cookie = false;
        k.features.sched_switch_prev_state = false;
        assert_eq!(k.build(), Build::Compat);
        assert_eq!(k.sched_switch_program(), "rig_sched_switch_task_state");
        assert!(k.cookies_by_address());
        assert_eq!(k.stacks(Stacks::On), Stacks::On);
        let d = k.degraded(&[Family::Syscalls, Family::Alloc]);
        let features: Vec<&str> = d.iter().map(|d| d.feature).collect();
        assert_eq!(features, ["bpf_loop", "attach_cookie"]);
        let all: Vec<&str> = k.degraded(&Family::ALL).iter().map(|d| d.feature).collect();
        assert_eq!(
            all,
            ["bpf_loop", "attach_cookie", "sched_switch_prev_state"]
        );
        assert_eq!(d[1].families, [Family::Alloc]);
        let line = degraded_line(&k, &d).unwrap();
        assert!(line.starts_with("kernel 5.10.0-32-amd64 degraded: no bpf_loop (syscalls,alloc): "));
        assert!(!line.contains('\n'));
    }

    #[test]
    fn without_btf_stacks_go_and_sched_is_refused_but_syscalls_load() {
        let mut k = Kernel::full();
        k.features.btf = false;
        assert_eq!(k.stacks(Stacks::On), Stacks::Off);
        assert!(k.allows(Family::Sched).is_err());
        assert!(k.allows(Family::Syscalls).is_ok());
        assert_eq!(k.degraded(&[Family::Syscalls])[0].feature, "btf");
    }

    #[test]
    fn without_software_events_only_faults_and_cpu_are_lost() {
        let mut k = Kernel::full();
        k.features.perf_software_events = false;
        assert!(k.allows(Family::Faults).is_err());
        assert!(k.allows(Family::Cpu).is_err());
        assert!(k.allows(Family::Alloc).is_ok());
        let d = k.degraded(&Family::ALL);
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].families, [Family::Faults, Family::Cpu]);
    }
}
