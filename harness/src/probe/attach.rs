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
//! says how long that gap was.

use std::collections::BTreeMap;
use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use aya::maps::HashMap;
use aya::programs::perf_event::{PerfEventConfig, PerfEventScope, SamplePolicy, SoftwareEvent};
use aya::programs::uprobe::{UProbeAttachLocation, UProbeAttachPoint, UProbeScope};
use aya::programs::{PerfEvent, RawTracePoint, UProbe};
use aya::Ebpf;
use rig_ebpf::abi::{ALLOC_ENTRY_MASK, ALLOC_ENTRY_SHIFT, TARGET_ONE, TARGET_TREE};
use serde::Serialize;

use super::allocators::{AllocFamily, Layer, Unprobed};
use super::placement::{safe_probe_offset, Placement};
use super::read;
use super::stacks::{self, StackTables, Stacks};
use super::{Family, ProbeError, Snapshot};
use crate::process::maps::ProcMaps;
use crate::symbolize::elf;

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

/// How often the follower looks for processes forked into the tree.
pub const FOLLOW_POLL: Duration = Duration::from_millis(5);

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
    /// locks) were attached `uprobe_gap_ms` after the follower noticed it
    /// (the follower polls every `FOLLOW_POLL`), and calls in that gap are
    /// not counted.
    Forked { uprobe_gap_ms: Option<f64> },
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
}

/// Attaching uprobes for one process (borrowing the shared state).
struct Attacher<'a> {
    pid: u32,
    copy_impls: &'a mut Vec<CopyImpl>,
    alloc_entries: &'a mut Vec<AllocEntry>,
    alloc_unprobed: &'a mut Vec<Unprobed>,
    notes: &'a mut Vec<AttachNote>,
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
        check_target(pid)?;
        let mode = match scope {
            Scope::Process => TARGET_ONE,
            Scope::Tree => TARGET_TREE,
        };
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
        // Kernel-side following starts first, so a fork racing with the
        // listing below is caught by one or the other.
        let mut objects = Vec::new();
        let loaded = super::preload::load_all(
            families,
            scope == Scope::Tree,
            stack_mode == Stacks::On,
            |family| load(family, stack_mode, tables.capacity()),
        )?;
        for (family, mut ebpf) in loaded {
            if scope == Scope::Tree {
                raw_tp(&mut ebpf, family, "rig_follow_fork", "sched_process_fork")?;
            }
            if stack_mode == Stacks::On {
                raw_tp(&mut ebpf, family, "rig_forget_exec", "sched_process_exec")?;
            }
            set_target(&mut ebpf, family, pid, mode)?;
            objects.push((family, ebpf));
        }
        let mut pids = vec![pid];
        if scope == Scope::Tree {
            for child in crate::process::descendants(pid) {
                for (family, ebpf) in &mut objects {
                    set_target(ebpf, *family, child, mode)?;
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
            notes: Vec::new(),
        };
        for &p in &pids {
            let joined = if p == pid {
                Joined::Root
            } else {
                Joined::AtAttach
            };
            match shared.join(p, joined) {
                Ok(()) => {}
                Err(e) if p == pid => return Err(e),
                // A child that exited between the listing and now.
                Err(ProbeError::NoSuchProcess { .. } | ProbeError::Maps { .. }) => {}
                // A child whose uprobes cannot go in (a static helper, say):
                // its tracepoint counts are still real; the report says
                // what is missing.
                Err(e) => {
                    let mut f = Followed::new(p, joined, None);
                    f.error = Some(e.to_string());
                    shared.procs.insert(p, f);
                }
            }
        }
        for (family, ebpf) in &mut shared.objects {
            match family {
                Family::Syscalls => {
                    raw_tp(ebpf, *family, "rig_sys_enter", "sys_enter")?;
                    raw_tp(ebpf, *family, "rig_sys_exit", "sys_exit")?;
                }
                Family::Faults => attach_faults(ebpf)?,
                Family::Sched => raw_tp(ebpf, *family, "rig_sched_switch", "sched_switch")?,
                Family::Cpu => attach_cpu(ebpf)?,
                Family::Locks => {
                    raw_tp(ebpf, *family, "rig_lock_sys_enter", "sys_enter")?;
                    raw_tp(ebpf, *family, "rig_lock_sys_exit", "sys_exit")?;
                }
                Family::Alloc | Family::Copy => {}
            }
        }
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
        let libc_maps_path = maps.libc_path().ok_or(ProbeError::NoLibc { pid, family })?;
        let libc = maps.open_path(&libc_maps_path);
        let resolve_err = |source| ProbeError::Resolve {
            pid,
            lib: libc_maps_path.clone(),
            api: symbol.to_string(),
            source,
        };
        let offset = super::ifunc::resolve_ifunc(pid, &maps, &libc_maps_path, symbol)
            .map_err(resolve_err)?
            .file_offset;
        let mut tables = StackTables::new(stack_mode, &[&maps]);
        let mut objects = vec![(family, load(family, stack_mode, tables.capacity())?)];
        tables.install(&mut objects, pid, &maps)?;
        let (_, ebpf) = &mut objects[0];
        set_target(ebpf, family, pid, TARGET_ONE)?;
        uprobe(ebpf, family, program, &libc, offset, Some(1), pid)?;
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
            })),
            stop: Arc::new(AtomicBool::new(false)),
            follower: None,
            families: vec![family],
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
        total
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
        let mut out: Vec<Followed> = self.shared().procs.values().cloned().collect();
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

    /// Allocators found in a measured process that rig could not probe.
    pub fn alloc_unprobed(&self) -> Vec<Unprobed> {
        self.shared().alloc_unprobed.clone()
    }

    /// What was attached where, or deliberately not, and why.
    pub fn notes(&self) -> Vec<AttachNote> {
        self.shared().notes.clone()
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
        let shared = self.shared();
        let mut s = Snapshot::default();
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
            }
            if shared.stacks.mode == Stacks::On {
                s.stacks.insert(f, stacks::read_stacks(ebpf, f, true)?);
            }
        }
        Ok(s)
    }
}

