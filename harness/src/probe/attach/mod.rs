//! Loading and attaching each probe family to a target process, or to the
//! tree of processes rooted at it.
//!
//! Tracepoint and perf-event families filter by tgid in the kernel against
//! each object's `targets` map; in tree mode `rig_follow_fork` adds every
//! process a followed process forks before the child first runs, so they
//! miss nothing. Uprobes are scoped to one process each (a system-wide
//! uprobe on libc would trap every process on the machine, rig's own load
//! generator included), so a forked process gets its uprobes from the
//! follower thread, which polls `targets` every [`FOLLOW_POLL`]; what it did
//! between its fork and that attach is not seen, and the process's record
//! says how long that gap was. One exception: the probes a user names in a
//! tree's executable (`user.rs`) are one uprobe on the file, counted for
//! the tree's processes in the kernel, so they miss nothing of a fork.

use std::collections::BTreeMap;
use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use aya::maps::HashMap;
use aya::programs::perf_event::{PerfEventConfig, PerfEventScope, SamplePolicy, SoftwareEvent};
use aya::programs::uprobe::{UProbeAttachLocation, UProbeAttachPoint, UProbeScope};
use aya::programs::{PerfEvent, RawTracePoint, UProbe};
use aya::Ebpf;
use rig_ebpf::abi::{
    ALLOC_COOKIE_NO_RETURN, ALLOC_ENTRY_MASK, ALLOC_ENTRY_SHIFT, TARGET_ONE, TARGET_TREE,
};
use serde::Serialize;

use super::placement::{safe_probe_offset_joining, Placement, Why};
use super::read;
use super::stacks::{self, StackTables, Stacks};
use super::{kernel, Family, ProbeError, Snapshot};
use crate::elf;
use crate::probe::allocators::{Layer, Unprobed};
use crate::process::maps::ProcMaps;
use crate::runtime::alloc::AllocFamily;

mod declared;
mod detach;
mod follow;
mod own;
mod programs;
mod unseen;
mod uprobes;
mod user;

pub use detach::{detach_in_background, wait_detached};
use follow::follow;
use programs::*;
pub use unseen::UnseenCount;

/// A memcpy/memmove/memset implementation the copy probes attached to; its
/// index in `ProbeSet::copy_impls` is the attach cookie in `CopyKey`.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct CopyImpl {
    /// The APIs that resolve to this code (memcpy and memmove often share it).
    pub apis: Vec<String>,
    pub lib: String,
    pub file_offset: u64,
    /// Name of the implementation from debug info, e.g.
    /// `__memmove_avx_unaligned_erms`; `None` when no symbol covers it.
    pub impl_name: Option<String>,
    /// How the implementation was found (which GOT slot was read).
    pub method: String,
}

/// An allocator entry point the alloc probes sit on; its index in
/// `ProbeSet::alloc_entries` is the high half of the attach cookie (and of
/// `AllocKey::kind`).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct AllocEntry {
    pub allocator: AllocFamily,
    pub symbol: String,
    /// The module as in maps.
    pub module: String,
    pub file_offset: u64,
}

/// What was attached where, or deliberately not attached and why.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct AttachNote {
    pub family: Family,
    pub what: String,
    pub note: String,
}

/// How often the follower looks for processes forked into the tree: what a
/// child does before it is seen is not counted by its uprobes.
pub const FOLLOW_POLL: Duration = Duration::from_millis(1);

/// Which processes a `ProbeSet` covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// The one process (all its threads).
    Process,
    /// The process and every process it forks, transitively, including
    /// processes forked after attaching.
    Tree,
}

/// How a process came to be measured.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(rename_all = "snake_case", tag = "how")]
pub enum Joined {
    /// The pid rig was given (launched or attached to).
    Root,
    /// Already in the tree when the probes were attached.
    AtAttach,
    /// Forked while the probes were attached. Tracepoint and perf-event
    /// families saw it from its first instruction; its uprobes (alloc, copy,
    /// locks) were attached `uprobe_gap_ms` after its fork (the kernel's
    /// fork time against the moment the last of them was in), and what it
    /// did before then is not counted by them: `before_uprobes` says how
    /// much.
    Forked {
        uprobe_gap_ms: Option<f64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        before_uprobes: Option<BeforeUprobes>,
    },
}

