//! Probes: eBPF programs and perf events attached to a target process or
//! to the tree of processes rooted at it.
//!
//! In: a pid, the probe families asked for, the target's memory map. Out: a
//! `ProbeSet` whose `snapshot()` reads every in-kernel counter; the exact
//! difference of two snapshots (`Snapshot::delta`) is a window's cost, keyed by
//! raw addresses for the `symbolize` stage. Dropping the `ProbeSet` detaches
//! everything (links are file descriptors: the kernel also drops them when rig
//! dies for any reason).

pub mod allocators;
pub mod attach;
pub mod callgrind;
pub mod ifunc;
pub mod instructions;
pub mod kernel;
pub mod live;
mod multi;
pub use multi::CountingProbe;
pub mod perf;
pub mod placement;
mod preload;
mod read;
pub mod stacks;
pub mod unwind;
pub mod usdt;
pub mod user;
pub mod window;

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use rig_ebpf::abi::{
    AllocKey, CallsBytes, CopyKey, CpuKey, FaultKey, LockKey, LockVal, SchedVal, StackVal, Stats,
    SysCount, SysKey, UserKey, UserStrKey, UserTimeKey,
};
use serde::{Deserialize, Serialize};

pub use crate::runtime::alloc::AllocFamily;
pub use allocators::Unprobed;
pub use attach::{
    check_target, detach_in_background, require_root, wait_detached, AllocEntry, AttachNote,
    BeforeUprobes, CopyImpl, Followed, Joined, ProbeSet, Scope,
};
pub use live::{LiveHeap, LiveStart};
pub use stacks::{StackSnapshot, Stacks};
pub use window::{alive, Window, WindowEnd, WindowStart};

/// One family of probes; each is one BPF object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Family {
    Syscalls,
    Alloc,
    Copy,
    Locks,
    Faults,
    Sched,
    /// Sampled on-CPU time (statistics, never divided into exact costs).
    Cpu,
    /// The USDT markers and functions a user names (`--usdt`, `--func`):
    /// loaded when some are named, never by `--probes`.
    User,
}

impl Family {
    /// Whether it counts with uprobes, per process (alloc, copy, locks):
    /// what a request's own code calls, where tracepoints and perf events
    /// count what the kernel does for it.
    pub fn uses_uprobes(self) -> bool {
        matches!(
            self,
            Family::Alloc | Family::Copy | Family::Locks | Family::User
        )
    }

    /// Every family: the built-in ones, then the user's probes.
    pub const ALL: [Family; 8] = {
        let mut all = [Family::User; 8];
        let mut i = 0;
        while i < Family::BUILT_IN.len() {
            all[i] = Family::BUILT_IN[i];
            i += 1;
        }
        all
    };

    /// The families `--probes` names (`all` is these): the user family is
    /// loaded by naming probes (`--usdt`, `--func`).
    pub const BUILT_IN: [Family; 7] = [
        Family::Syscalls,
        Family::Alloc,
        Family::Copy,
        Family::Locks,
        Family::Faults,
        Family::Sched,
        Family::Cpu,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Family::Syscalls => "syscalls",
            Family::Alloc => "alloc",
            Family::Copy => "copy",
            Family::Locks => "locks",
            Family::Faults => "faults",
            Family::Sched => "sched",
            Family::Cpu => "cpu",
            Family::User => "user",
        }
    }

    /// `all`, or a comma-separated list of family names.
    pub fn parse_list(s: &str) -> Result<Vec<Family>, ProbeError> {
        let mut out = Vec::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            if part == "all" {
                out.extend(Family::BUILT_IN);
            } else {
                out.push(part.parse()?);
            }
        }
        if out.is_empty() {
            return Err(ProbeError::UnknownFamily(s.to_string()));
        }
        out.sort();
        out.dedup();
        Ok(out)
    }
}

impl FromStr for Family {
    type Err = ProbeError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Family::BUILT_IN
            .into_iter()
            .find(|f| f.name() == s)
            .ok_or_else(|| ProbeError::UnknownFamily(s.to_string()))
    }
}