impl Followed {
    /// A pid seen in the counters without a record.
    pub fn unrecorded(pid: u32) -> Followed {
        Followed::new(
            pid,
            Joined::Forked {
                uprobe_gap_ms: None,
            },
            None,
        )
    }

    fn new(pid: u32, joined: Joined, maps: Option<ProcMaps>) -> Followed {
        let ppid = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| crate::process::parse_stat_ppid(&s))
            .unwrap_or(0);
        Followed {
            pid,
            ppid,
            command: crate::process::cmdline(pid),
            joined,
            maps,
            error: None,
        }
    }
}

impl Shared {
    /// Record `pid` and attach its uprobe families.
    fn join(&mut self, pid: u32, joined: Joined) -> Result<(), ProbeError> {
        if !Path::new(&format!("/proc/{pid}")).exists() {
            return Err(ProbeError::NoSuchProcess { pid });
        }
        let maps = ProcMaps::read(pid).map_err(|source| ProbeError::Maps { pid, source })?;
        self.stacks.install(&mut self.objects, pid, &maps)?;
        let mut a = Attacher {
            pid,
            copy_impls: &mut self.copy_impls,
            alloc_entries: &mut self.alloc_entries,
            alloc_unprobed: &mut self.alloc_unprobed,
            notes: &mut self.notes,
        };
        for (family, ebpf) in &mut self.objects {
            match family {
                Family::Alloc => a.attach_alloc(ebpf, &maps)?,
                Family::Copy => a.attach_copy(ebpf, &maps)?,
                Family::Locks => a.attach_locks(ebpf, &maps)?,
                Family::Syscalls | Family::Faults | Family::Sched | Family::Cpu => {}
            }
        }
        self.procs
            .insert(pid, Followed::new(pid, joined, Some(maps)));
        Ok(())
    }