/// What a process forked into the tree did between its fork and the moment
/// its uprobes were attached, measured where nothing is missed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct BeforeUprobes {
    /// CPU time it had run (`/proc/PID/task/*/schedstat`) when its last
    /// uprobe went in.
    pub cpu_ms: f64,
    /// Its system calls before then (the syscalls family's tracepoint,
    /// which sees it from its fork); `None` without that family.
    pub syscalls: Option<u64>,
}

impl Joined {
    /// A process forked into the tree, its uprobe gap not (yet) known.
    pub fn forked() -> Joined {
        Joined::Forked {
            uprobe_gap_ms: None,
            before_uprobes: None,
        }
    }
}

/// One process of the measured tree.
#[derive(Clone, Debug, Serialize)]
pub struct Followed {
    pub pid: u32,
    pub ppid: u32,
    pub command: String,
    pub joined: Joined,
    /// Its memory map when it joined (a process that exits before the window
    /// ends is symbolized with this).
    #[serde(skip)]
    pub maps: Option<ProcMaps>,
    /// Why its uprobes could not be attached, if they could not.
    pub error: Option<String>,
}

/// The loaded and attached probes of one session.
pub struct ProbeSet {
    pid: u32,
    scope: Scope,
    shared: Arc<Mutex<Shared>>,
    stop: Arc<AtomicBool>,
    follower: Option<JoinHandle<()>>,
    /// Syscall-free uprobe kinds attached, for the cost table.
    pub families: Vec<Family>,
    /// Whether the alloc family keeps the live heap (`probe::live`).
    pub live_heap: bool,
}

/// What the follower thread and the reader share.
struct Shared {
    objects: Vec<(Family, Ebpf)>,
    stacks: StackTables,
    procs: BTreeMap<u32, Followed>,
    copy_impls: Vec<CopyImpl>,
    alloc_entries: Vec<AllocEntry>,
    alloc_unprobed: Vec<Unprobed>,
    notes: Vec<AttachNote>,
    /// The probes a user named, their sites and the links that hold them.
    user: user::UserState,
    /// How often the code the families do not count ran.
    unseen: unseen::UnseenState,
    /// The uprobes each address-space layout got, to give a process with
    /// the same layout (a forked child) the same ones at once.
    plans: Vec<Plan>,
}

/// Attaching uprobes for one process (borrowing the shared state).
struct Attacher<'a> {
    pid: u32,
    copy_impls: &'a mut Vec<CopyImpl>,
    alloc_entries: &'a mut Vec<AllocEntry>,
    alloc_unprobed: &'a mut Vec<Unprobed>,
    notes: &'a mut Vec<AttachNote>,
    user: &'a mut user::UserState,
    /// Every uprobe attached, in order: the plan of this layout.
    planned: Vec<Planned>,
}

/// One uprobe as attached: enough to attach it again to another process
/// mapping the same files at the same addresses.
#[derive(Clone, Debug)]
struct Planned {
    family: Family,
    program: String,
    /// The file as the first process reached it (`/proc/PID/...` paths
    /// are rewritten to the next process's).
    lib: PathBuf,
    placement: Placement,
    cookie: Option<u64>,
    /// A USDT semaphore's file offset: attached through
    /// `probe::usdt::GuardedUprobe` so the kernel raises it.
    semaphore: Option<u64>,
}

/// The uprobes of one layout: its executable file mappings (start, end,
/// inode, offset), the pid whose `/proc` paths the files were reached by,
/// and the probes. Discovering allocators, resolving IFUNCs and placing
/// probes is most of what attaching to a process costs; a process forked
/// into the tree waits for its uprobes uncounted meanwhile, so a child
/// with its parent's layout gets the parent's probes as they are.
struct Plan {
    layout: Vec<(u64, u64, u64, u64)>,
    owner: u32,
    probes: Vec<Planned>,
}

impl Drop for ProbeSet {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.follower.take() {
            let _ = h.join();
        }
    }
}

/// Probes need CAP_BPF and CAP_PERFMON; rig asks for root plainly.
pub fn require_root() -> Result<(), ProbeError> {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    if euid != 0 {
        return Err(ProbeError::NotRoot { euid });
    }
    Ok(())
}