impl fmt::Display for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error(
        "unknown probe family `{0}`: choose from syscalls, alloc, copy, locks, faults, sched, cpu, or all (probes of your own: --usdt PROVIDER:NAME, --func PATTERN)"
    )]
    UnknownFamily(String),
    #[error("no process with pid {pid}")]
    NoSuchProcess { pid: u32 },
    #[error(
        "pid {pid} has exited (a zombie its parent has not reaped): it runs no code to measure"
    )]
    Zombie { pid: u32 },
    #[error("pid {pid} exists but /proc/{pid}/maps cannot be read ({source}); rig needs its memory map to place probes (a PID namespace, a ptrace restriction or a security module may forbid it)")]
    MapsUnreadable {
        pid: u32,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "attaching probes needs root (CAP_BPF and CAP_PERFMON); run rig as root (euid is {euid})"
    )]
    NotRoot { euid: u32 },
    #[error("pid {pid} is rig itself; point rig at another process")]
    SelfTarget { pid: u32 },
    #[error("pid {pid} is a kernel thread (no user memory to probe)")]
    KernelThread { pid: u32 },
    #[error(
        "{} while attaching the probes; nothing was measured",
        crate::interrupt::interrupted_by()
    )]
    Interrupted,
    #[error("{tid} is a thread of process {tgid}, not a process: rig measures processes (every thread of one); give {tgid}")]
    Thread { tid: u32, tgid: u32 },
    #[error("process {pid} has no C library rig knows (none mapped in /proc/{pid}/maps, none linked into its executable); the {family} probes need one")]
    NoLibc { pid: u32, family: Family },
    #[error("{lib} has no symbol `{symbol}`, which the {family} probes need")]
    MissingSymbol {
        lib: String,
        symbol: String,
        family: Family,
    },
    #[error("reading /proc/{pid}/maps: {source}")]
    Maps {
        pid: u32,
        #[source]
        source: crate::process::maps::MapsError,
    },
    #[error("resolving `{api}` in {lib} for pid {pid}: {source}")]
    Resolve {
        pid: u32,
        lib: String,
        api: String,
        #[source]
        source: anyhow::Error,
    },
    #[error("loading the {family} BPF object: {source}")]
    Load {
        family: Family,
        #[source]
        source: aya::EbpfError,
    },
    #[error("{family} probes: no uprobe cookie by address on this kernel: {why}")]
    Cookie { family: Family, why: String },
    #[error("{family} BPF object has no {what} `{name}` (rig build is inconsistent)")]
    Missing {
        family: Family,
        what: &'static str,
        name: String,
    },
    #[error("{what} for the {family} probes: {source}")]
    Program {
        family: Family,
        what: String,
        #[source]
        source: aya::programs::ProgramError,
    },
    #[error("map `{map}` of the {family} probes: {source}")]
    Map {
        family: Family,
        map: &'static str,
        #[source]
        source: aya::maps::MapError,
    },
    #[error("cannot place the {family} probe {what} safely: {why}")]
    Unsafe {
        family: Family,
        what: String,
        why: String,
    },
    #[error(transparent)]
    User(#[from] user::UserProbeError),
    #[error("the user probe at {what}: {source}")]
    Guarded {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("reading the runs of code the families do not count: {0}")]
    Unseen(String),
    #[error("listing online CPUs for the fault probes: {0}")]
    Cpus(std::io::Error),
    #[error("mapping the unwind table of the {family} probes: {source}")]
    Mmap {
        family: Family,
        #[source]
        source: std::io::Error,
    },
}

/// Every in-kernel counter of a `ProbeSet` at one instant (per-CPU values
/// summed). Families not attached are empty.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Snapshot {
    /// (tgid, syscall nr) -> count and time.
    pub syscalls: BTreeMap<SysKey, SysCount>,
    pub alloc: BTreeMap<AllocKey, CallsBytes>,
    pub copy: BTreeMap<CopyKey, CallsBytes>,
    pub locks: BTreeMap<LockKey, LockVal>,
    pub faults: BTreeMap<FaultKey, u64>,
    /// tid -> switches and off-CPU time.
    pub sched: BTreeMap<u32, SchedVal>,
    /// (process, mode) -> on-CPU samples.
    pub cpu: BTreeMap<CpuKey, u64>,
    /// (caller, site, process) -> calls and the summed argument.
    pub user: BTreeMap<UserKey, CallsBytes>,
    /// (site, process) -> ns inside a timed function.
    pub user_ns: BTreeMap<UserTimeKey, u64>,
    /// (site, process, string) -> calls and the summed argument, for the
    /// sites counted by a string argument (`--usdt …#S`).
    pub user_by: BTreeMap<UserStrKey, CallsBytes>,
    /// Runs of code the families do not count (CPython's inlined
    /// pymalloc), by counter (`Window::unseen` says what each is).
    pub unseen: Vec<u64>,
    /// Each family's self-stats (events, losses).
    pub stats: BTreeMap<Family, Stats>,
    /// Each family's per-stack counts and the stacks they name (empty when
    /// stacks are off).
    pub stacks: BTreeMap<Family, StackSnapshot>,
}