    /// Join every tgid the kernel added to `targets` since the last look.
    fn catch_up(&mut self) {
        let Some((family, ebpf)) = self.objects.first() else {
            return;
        };
        let Ok(found) = read::hash::<u32, u8>(ebpf, *family, "targets") else {
            return;
        };
        for tgid in found.into_keys() {
            if self.procs.contains_key(&tgid) {
                continue;
            }
            let seen = Instant::now();
            let uprobes = self
                .objects
                .iter()
                .any(|(f, _)| matches!(f, Family::Alloc | Family::Copy | Family::Locks));
            match self.join(
                tgid,
                Joined::Forked {
                    uprobe_gap_ms: None,
                },
            ) {
                Ok(()) => {
                    let gap = uprobes.then(|| seen.elapsed().as_secs_f64() * 1e3);
                    if let Some(p) = self.procs.get_mut(&tgid) {
                        p.joined = Joined::Forked { uprobe_gap_ms: gap };
                    }
                }
                Err(e) => {
                    // Gone already, or its uprobes would not attach: keep
                    // the record (its tracepoint counts are real) and why.
                    let mut f = Followed::new(
                        tgid,
                        Joined::Forked {
                            uprobe_gap_ms: None,
                        },
                        None,
                    );
                    f.error = Some(e.to_string());
                    self.procs.insert(tgid, f);
                }
            }
        }
    }
}

/// The follower thread: catch up with the kernel's fork-following until
/// told to stop.
fn follow(shared: &Mutex<Shared>, stop: &AtomicBool) {
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(FOLLOW_POLL);
        shared.lock().unwrap_or_else(|e| e.into_inner()).catch_up();
    }
}