/// Checks that make a bad pid a clear error before anything is loaded.
pub fn check_target(pid: u32) -> Result<(), ProbeError> {
    require_root()?;
    if pid == std::process::id() {
        return Err(ProbeError::SelfTarget { pid });
    }
    let exe = Path::new("/proc").join(pid.to_string());
    if pid == 0 || !exe.exists() {
        return Err(ProbeError::NoSuchProcess { pid });
    }
    // /proc/<tid> exists for every thread: a uprobe scoped to a thread's id
    // sees that thread alone, and the tracepoints' tgid filter never
    // matches it, so every family would read zero.
    match crate::process::tgid_of(pid) {
        Some(tgid) if tgid != pid => return Err(ProbeError::Thread { tid: pid, tgid }),
        _ => {}
    }
    // Kernel threads have an empty maps file (and so does a zombie).
    match std::fs::read_to_string(exe.join("maps")) {
        Ok(m) if m.trim().is_empty() => match super::not_measurable(pid, None) {
            e @ ProbeError::Zombie { .. } => Err(e),
            _ => Err(ProbeError::KernelThread { pid }),
        },
        Ok(_) => Ok(()),
        Err(e) => Err(super::not_measurable(pid, Some(e))),
    }
}

impl ProbeSet {
    /// Load and attach `families` to `pid` alone. Every thread of the
    /// process is covered, including threads that existed before attaching.
    pub fn attach(pid: u32, families: &[Family]) -> Result<ProbeSet, ProbeError> {
        ProbeSet::attach_scoped(pid, families, Scope::Process)
    }

    /// Load and attach `families` to `pid`, or (`Scope::Tree`) to `pid` and
    /// every process it has forked or will fork.
    pub fn attach_scoped(
        pid: u32,
        families: &[Family],
        scope: Scope,
    ) -> Result<ProbeSet, ProbeError> {
        ProbeSet::attach_with(pid, families, scope, Stacks::On)
    }

    /// `attach_scoped`, choosing whether every event carries its whole
    /// stack.
    pub fn attach_with(
        pid: u32,
        families: &[Family],
        scope: Scope,
        stack_mode: Stacks,
    ) -> Result<ProbeSet, ProbeError> {
        ProbeSet::attach_opts(pid, families, scope, stack_mode, false)
    }

    /// `attach_with`, choosing whether the alloc family also keeps the live
    /// heap: a uretprobe on every allocating entry point reads the address
    /// each allocation returned (`probe::live`). Off in every counted pass:
    /// the uretprobes cost a trap and a syscall per allocation more.
    pub fn attach_opts(
        pid: u32,
        families: &[Family],
        scope: Scope,
        stack_mode: Stacks,
        live_heap: bool,
    ) -> Result<ProbeSet, ProbeError> {
        ProbeSet::attach_named(pid, families, scope, stack_mode, live_heap, &[])
    }

