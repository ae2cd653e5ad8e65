//! Windows: the exact difference of two snapshots, with what is needed to
//! name its addresses afterwards.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::user::{SiteAt, UserSite};
use super::{AttachNote, CopyImpl, Family, Followed, ProbeError, ProbeSet, Snapshot};
use crate::process::maps::ProcMaps;
use crate::process::ProcessId;
use crate::runtime::{Interp, InterpName};

/// Counters at the start of a window.
pub struct WindowStart {
    snapshot: Snapshot,
    /// When its counters were read: the window's start.
    at: Instant,
    maps: BTreeMap<u32, ProcMaps>,
    /// The pids measured when the window started.
    processes: Vec<u32>,
    /// The live heap's start, when the set keeps it.
    live: Option<super::LiveStart>,
}

impl WindowStart {
    /// When the window started (its counters were read).
    pub fn at(&self) -> Instant {
        self.at
    }

    /// The live heap's start, when the set keeps it: read the blocks made
    /// since with [`ProbeSet::live_heap`] as often as needed.
    pub fn live(&self) -> Option<&super::LiveStart> {
        self.live.as_ref()
    }
}

/// Why a window ended.
#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum WindowEnd {
    /// The duration elapsed or the driven load finished.
    Completed,
    /// The user interrupted rig (SIGINT/SIGTERM); counters up to then.
    Interrupted,
    /// The target exited during the window; counters up to its exit.
    TargetExited,
}

/// A finished window: raw counters keyed by (process, address), plus each
/// process's map (taken while it was alive) to symbolize them.
pub struct Window {
    /// The root of the measured tree (or the one process).
    pub pid: u32,
    pub families: Vec<Family>,
    pub delta: Snapshot,
    pub elapsed: Duration,
    pub end: WindowEnd,
    /// tgid -> its memory map: at the window's end, or for a process that
    /// exited, at the start or when it joined.
    pub maps: BTreeMap<u32, ProcMaps>,
    /// Every process measured by the end of the window.
    pub processes: Vec<Followed>,
    /// Processes that joined the tree during the window.
    pub joined_during: Vec<u32>,
    pub scope: super::Scope,
    pub copy_impls: Vec<CopyImpl>,
    /// The sites of the probes a user named (`UserKey::site` indexes it).
    pub user_sites: Vec<super::user::UserSite>,
    /// The allocator entry points probed (`AllocKey::kind >> 16` indexes it).
    pub alloc_entries: Vec<super::attach::AllocEntry>,
    /// Allocators found in a measured process that rig could not probe.
    pub alloc_unprobed: Vec<super::allocators::Unprobed>,
    pub notes: Vec<AttachNote>,
    /// Blocks allocated in the window and not freed by its end (a set
    /// attached with the live heap only).
    pub live_heap: Option<super::LiveHeap>,
    /// Processes past a limit of the unwind tables: their stacks end early
    /// (one line each, for the report to say).
    pub stack_limits: Vec<String>,
    /// tgid -> its interpreter and the names of the interpreted frames its
    /// stacks hold (code object address -> name), read at the window's end.
    pub interp: BTreeMap<u32, (Interp, BTreeMap<u64, InterpName>)>,
    /// How often the code the families do not count ran in the window.
    pub unseen: Vec<super::attach::UnseenCount>,
    /// Per probe of a marker that counts objects by type
    /// (`usdt:hotspot:object__alloc`), each type's size in bytes, as its
    /// runtime gave them at the window's end.
    pub object_sizes: BTreeMap<String, BTreeMap<String, u64>>,
}

impl Window {
    /// The map to name `tgid`'s addresses with (the root's as a last resort:
    /// a forked child shares its parent's layout).
    pub fn maps_of(&self, tgid: u32) -> &ProcMaps {
        self.maps
            .get(&tgid)
            .or_else(|| self.maps.get(&self.pid))
            .or_else(|| self.maps.values().next())
            .expect("a window has at least the root's map")
    }
}

impl ProbeSet {
    /// Wait until the target stops moving: two snapshots `settle` apart are
    /// identical. A request's last syscall (the worker re-entering recv after
    /// sending the response) can land just after the client has its answer;
    /// snapshotting only once the counters are still puts it on the right
    /// side of the boundary. Gives up after `timeout` (a target with a
    /// background thread never settles) and says so.
    pub fn quiesce(&self, settle: Duration, timeout: Duration) -> Result<bool, ProbeError> {
        let t0 = Instant::now();
        let mut last = self.snapshot()?;
        loop {
            std::thread::sleep(settle);
            let now = self.snapshot()?;
            if now == last {
                return Ok(true);
            }
            if t0.elapsed() >= timeout {
                return Ok(false);
            }
            last = now;
        }
    }

    /// Snapshot every counter: the window starts now.
    pub fn start_window(&self) -> Result<WindowStart, ProbeError> {
        self.catch_up();
        let procs = self.processes();
        let maps = live_maps(&procs);
        // Modules loaded since attach (dlopen) get their unwind tables now;
        // ones loaded during the window end their stacks, marked.
        self.refresh_tables(&maps)?;
        let live = self.open_live_heap()?;
        let (snapshot, at) = self.snapshot_at()?;
        Ok(WindowStart {
            snapshot,
            at,
            maps,
            processes: procs.iter().map(|p| p.pid).collect(),
            live,
        })
    }