impl Attacher<'_> {
    fn note(&mut self, family: Family, what: impl Into<String>, note: impl Into<String>) {
        let n = AttachNote {
            family,
            what: what.into(),
            note: note.into(),
        };
        // Every process of a tree usually maps the same libraries: say it once.
        if !self.notes.contains(&n) {
            self.notes.push(n);
        }
    }

    /// Probe every allocator layer discovery found in this process (the one
    /// serving malloc, outer layers such as Rust's shims or CPython's APIs,
    /// a second allocator behind `#[global_allocator]`). A layer other than
    /// glibc that cannot be probed is recorded as unprobed (the report says
    /// so and the alloc family is incomplete) and the others still go in.
    fn attach_alloc(&mut self, ebpf: &mut Ebpf, maps: &ProcMaps) -> Result<(), ProbeError> {
        let family = Family::Alloc;
        let found = super::allocators::discover(self.pid, maps);
        if !found
            .layers
            .iter()
            .any(|l| l.family == AllocFamily::Glibc || l.entries.iter().any(|e| e.0 == "malloc"))
            && found.unprobed.is_empty()
        {
            // No C allocator found at all (as before discovery: libc is required).
            libc_path(maps, self.pid, family)?;
        }
        for u in found.unprobed {
            if !self.alloc_unprobed.contains(&u) {
                self.alloc_unprobed.push(u);
            }
        }
        let mut done: Vec<(PathBuf, u64, String)> = Vec::new();
        for layer in &found.layers {
            let lib = maps.open_path(&layer.module);
            self.note(
                family,
                format!("{} allocator", layer.family),
                format!("{}: {}", layer.module, layer.how),
            );
            let r = self.attach_table(ebpf, layer, &lib, &mut done);
            match r {
                Ok(()) => {}
                Err(e) if layer.family == AllocFamily::Glibc => return Err(e),
                Err(e) => self.unprobed(layer, e.to_string()),
            }
        }
        Ok(())
    }

    fn unprobed(&mut self, layer: &Layer, why: String) {
        let u = Unprobed {
            pid: self.pid,
            allocator: layer.family.to_string(),
            module: layer.module.clone(),
            why,
        };
        if !self.alloc_unprobed.contains(&u) {
            self.alloc_unprobed.push(u);
        }
    }

    /// Attach each entry point of `layer` in `lib`, once per distinct code
    /// address: an alias (aligned_alloc = memalign in glibc 2.36, malloc =
    /// mi_malloc in libmimalloc) would otherwise fire two probes per call.
    /// A failing entry point other than glibc's stops nothing: it is
    /// recorded as unprobed and the rest are attached.
    fn attach_table(
        &mut self,
        ebpf: &mut Ebpf,
        layer: &Layer,
        lib: &Path,
        done: &mut Vec<(PathBuf, u64, String)>,
    ) -> Result<(), ProbeError> {
        let family = Family::Alloc;
        let lib_name = lib.display().to_string();
        let glibc = layer.family == AllocFamily::Glibc;
        let mut found = 0;
        for (symbol, program, kind, required) in &layer.entries {
            let (symbol, program, kind, required) = (symbol.as_str(), *program, *kind, *required);
            let info = elf::lookup_symbol(lib, symbol).map_err(|source| ProbeError::Resolve {
                pid: self.pid,
                lib: lib_name.clone(),
                api: symbol.to_string(),
                source,
            })?;
            let Some(info) = info else {
                if required {
                    let e = ProbeError::MissingSymbol {
                        lib: lib_name.clone(),
                        symbol: symbol.to_string(),
                        family,
                    };
                    if glibc {
                        return Err(e);
                    }
                    self.unprobed(layer, e.to_string());
                }
                continue;
            };
            found += 1;
            if let Some((_, _, first)) = done
                .iter()
                .find(|(p, off, _)| p == lib && *off == info.file_offset)
            {
                let first = first.clone();
                self.note(
                    family,
                    symbol,
                    format!("same code as {first}: counted there"),
                );
                continue;
            }
            // An optional entry point of the C/C++ runtime (libstdc++'s
            // operator new[], sized and array deletes) that only jumps on
            // gets the forwarder program: the probe at the end of the jump
            // chain counts the call once, under this entry point's name.
            // Outer layers (Rust shims, CPython) keep their own program: the
            // call they jump into is another layer's, counted there as inner.
            let forwards_to = (!required
                && matches!(layer.family, AllocFamily::Glibc | AllocFamily::Cxx))
            .then(|| tail_jump(lib, info.file_offset))
            .flatten();
            let program = if forwards_to.is_some() {
                "rig_alloc_fwd"
            } else {
                program
            };
            let entry = self.entry_index(layer, symbol, kind, info.file_offset);
            let cookie = kind | (entry << ALLOC_ENTRY_SHIFT);
            let at = match uprobe(
                ebpf,
                family,
                program,
                lib,
                info.file_offset,
                Some(cookie as u64),
                self.pid,
            ) {
                Ok(at) => at,
                Err(e) if glibc => return Err(e),
                Err(e) => {
                    self.unprobed(layer, format!("{symbol}: {e}"));
                    continue;
                }
            };
            done.push((lib.to_path_buf(), info.file_offset, symbol.to_string()));
            let how = match forwards_to {
                Some(dest) => format!(", a forwarder (jumps to {dest}): counted once at the end of the jump under this name"),
                None => String::new(),
            };
            self.note(
                family,
                symbol,
                format!(
                    "uprobe at {}+{:#x} ({}){how}{}",
                    basename(&lib_name),
                    info.file_offset,
                    layer.family,
                    moved(&at, info.file_offset)
                ),
            );
        }
        if found == 0 && !glibc {
            self.unprobed(
                layer,
                format!(
                    "none of its entry points was found in {}",
                    basename(&lib_name)
                ),
            );
        }
        Ok(())
    }

    /// The index of an entry point in the session's table (the high half of
    /// its attach cookie), added on first use.
    fn entry_index(&mut self, layer: &Layer, symbol: &str, kind: u32, file_offset: u64) -> u32 {
        let i = match self.alloc_entries.iter().position(|e| {
            e.module == layer.module && e.file_offset == file_offset && e.symbol == symbol
        }) {
            Some(i) => i,
            None => {
                self.alloc_entries.push(AllocEntry {
                    allocator: layer.family,
                    symbol: super::allocators::display_name(symbol, kind),
                    module: layer.module.clone(),
                    file_offset,
                });
                self.alloc_entries.len() - 1
            }
        };
        (i as u32).min(ALLOC_ENTRY_MASK)
    }

    fn attach_copy(&mut self, ebpf: &mut Ebpf, maps: &ProcMaps) -> Result<(), ProbeError> {
        let family = Family::Copy;
        let libc_maps_path = maps
            .find_object(|p| basename(p).starts_with("libc.so"))
            .ok_or(ProbeError::NoLibc {
                pid: self.pid,
                family,
            })?;
        let libc = maps.open_path(&libc_maps_path);
        // The implementations of this process; one CopyImpl per distinct
        // (library, offset) across the tree, whose index is the cookie.
        let mut mine: Vec<usize> = Vec::new();
        for api in ["memcpy", "memmove", "memset"] {
            let r = super::ifunc::resolve_ifunc(self.pid, maps, &libc_maps_path, api).map_err(
                |source| ProbeError::Resolve {
                    pid: self.pid,
                    lib: libc_maps_path.clone(),
                    api: api.to_string(),
                    source,
                },
            )?;
            let i = match self
                .copy_impls
                .iter()
                .position(|c| c.lib == libc_maps_path && c.file_offset == r.file_offset)
            {
                Some(i) => i,
                None => {
                    self.copy_impls.push(CopyImpl {
                        apis: Vec::new(),
                        lib: libc_maps_path.clone(),
                        file_offset: r.file_offset,
                        impl_name: r.impl_name.clone(),
                        method: r.method.clone(),
                    });
                    self.copy_impls.len() - 1
                }
            };
            if !self.copy_impls[i].apis.iter().any(|a| a == api) {
                self.copy_impls[i].apis.push(api.to_string());
            }
            if !mine.contains(&i) {
                mine.push(i);
            }
        }
        for i in mine {
            let c = self.copy_impls[i].clone();
            let at = uprobe(
                ebpf,
                family,
                "rig_copy",
                &libc,
                c.file_offset,
                Some(i as u64),
                self.pid,
            )?;
            self.note(
                family,
                c.apis.join("/"),
                format!(
                    "uprobe at {} ({}+{:#x}), found by {}{}",
                    c.impl_name
                        .as_deref()
                        .unwrap_or("an unnamed implementation"),
                    basename(&c.lib),
                    c.file_offset,
                    c.method,
                    moved(&at, c.file_offset)
                ),
            );
        }
        Ok(())
    }

    fn attach_locks(&mut self, ebpf: &mut Ebpf, maps: &ProcMaps) -> Result<(), ProbeError> {
        let family = Family::Locks;
        let libc = libc_path(maps, self.pid, family)?;
        let lib_name = libc.display().to_string();
        let find = |symbol: &str| -> Result<u64, ProbeError> {
            elf::lookup_symbol(&libc, symbol)
                .map_err(|source| ProbeError::Resolve {
                    pid: self.pid,
                    lib: lib_name.clone(),
                    api: symbol.to_string(),
                    source,
                })?
                .map(|s| s.file_offset)
                .ok_or_else(|| ProbeError::MissingSymbol {
                    lib: lib_name.clone(),
                    symbol: symbol.to_string(),
                    family,
                })
        };
        let lock = find("pthread_mutex_lock")?;
        let trylock = find("pthread_mutex_trylock")?;
        let unlock = find("pthread_mutex_unlock")?;
        let pid = self.pid;
        for (program, entry, what) in [
            ("rig_mutex_lock", lock, "pthread_mutex_lock"),
            ("rig_mutex_lock_ret", lock, "pthread_mutex_lock return"),
            ("rig_mutex_trylock", trylock, "pthread_mutex_trylock"),
            (
                "rig_mutex_lock_ret",
                trylock,
                "pthread_mutex_trylock return",
            ),
            ("rig_mutex_unlock", unlock, "pthread_mutex_unlock"),
        ] {
            let at = uprobe(ebpf, family, program, &libc, entry, None, pid)?;
            if !at.skipped.is_empty() {
                self.note(family, what, moved(&at, entry));
            }
        }
        self.note(
            family,
            "pthread_mutex_lock/trylock/unlock",
            format!(
                "uprobes (+uretprobes on lock/trylock) in {}",
                basename(&lib_name)
            ),
        );
        Ok(())
    }
}