    /// `attach_opts` with the probes a user named (`--usdt`, `--func`):
    /// the user family is loaded when there are some. One that matches
    /// nothing in `pid` fails the attach, with the nearest names.
    pub fn attach_named(
        pid: u32,
        families: &[Family],
        scope: Scope,
        stack_mode: Stacks,
        live_heap: bool,
        user_probes: &[crate::probe::user::UserProbe],
    ) -> Result<ProbeSet, ProbeError> {
        check_target(pid)?;
        let mut families = families.to_vec();
        families.retain(|f| *f != Family::User);
        let (user_probes, implied) = user::with_implied(pid, &families, user_probes);
        let user_probes = &user_probes[..];
        if user_probes.iter().any(|p| p.counted_by_user_family()) {
            families.push(Family::User);
        }
        // What this kernel cannot load is left out, with a note saying why;
        // the rest loads as usual.
        let k = kernel::kernel();
        let stack_mode = k.stacks(stack_mode);
        let mut refused = Vec::new();
        let families: Vec<Family> = families
            .into_iter()
            .filter(|&f| match k.allows(f) {
                Ok(()) => true,
                Err(why) => {
                    refused.push(AttachNote {
                        family: f,
                        what: "family".into(),
                        note: format!("not loaded: {why}"),
                    });
                    false
                }
            })
            .collect();
        let families = &families[..];
        let live_heap = live_heap && families.contains(&Family::Alloc);
        // The tables are sized for the processes there now (with room for
        // children that exec something else).
        let mut initial = vec![pid];
        if scope == Scope::Tree {
            initial.extend(crate::process::descendants(pid));
        }
        let initial_maps: Vec<ProcMaps> = initial
            .iter()
            .filter_map(|p| ProcMaps::read(*p).ok())
            .collect();
        let tables = StackTables::new(stack_mode, &initial_maps.iter().collect::<Vec<_>>());
        crate::probe::preload::interrupted()?;
        // Kernel-side following starts first, so a fork racing with the
        // listing below is caught by one or the other.
        let mut objects = load_following(
            families,
            scope,
            stack_mode,
            tables.capacity(),
            pid,
            live_heap,
        )?;
        let mut pids = vec![pid];
        if scope == Scope::Tree {
            for child in crate::process::descendants(pid) {
                for (family, ebpf) in &mut objects {
                    set_target(ebpf, *family, child, TARGET_TREE)?;
                }
                pids.push(child);
            }
        }
        let mut shared = Shared {
            objects,
            stacks: tables,
            procs: BTreeMap::new(),
            copy_impls: Vec::new(),
            alloc_entries: Vec::new(),
            alloc_unprobed: Vec::new(),
            notes: refused.into_iter().chain(implied).collect(),
            user: user::UserState::new(user_probes, scope == Scope::Tree),
            unseen: Default::default(),
            plans: Vec::new(),
        };
        shared.join_at_attach(pid, &pids)?;
        crate::probe::preload::interrupted()?;
        attach_tracepoints(&mut shared.objects)?;
        let shared = Arc::new(Mutex::new(shared));
        let stop = Arc::new(AtomicBool::new(false));
        let follower = (scope == Scope::Tree).then(|| {
            let (shared, stop) = (shared.clone(), stop.clone());
            std::thread::spawn(move || follow(&shared, &stop))
        });
        Ok(ProbeSet {
            pid,
            scope,
            shared,
            stop,
            follower,
            families: families.to_vec(),
            live_heap,
        })
    }

    /// One program of `family` at one libc function's entry (IFUNCs resolved
    /// to the implementation the target runs): for measuring what a single
    /// probe costs.
    pub fn attach_single(
        pid: u32,
        family: Family,
        program: &str,
        symbol: &str,
        stack_mode: Stacks,
    ) -> Result<ProbeSet, ProbeError> {
        check_target(pid)?;
        let maps = ProcMaps::read(pid).map_err(|source| ProbeError::Maps { pid, source })?;
        let c = programs::c_library(&maps, pid, family)?;
        let libc_maps_path = c.maps_path;
        let libc = maps.open_path(&libc_maps_path);
        let resolve_err = |source| ProbeError::Resolve {
            pid,
            lib: libc_maps_path.clone(),
            api: symbol.to_string(),
            source,
        };
        let offset = crate::probe::ifunc::resolve_ifunc(pid, &maps, &libc_maps_path, symbol)
            .map_err(resolve_err)?
            .file_offset;
        // The copy probe sits where `attach_copy` puts it: past mempcpy's
        // landing when mempcpy's implementation jumps into this one.
        let siblings: Vec<u64> = if family == Family::Copy {
            let joins = c.copies.map_or(&[][..], |a| a.joins);
            uprobes::copy_joiners(pid, &maps, &libc_maps_path, joins)
                .iter()
                .map(|r| r.file_offset)
                .collect()
        } else {
            Vec::new()
        };
        let stack_mode = kernel::kernel().stacks(stack_mode);
        let mut tables = StackTables::new(stack_mode, &[&maps]);
        let mut objects = vec![(family, load(family, stack_mode, tables.capacity(), false)?)];
        tables.install(&mut objects, pid, &maps)?;
        let (_, ebpf) = &mut objects[0];
        set_target(ebpf, family, pid, TARGET_ONE)?;
        let at = placement(family, program, &libc, offset, &siblings)?;
        uprobe_placed(ebpf, family, program, &libc, at, Some(1), pid)?;
        let mut procs = BTreeMap::new();
        procs.insert(pid, Followed::new(pid, Joined::Root, Some(maps)));
        Ok(ProbeSet {
            pid,
            scope: Scope::Process,
            shared: Arc::new(Mutex::new(Shared {
                objects,
                stacks: tables,
                procs,
                copy_impls: Vec::new(),
                alloc_entries: Vec::new(),
                alloc_unprobed: Vec::new(),
                notes: Vec::new(),
                user: user::UserState::new(&[], false),
                unseen: Default::default(),
                plans: Vec::new(),
            })),
            stop: Arc::new(AtomicBool::new(false)),
            follower: None,
            families: vec![family],
            live_heap: false,
        })
    }