    /// Snapshot again: the window is the exact difference.
    pub fn end_window(&self, start: WindowStart, end: WindowEnd) -> Result<Window, ProbeError> {
        // Catch up first: a process forked late in the window is named.
        self.catch_up();
        // From counter reads to counter reads: the interval the counts are of.
        let (snap, end_at) = self.snapshot_at()?;
        let live_heap = start.live.as_ref().map(|l| self.live_heap(l)).transpose()?;
        let elapsed = end_at - start.at;
        let procs = self.processes();
        // Prefer the map at the end (libraries loaded during the window), but
        // a process that died has none: use the one from the start, or the
        // one from when it joined.
        let mut maps = start.maps;
        maps.extend(live_maps(&procs));
        for p in &procs {
            if let (false, Some(m)) = (maps.contains_key(&p.pid), &p.maps) {
                maps.insert(p.pid, m.clone());
            }
        }
        if !maps.contains_key(&self.pid()) {
            return Err(ProbeError::NoSuchProcess { pid: self.pid() });
        }
        // Runtimes that name their JIT code on request (a JVM's perf map)
        // do it now, after the counters are read: the names are of the
        // code as it is at the window's end.
        let mut notes = self.notes();
        for m in maps.values().filter(|m| m.pid_alive()) {
            for said in crate::runtime::write_jit_names(m) {
                let (Ok(note) | Err(note)) = said;
                notes.push(super::AttachNote {
                    family: [Family::User, Family::Alloc, Family::Locks]
                        .into_iter()
                        .find(|f| self.families.contains(f))
                        .or_else(|| self.families.first().copied())
                        .unwrap_or(Family::User),
                    what: format!("JIT names of pid {}", m.pid),
                    note,
                });
            }
        }
        let delta = snap.delta(&start.snapshot);
        let user_sites = self.user_sites();
        let object_sizes = object_sizes(&maps, &user_sites, &mut notes);
        let interp = interp_names(&delta, &maps, &user_sites);
        let joined_during = procs
            .iter()
            .map(|p| p.pid)
            .filter(|pid| !start.processes.contains(pid))
            .collect();
        Ok(Window {
            pid: self.pid(),
            families: self.families.clone(),
            elapsed,
            end,
            maps,
            processes: procs,
            joined_during,
            scope: self.scope(),
            copy_impls: self.copy_impls(),
            user_sites,
            alloc_entries: self.alloc_entries(),
            alloc_unprobed: self.alloc_unprobed(),
            notes,
            live_heap,
            stack_limits: self.stack_limits(),
            interp,
            unseen: self.unseen(&delta),
            delta,
            object_sizes,
        })
    }
}

/// The names of the interpreted frames the window's stacks hold, and of
/// the functions whose calls `--interp-calls` counted (their key's caller
/// is a frame word), read now from each process whose interpreter walked
/// them (the code objects may be gone by the time the report is written).
fn interp_names(
    delta: &Snapshot,
    maps: &BTreeMap<u32, ProcMaps>,
    user_sites: &[UserSite],
) -> BTreeMap<u32, (Interp, BTreeMap<u64, InterpName>)> {
    let mut words: BTreeMap<u32, std::collections::BTreeSet<u64>> = BTreeMap::new();
    for k in delta.user.keys() {
        if user_sites.get(k.site as usize).map(|s| s.at) == Some(SiteAt::InterpCall) {
            words.entry(k.tgid).or_default().insert(k.caller);
        }
    }
    for st in delta.stacks.values() {
        for k in st.counts.keys() {
            if let Some(s) = st.ustacks.get(&k.ustack) {
                let w = words.entry(k.tgid).or_default();
                w.extend(s.iframes().iter().map(|&f| rig_ebpf::abi::iframe::named(f)));
            }
        }
    }
    words
        .into_iter()
        .filter(|(_, w)| !w.is_empty())
        .filter_map(|(tgid, w)| {
            let m = maps.get(&tgid)?;
            let w: Vec<u64> = w.into_iter().collect();
            let (interp, names) = crate::runtime::interp_names(m, &w)?;
            Some((tgid, (interp, w.into_iter().zip(names).collect())))
        })
        .collect()
}

/// The sizes of the objects the probed markers count by type, from each
/// live process's runtime, asked only when such a marker was probed (a
/// JVM's class histogram walks its heap); why not, in `notes`.
fn object_sizes(
    maps: &BTreeMap<u32, ProcMaps>,
    user_sites: &[UserSite],
    notes: &mut Vec<super::AttachNote>,
) -> BTreeMap<String, BTreeMap<String, u64>> {
    let counts_objects = |probe: &str| {
        let mut parts = probe.splitn(3, ':');
        let (Some("usdt"), Some(provider), Some(name)) = (parts.next(), parts.next(), parts.next())
        else {
            return false;
        };
        crate::runtime::marker_layer((provider, name))
            .is_some_and(|(_, c)| c == crate::runtime::MarkerCounts::Objects)
    };
    let mut out: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
    if !user_sites.iter().any(|s| counts_objects(&s.probe)) {
        return out;
    }
    for m in maps.values().filter(|m| m.pid_alive()) {
        for s in crate::runtime::object_sizes(m) {
            let probe = format!("usdt:{}", s.marker);
            match s.sizes {
                Ok(sizes) => out.entry(probe).or_default().extend(sizes),
                Err(why) => notes.push(super::AttachNote {
                    family: Family::Alloc,
                    what: format!("{probe} object sizes of pid {}", m.pid),
                    note: format!("not read, so their bytes are not counted: {why}"),
                }),
            }
        }
    }
    out
}

/// The current map of each live process of `procs`.
fn live_maps(procs: &[Followed]) -> BTreeMap<u32, ProcMaps> {
    procs
        .iter()
        .filter_map(|p| {
            let m = ProcMaps::read(p.pid).ok()?;
            (!m.mappings.is_empty()).then_some((p.pid, m))
        })
        .collect()
}

/// Whether the process that was `id` is still alive (and not a new process
/// that reused its pid).
pub fn alive(id: &ProcessId) -> bool {
    ProcessId::of(id.pid).is_ok_and(|now| now == *id)
}