fn load(
    family: Family,
    stack_mode: Stacks,
    sizes: super::unwind::Sizes,
) -> Result<Ebpf, ProbeError> {
    let bytes = match family {
        Family::Syscalls => rig_ebpf::SYSCALLS,
        Family::Alloc => rig_ebpf::ALLOC,
        Family::Copy => rig_ebpf::COPY,
        Family::Locks => rig_ebpf::LOCKS,
        Family::Faults => rig_ebpf::FAULTS,
        Family::Sched => rig_ebpf::SCHED,
        Family::Cpu => rig_ebpf::CPU,
    };
    stacks::load_object(family, bytes, stack_mode, sizes)
}

fn set_target(ebpf: &mut Ebpf, family: Family, tgid: u32, mode: u8) -> Result<(), ProbeError> {
    let m = ebpf.map_mut("targets").ok_or_else(|| ProbeError::Missing {
        family,
        what: "map",
        name: "targets".into(),
    })?;
    let mut targets: HashMap<_, u32, u8> =
        HashMap::try_from(m).map_err(|source| ProbeError::Map {
            family,
            map: "targets",
            source,
        })?;
    targets
        .insert(tgid, mode, 0)
        .map_err(|source| ProbeError::Map {
            family,
            map: "targets",
            source,
        })
}