    /// Give every process whose memory map is in `maps` tables for the
    /// modules it maps now (those it mapped at attach are placed already).
    pub fn refresh_tables(&self, maps: &BTreeMap<u32, ProcMaps>) -> Result<(), ProbeError> {
        let mut shared = self.shared();
        let Shared {
            objects, stacks, ..
        } = &mut *shared;
        if stacks.mode == Stacks::Off {
            return Ok(());
        }
        for (pid, m) in maps {
            stacks.install(objects, *pid, m)?;
        }
        Ok(())
    }

    /// Time the kernel spent in this set's BPF programs, and how many times
    /// they ran, summed over programs (needs BPF run-time stats enabled, e.g.
    /// by holding `aya::sys::enable_stats`; zero otherwise).
    pub fn program_runtime(&self) -> (Duration, u64) {
        let shared = self.shared();
        let mut total = (Duration::ZERO, 0);
        for (_, ebpf) in &shared.objects {
            for (_, prog) in ebpf.programs() {
                if let Ok(info) = prog.info() {
                    total.0 += info.run_time();
                    total.1 += info.run_count();
                }
            }
        }
        let (t, n) = shared.unseen.runtime();
        (total.0 + t, total.1 + n)
    }

    /// How many instructions the kernel's verifier processed for each
    /// loaded program, `(family, program, count)`; empty on kernels that do
    /// not say (before Linux 5.16). A program of 100,000
    /// verified instructions takes most of a second of CPU to load; the
    /// attach line prints the sum, and a test bounds each.
    pub fn verified_instructions(&self) -> Vec<(Family, String, u32)> {
        let shared = self.shared();
        let mut out = Vec::new();
        for (family, ebpf) in &shared.objects {
            for (name, prog) in ebpf.programs() {
                if let Some(n) = prog
                    .info()
                    .ok()
                    .and_then(|i| i.verified_instruction_count())
                    // Before Linux 5.16 the kernel leaves the count at 0.
                    .filter(|&n| n > 0)
                {
                    out.push((*family, name.to_string(), n));
                }
            }
        }
        out
    }

    /// Run `f` on one family's object, if it is loaded.
    pub(crate) fn with_object<R>(
        &self,
        family: Family,
        f: impl FnOnce(&mut Ebpf) -> R,
    ) -> Option<R> {
        let mut shared = self.shared();
        let (_, ebpf) = shared.objects.iter_mut().find(|(f, _)| *f == family)?;
        Some(f(ebpf))
    }