impl Snapshot {
    /// What happened between `start` and `self`: exact per-key differences.
    /// Keys that did not move are dropped.
    pub fn delta(&self, start: &Snapshot) -> Snapshot {
        Snapshot {
            syscalls: delta_map(&self.syscalls, &start.syscalls),
            alloc: delta_map(&self.alloc, &start.alloc),
            copy: delta_map(&self.copy, &start.copy),
            locks: delta_map(&self.locks, &start.locks),
            faults: delta_map(&self.faults, &start.faults),
            sched: delta_map(&self.sched, &start.sched),
            cpu: delta_map(&self.cpu, &start.cpu),
            user: delta_map(&self.user, &start.user),
            user_ns: delta_map(&self.user_ns, &start.user_ns),
            user_by: delta_map(&self.user_by, &start.user_by),
            unseen: (self.unseen.iter().enumerate())
                .map(|(i, v)| v.saturating_sub(start.unseen.get(i).copied().unwrap_or(0)))
                .collect(),
            stacks: self
                .stacks
                .iter()
                .map(|(f, end)| {
                    let empty = StackSnapshot::default();
                    let begin = start.stacks.get(f).unwrap_or(&empty);
                    let counts = delta_map(&end.counts, &begin.counts);
                    let keep = |id: &u64| counts.keys().any(|k| k.ustack == *id);
                    let keep_k = |id: &i32| counts.keys().any(|k| k.kstack == *id);
                    let s = StackSnapshot {
                        ustacks: end
                            .ustacks
                            .iter()
                            .filter(|(id, _)| keep(id))
                            .map(|(id, s)| (*id, *s))
                            .collect(),
                        kstacks: end
                            .kstacks
                            .iter()
                            .filter(|(id, _)| keep_k(id))
                            .map(|(id, s)| (*id, s.clone()))
                            .collect(),
                        counts,
                    };
                    (*f, s)
                })
                .collect(),
            stats: self
                .stats
                .iter()
                .map(|(f, s)| {
                    let zero = Stats::default();
                    (*f, s.minus(start.stats.get(f).unwrap_or(&zero)))
                })
                .collect(),
        }
    }

    /// Events lost in this snapshot's counters (map full, failed lookups or
    /// reads, unpaired returns), by family. Empty when nothing was lost.
    pub fn losses(&self) -> BTreeMap<Family, Vec<(&'static str, u64)>> {
        use rig_ebpf::abi::stat;
        let mut out = BTreeMap::new();
        for (f, s) in &self.stats {
            let lost: Vec<_> = [
                ("map full", stat::MAP_FULL),
                ("lookup failed", stat::LOOKUP_FAIL),
                ("read failed", stat::READ_FAIL),
                ("unpaired return", stat::UNPAIRED),
                ("stack unreadable", stat::STACK_FAIL),
            ]
            .into_iter()
            .filter(|(_, i)| s.slot[*i] > 0)
            .map(|(n, i)| (n, s.slot[i]))
            .collect();
            if !lost.is_empty() {
                out.insert(*f, lost);
            }
        }
        out
    }
}

/// Counter values that can be subtracted (end - start) and tested for zero.
pub(crate) trait Counter: Copy + Default + PartialEq {
    fn minus(&self, start: &Self) -> Self;
    fn plus(&mut self, other: &Self);
    fn is_zero(&self) -> bool {
        *self == Self::default()
    }
}

fn delta_map<K: Ord + Copy, V: Counter>(
    end: &BTreeMap<K, V>,
    start: &BTreeMap<K, V>,
) -> BTreeMap<K, V> {
    end.iter()
        .map(|(k, v)| (*k, v.minus(start.get(k).unwrap_or(&V::default()))))
        .filter(|(_, v)| !v.is_zero())
        .collect()
}