fn program_err(
    family: Family,
    what: String,
) -> impl FnOnce(aya::programs::ProgramError) -> ProbeError {
    move |source| ProbeError::Program {
        family,
        what,
        source,
    }
}

fn missing_program(family: Family, name: &str) -> ProbeError {
    ProbeError::Missing {
        family,
        what: "program",
        name: name.to_string(),
    }
}

fn raw_tp(ebpf: &mut Ebpf, family: Family, program: &str, tp: &str) -> Result<(), ProbeError> {
    let p: &mut RawTracePoint = ebpf
        .program_mut(program)
        .ok_or_else(|| missing_program(family, program))?
        .try_into()
        .map_err(program_err(family, format!("program {program}")))?;
    if p.fd().is_err() {
        p.load()
            .map_err(program_err(family, format!("loading {program}")))?;
    }
    p.attach(tp).map_err(program_err(
        family,
        format!("attaching {program} to raw tracepoint {tp}"),
    ))?;
    Ok(())
}

/// Attach a uprobe (or uretprobe: the program's section decides) at a
/// function entry, scoped to the target process. The probe goes on the first
/// instruction that is safe to single-step (`placement`); returns where.
fn uprobe(
    ebpf: &mut Ebpf,
    family: Family,
    program: &str,
    lib: &Path,
    file_offset: u64,
    cookie: Option<u64>,
    pid: u32,
) -> Result<Placement, ProbeError> {
    let placement = safe_probe_offset(lib, file_offset).map_err(|why| ProbeError::Unsafe {
        family,
        what: format!("{program} at {}+{file_offset:#x}", lib.display()),
        why,
    })?;
    let p: &mut UProbe = ebpf
        .program_mut(program)
        .ok_or_else(|| missing_program(family, program))?
        .try_into()
        .map_err(program_err(family, format!("program {program}")))?;
    if p.fd().is_err() {
        p.load()
            .map_err(program_err(family, format!("loading {program}")))?;
    }
    let point = UProbeAttachPoint {
        location: UProbeAttachLocation::AbsoluteOffset(placement.file_offset),
        cookie,
    };
    let scope = UProbeScope::OneProcess(NonZeroU32::new(pid).expect("pid checked nonzero"));
    p.attach(point, lib, scope).map_err(program_err(
        family,
        format!(
            "attaching {program} at {}+{:#x}",
            lib.display(),
            placement.file_offset
        ),
    ))?;
    Ok(placement)
}