    /// The pid the probes were attached to (the tree's root).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    pub fn scope(&self) -> Scope {
        self.scope
    }

    fn shared(&self) -> MutexGuard<'_, Shared> {
        // A panic in the follower leaves plain data behind; keep reading it.
        self.shared.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Every process measured so far (root first, then by pid), with the
    /// command line as it is now for those still alive: a prefork worker
    /// retitles itself (`nginx: worker process`) only after its fork.
    pub fn processes(&self) -> Vec<Followed> {
        let mut out: Vec<Followed> = {
            let mut shared = self.shared();
            shared.syscalls_before_uprobes();
            shared.procs.values().cloned().collect()
        };
        for p in &mut out {
            let now = crate::process::cmdline(p.pid);
            if now != "?" && !now.is_empty() {
                p.command = now;
            }
        }
        out.sort_by_key(|p| (p.pid != self.pid, p.pid));
        out
    }

    /// The implementations the copy probes sit on; a `CopyKey`'s
    /// `implementation` indexes this.
    pub fn copy_impls(&self) -> Vec<CopyImpl> {
        self.shared().copy_impls.clone()
    }

    /// The allocator entry points the alloc probes sit on; an `AllocKey`'s
    /// `kind >> ALLOC_ENTRY_SHIFT` indexes this.
    pub fn alloc_entries(&self) -> Vec<AllocEntry> {
        self.shared().alloc_entries.clone()
    }

    /// The sites of the probes a user named; a `UserKey`'s `site` indexes
    /// this.
    pub fn user_sites(&self) -> Vec<crate::probe::user::UserSite> {
        self.shared().user.sites.clone()
    }

    /// The counters of code the families do not count, with their runs
    /// in `delta` (a window's difference).
    pub fn unseen(&self, delta: &Snapshot) -> Vec<UnseenCount> {
        self.shared().unseen.counted(&delta.unseen)
    }

    /// Allocators found in a measured process that rig could not probe.
    pub fn alloc_unprobed(&self) -> Vec<Unprobed> {
        self.shared().alloc_unprobed.clone()
    }

    /// What was attached where, or deliberately not, and why.
    pub fn notes(&self) -> Vec<AttachNote> {
        self.shared().notes.clone()
    }

    /// Processes past a limit of the unwind tables.
    pub fn stack_limits(&self) -> Vec<String> {
        self.shared().stacks.limits().to_vec()
    }

    /// Bring the tree up to date now (the follower does this on its own
    /// every `FOLLOW_POLL`): useful right before a window starts.
    pub fn catch_up(&self) {
        if self.scope == Scope::Tree {
            self.shared().catch_up();
        }
    }

    /// Read every counter now.
    pub fn snapshot(&self) -> Result<Snapshot, ProbeError> {
        Ok(self.snapshot_at()?.0)
    }

    /// Read every counter, and say when: the instant the counter reads
    /// began. Every family's counters (its per-stack counts included) are
    /// read before any stack's frames: the frames are thousands of lookups
    /// on a busy target, and read between the counters they would stretch
    /// a window's end past its deadline by that long, unseen.
    pub fn snapshot_at(&self) -> Result<(Snapshot, std::time::Instant), ProbeError> {
        let shared = self.shared();
        let mut s = Snapshot::default();
        let at = std::time::Instant::now();
        for (family, ebpf) in &shared.objects {
            let f = *family;
            s.stats.insert(f, read::stats(ebpf, f)?);
            match f {
                Family::Syscalls => s.syscalls = read::percpu_hash(ebpf, f, "sys_counts")?,
                Family::Alloc => s.alloc = read::percpu_hash(ebpf, f, "allocs")?,
                Family::Copy => s.copy = read::percpu_hash(ebpf, f, "copies")?,
                Family::Locks => s.locks = read::percpu_hash(ebpf, f, "locks")?,
                Family::Faults => s.faults = read::percpu_hash(ebpf, f, "faults")?,
                Family::Sched => s.sched = read::hash(ebpf, f, "sched_threads")?,
                Family::Cpu => s.cpu = read::percpu_hash(ebpf, f, "cpu_samples")?,
                Family::User => {
                    s.user = read::percpu_hash(ebpf, f, "user_calls")?;
                    s.user_ns = read::percpu_hash(ebpf, f, "user_ns")?;
                    s.user_by = read::percpu_hash(ebpf, f, "user_by_str")?;
                }
            }
            if shared.stacks.mode == Stacks::On {
                s.stacks.insert(f, stacks::read_stack_counts(ebpf, f)?);
            }
        }
        s.unseen = shared.unseen.read().map_err(ProbeError::Unseen)?;
        for (family, ebpf) in &shared.objects {
            if let Some(st) = s.stacks.get_mut(family) {
                stacks::read_frames(ebpf, *family, st)?;
            }
        }
        Ok((s, at))
    }
}

/// Sampling period of the on-CPU family: 4 kHz per CPU. Keep in step with
/// `rig_sample_period_ns` in cpu.bpf.c (the weight of one sample).
pub const CPU_SAMPLE_PERIOD_NS: u64 = 250_000;