macro_rules! counter_fields {
    ($t:ty, $($f:ident),+) => {
        impl Counter for $t {
            fn minus(&self, s: &Self) -> Self {
                Self { $($f: self.$f.saturating_sub(s.$f)),+ }
            }
            fn plus(&mut self, o: &Self) {
                $(self.$f += o.$f;)+
            }
        }
    };
}
counter_fields!(SysCount, count, exits, ns);

/// A count and its amount: bytes or ns, or a user probe's argument
/// summed, which may be signed (`--usdt …@N` of a negative argument adds
/// it as a two's-complement u64), so the amount adds and subtracts modulo
/// 2^64; a count that went backwards (an entry made anew) is no window's.
macro_rules! counted_amount {
    ($t:ty, $count:ident, $amount:ident) => {
        impl Counter for $t {
            fn minus(&self, s: &Self) -> Self {
                match self.$count.checked_sub(s.$count) {
                    Some($count) => Self {
                        $count,
                        $amount: self.$amount.wrapping_sub(s.$amount),
                    },
                    None => Self::default(),
                }
            }
            fn plus(&mut self, o: &Self) {
                self.$count += o.$count;
                self.$amount = self.$amount.wrapping_add(o.$amount);
            }
        }
    };
}
counted_amount!(CallsBytes, calls, bytes);
counted_amount!(StackVal, count, amount);
counter_fields!(
    LockVal,
    calls,
    acquired,
    contended,
    futex_wait_ns,
    call_ns,
    holds,
    hold_ns,
    returns
);

impl Counter for SchedVal {
    fn minus(&self, s: &Self) -> Self {
        SchedVal {
            voluntary: self.voluntary.saturating_sub(s.voluntary),
            involuntary: self.involuntary.saturating_sub(s.involuntary),
            off_cpu_ns: self.off_cpu_ns.saturating_sub(s.off_cpu_ns),
            tgid: self.tgid,
        }
    }
    fn plus(&mut self, o: &Self) {
        self.voluntary += o.voluntary;
        self.involuntary += o.involuntary;
        self.off_cpu_ns += o.off_cpu_ns;
        self.tgid = o.tgid;
    }
    fn is_zero(&self) -> bool {
        self.voluntary == 0 && self.involuntary == 0 && self.off_cpu_ns == 0
    }
}

impl Counter for Stats {
    fn minus(&self, s: &Self) -> Self {
        Stats {
            slot: slots_minus(&self.slot, &s.slot),
        }
    }
    fn plus(&mut self, o: &Self) {
        slots_plus(&mut self.slot, &o.slot);
    }
}

/// `a − b` slot by slot, for counters kept as an array of slots (a slot
/// below its earlier reading is 0, never a wrap).
pub(crate) fn slots_minus<const N: usize>(a: &[u64; N], b: &[u64; N]) -> [u64; N] {
    std::array::from_fn(|i| a[i].saturating_sub(b[i]))
}

/// `a += b` slot by slot.
pub(crate) fn slots_plus<const N: usize>(a: &mut [u64; N], b: &[u64; N]) {
    for (x, y) in a.iter_mut().zip(b) {
        *x += y;
    }
}

impl Counter for u64 {
    fn minus(&self, s: &Self) -> Self {
        self.saturating_sub(*s)
    }
    fn plus(&mut self, o: &Self) {
        *self += *o;
    }
}