/// Text for a note when a probe was moved off a vector instruction.
fn moved(p: &Placement, entry: u64) -> String {
    if p.skipped.is_empty() {
        String::new()
    } else {
        format!(
            "; placed at entry+{:#x}, after `{}` (single-stepping vector instructions corrupts the target)",
            p.file_offset - entry,
            p.skipped.join("; ")
        )
    }
}

fn attach_faults(ebpf: &mut Ebpf) -> Result<(), ProbeError> {
    for (program, event) in [
        ("rig_fault_minor", SoftwareEvent::PageFaultsMin),
        ("rig_fault_major", SoftwareEvent::PageFaultsMaj),
    ] {
        per_cpu_event(ebpf, Family::Faults, program, event, 1)?;
    }
    Ok(())
}

/// Load `program` and attach it to the software perf event `event` on
/// every online CPU (all processes: the program filters by tgid), firing
/// every `period` events.
fn per_cpu_event(
    ebpf: &mut Ebpf,
    family: Family,
    program: &str,
    event: SoftwareEvent,
    period: u64,
) -> Result<(), ProbeError> {
    let cpus = aya::util::online_cpus().map_err(|(_, e)| ProbeError::Cpus(e))?;
    let p: &mut PerfEvent = ebpf
        .program_mut(program)
        .ok_or_else(|| missing_program(family, program))?
        .try_into()
        .map_err(program_err(family, format!("program {program}")))?;
    if p.fd().is_err() {
        p.load()
            .map_err(program_err(family, format!("loading {program}")))?;
    }
    for &cpu in &cpus {
        p.attach(
            PerfEventConfig::Software(event),
            PerfEventScope::AllProcessesOneCpu { cpu },
            SamplePolicy::Period(period),
            false,
        )
        .map_err(program_err(
            family,
            format!("attaching {program} on cpu {cpu}"),
        ))?;
    }
    Ok(())
}

/// Sampling period of the on-CPU family: 4 kHz per CPU. Keep in step with
/// `rig_sample_period_ns` in cpu.bpf.c (the weight of one sample).
pub const CPU_SAMPLE_PERIOD_NS: u64 = 250_000;

/// A software cpu-clock event on every CPU, sampling every
/// `CPU_SAMPLE_PERIOD_NS` of CPU time; the program keeps the followed
/// processes' samples.
fn attach_cpu(ebpf: &mut Ebpf) -> Result<(), ProbeError> {
    per_cpu_event(
        ebpf,
        Family::Cpu,
        "rig_cpu_sample",
        SoftwareEvent::CpuClock,
        CPU_SAMPLE_PERIOD_NS,
    )
}

fn libc_path(maps: &ProcMaps, pid: u32, family: Family) -> Result<PathBuf, ProbeError> {
    maps.find_object(|p| basename(p).starts_with("libc.so"))
        .map(|p| maps.open_path(&p))
        .ok_or(ProbeError::NoLibc { pid, family })
}

pub(crate) fn basename(p: &str) -> &str {
    p.rsplit('/').next().unwrap_or(p)
}

/// If the function at `file_offset` starts with an unconditional jump
/// (after an optional endbr64), return where it goes, as text.
fn tail_jump(lib: &Path, file_offset: u64) -> Option<String> {
    use std::os::unix::fs::FileExt;
    let f = std::fs::File::open(lib).ok()?;
    let mut code = [0u8; 16];
    f.read_exact_at(&mut code, file_offset).ok()?;
    let mut i = 0;
    if code[..4] == [0xf3, 0x0f, 0x1e, 0xfa] {
        i = 4; // endbr64
    }
    let at = file_offset + i as u64;
    match code[i] {
        0xe9 => {
            let rel = i32::from_le_bytes(code[i + 1..i + 5].try_into().ok()?);
            Some(format!("+{:#x}", (at as i64 + 5 + rel as i64) as u64))
        }
        0xeb => {
            let rel = code[i + 1] as i8;
            Some(format!("+{:#x}", (at as i64 + 2 + rel as i64) as u64))
        }
        // jmp *disp32(%rip): a tail call through the GOT (PLT-less call).
        0xff if code[i + 1] == 0x25 => Some("a GOT entry".to_string()),
        _ => None,
    }
}