/// Name of an x86_64 syscall number.
pub fn syscall_name(nr: u32) -> String {
    syscalls::Sysno::new(nr as usize)
        .map(|s| s.name().to_string())
        .unwrap_or_else(|| format!("syscall_{nr}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signed_sum_adds_over_cpus_and_subtracts_modulo_two_to_the_64() {
        // A user probe summing a signed argument: -8 and -16 on two CPUs at
        // the start, and 5 more calls adding -40 by the end.
        let neg = |v: i64| v as u64;
        let mut start = CallsBytes {
            calls: 1,
            bytes: neg(-8),
        };
        start.plus(&CallsBytes {
            calls: 1,
            bytes: neg(-16),
        });
        assert_eq!(start.bytes as i64, -24);
        let end = CallsBytes {
            calls: 7,
            bytes: neg(-64),
        };
        let d = end.minus(&start);
        assert_eq!((d.calls, d.bytes as i64), (5, -40));
        // An entry made anew since the start is no window's.
        assert_eq!(start.minus(&end), CallsBytes::default());
    }

    #[test]
    fn parses_family_lists() {
        assert_eq!(
            Family::parse_list("all").unwrap(),
            Family::BUILT_IN.to_vec()
        );
        let err = Family::parse_list("user").unwrap_err();
        assert!(err.to_string().contains("--usdt"), "{err}");
        assert_eq!(
            Family::parse_list("copy, alloc").unwrap(),
            vec![Family::Alloc, Family::Copy]
        );
        let err = Family::parse_list("alloc,mallocs").unwrap_err();
        assert!(err.to_string().contains("unknown probe family `mallocs`"));
    }

    #[test]
    fn delta_is_exact_and_drops_unmoved_keys() {
        let mut a = Snapshot::default();
        let mut b = Snapshot::default();
        let k1 = AllocKey {
            caller: 1,
            kind: 1,
            size_class: 5,
            ..Default::default()
        };
        let k2 = AllocKey {
            caller: 2,
            kind: 1,
            size_class: 5,
            ..Default::default()
        };
        a.alloc.insert(
            k1,
            CallsBytes {
                calls: 10,
                bytes: 240,
            },
        );
        a.alloc.insert(k2, CallsBytes { calls: 3, bytes: 3 });
        b.alloc.insert(
            k1,
            CallsBytes {
                calls: 13,
                bytes: 312,
            },
        );
        b.alloc.insert(k2, CallsBytes { calls: 3, bytes: 3 });
        let k3 = AllocKey {
            caller: 3,
            kind: 4,
            size_class: 0,
            ..Default::default()
        };
        b.alloc.insert(k3, CallsBytes { calls: 7, bytes: 0 });
        let d = b.delta(&a);
        assert_eq!(d.alloc.len(), 2);
        assert_eq!(
            d.alloc[&k1],
            CallsBytes {
                calls: 3,
                bytes: 72
            }
        );
        assert_eq!(d.alloc[&k3], CallsBytes { calls: 7, bytes: 0 });
    }

    #[test]
    fn names_syscalls() {
        assert_eq!(syscall_name(0), "read");
        assert_eq!(syscall_name(110), "getppid");
        assert_eq!(syscall_name(9999), "syscall_9999");
    }
}

/// Why `pid` cannot be measured, said as it is: no such process, a zombie,
/// or a process whose memory map rig may not read (`err` is that read's
/// error, if any).
pub fn not_measurable(pid: u32, err: Option<std::io::Error>) -> ProbeError {
    let stat = match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => s,
        Err(_) => return ProbeError::NoSuchProcess { pid },
    };
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, r)| r.split_whitespace().next());
    if matches!(state, Some("Z" | "X")) {
        return ProbeError::Zombie { pid };
    }
    match err {
        Some(source) if source.kind() != std::io::ErrorKind::NotFound => {
            ProbeError::MapsUnreadable { pid, source }
        }
        _ => ProbeError::NoSuchProcess { pid },
    }
}

#[cfg(test)]
mod not_measurable_tests {
    use super::*;

    #[test]
    fn says_what_is_true_of_a_pid() {
        // A live process whose maps could not be read: not "no process".
        let me = std::process::id();
        let denied = std::io::Error::from(std::io::ErrorKind::PermissionDenied);
        let e = not_measurable(me, Some(denied));
        assert!(matches!(e, ProbeError::MapsUnreadable { .. }), "{e}");
        assert!(e.to_string().contains("exists but"), "{e}");
        // A zombie: our own child, exited and not yet reaped.
        let child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        let t0 = std::time::Instant::now();
        while !std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .unwrap()
            .contains(") Z")
        {
            assert!(t0.elapsed() < std::time::Duration::from_secs(10));
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let e = not_measurable(pid, None);
        assert!(matches!(e, ProbeError::Zombie { .. }), "{e}");
        let mut child = child;
        child.wait().unwrap();
        assert!(matches!(
            not_measurable(pid, None),
            ProbeError::NoSuchProcess { .. }
        ));
    }
}
