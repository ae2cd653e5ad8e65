//! Putting unwind tables into every loaded BPF object, and reading stacks
//! back.
//!
//! In: the processes a `ProbeSet` measures (their memory maps). Out: the
//! `unwind_rows`, `unwind_procs` and `unwind_slots` maps of every object
//! filled, so each family's programs can walk whole user stacks; after a
//! window, the stacks (`ustacks`, `kstacks`) its per-stack counts refer to.
//!
//! Every object gets the same rows at the same indices: a module's rows are
//! placed once per session (keyed by file identity) and written to each
//! object's array through a shared memory mapping of it (no syscall per
//! row). Address spaces with the same mappings share a slot, as a forked
//! child does (the kernel side copies the parent's slot at fork).

use std::collections::BTreeMap;
use std::os::fd::{AsFd, AsRawFd};
use std::sync::{Mutex, MutexGuard, OnceLock};

use aya::maps::{Array, HashMap, Map, MapData, StackTraceMap};
use aya::{Ebpf, EbpfLoader};
use rig_ebpf::abi::{InterpProc, StackKey, StackVal, UStack, UnwindProc, UNWIND_MAX_PROCS};

use super::unwind::{Sizes, Tables};
use super::{read, Family, ProbeError};
use crate::process::maps::ProcMaps;

/// Whether the families walk whole user stacks (and kernel stacks where
/// they have them) for every event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Stacks {
    /// One frame per event (the caller at `*sp`, or the faulting IP).
    Off,
    /// Whole stacks, unwound from `.eh_frame` tables.
    #[default]
    On,
}

/// One loader for the session, holding the kernel BTF it parsed once:
/// aya's `EbpfLoader::new()` parses /sys/kernel/btf/vmlinux each time it
/// is called, which held every loader thread 0.27–0.34 s before its first
/// `bpf` call (strace -tt, docs/guide.md "How long opening a window
/// takes"). The lock covers reading the object and creating its maps
/// (0.09–0.13 s per family, most of it the per-CPU `stack_counts`), so
/// that part is serial; the verifier runs after, when each thread loads
/// its programs.
fn loader() -> MutexGuard<'static, EbpfLoader<'static>> {
    static LOADER: OnceLock<Mutex<EbpfLoader<'static>>> = OnceLock::new();
    LOADER
        .get_or_init(|| Mutex::new(EbpfLoader::new()))
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

/// Load one family's object with the stack settings in place.
pub fn load_object(
    family: Family,
    bytes: &[u8],
    stacks: Stacks,
    sizes: Sizes,
    live_heap: bool,
) -> Result<Ebpf, ProbeError> {
    static ON: u8 = 1;
    static OFF: u8 = 0;
    let on = match stacks {
        Stacks::On => &ON,
        Stacks::Off => &OFF,
    };
    let mut loader = loader();
    loader.override_global("rig_stacks", on, true);
    // The loader is shared: every setting is written on every load.
    loader.override_global("rig_live_heap", if live_heap { &ON } else { &OFF }, false);
    let (blocks, threads) = if live_heap {
        (super::live::LIVE_MAX_BLOCKS, super::live::LIVE_MAX_THREADS)
    } else {
        (1, 1)
    };
    loader.map_max_entries("live", blocks);
    loader.map_max_entries("live_pendings", threads);
    loader.map_max_entries("unwind_rows", sizes.rows.max(1) as u32);
    loader.map_max_entries("unwind_index", sizes.index.max(1) as u32);
    loader
        .load(bytes)
        .map_err(|source| ProbeError::Load { family, source })
}

/// The session's unwind tables and what has been written where.
pub struct StackTables {
    pub mode: Stacks,
    tables: Tables,
    /// Rows and index entries each object's arrays hold.
    capacity: Sizes,
    /// Rows and index entries already written to every object.
    written: Sizes,
    /// Address spaces by slot.
    slots: Vec<UnwindProc>,
}

impl StackTables {
    /// Tables for `procs`, with room for modules of processes that join
    /// later (a child that execs another program).
    pub fn new(mode: Stacks, procs: &[&ProcMaps]) -> StackTables {
        let mut tables = Tables::default();
        let capacity = if mode == Stacks::On {
            let n = tables.needed(procs);
            Sizes {
                rows: n.rows + n.rows / 2 + 65_536,
                index: n.index + n.index / 2 + 65_536,
            }
        } else {
            Sizes { rows: 1, index: 1 }
        };
        StackTables {
            mode,
            tables,
            capacity,
            written: Sizes::default(),
            slots: Vec::new(),
        }
    }

    pub fn capacity(&self) -> Sizes {
        self.capacity
    }

    /// Address spaces past a limit of the tables (their stacks end early
    /// where a frame is in what did not fit), one line each.
    pub fn limits(&self) -> &[String] {
        &self.tables.limits
    }

    /// Give `pid` its tables in every object.
    pub fn install(
        &mut self,
        objects: &mut [(Family, Ebpf)],
        pid: u32,
        maps: &ProcMaps,
    ) -> Result<(), ProbeError> {
        if self.mode == Stacks::Off {
            // Counting an interpreter's calls (`--interp-calls`) finds the
            // frame entered as a stack's walk does.
            return self.install_interp(objects, pid, maps);
        }
        let entry = self.tables.proc_entry(maps, self.capacity);
        let new_rows = &self.tables.rows[self.written.rows..];
        let new_index = &self.tables.index[self.written.index..];
        for (family, ebpf) in objects.iter_mut() {
            write_array(ebpf, *family, "unwind_rows", self.written.rows, new_rows)?;
            write_array(ebpf, *family, "unwind_index", self.written.index, new_index)?;
        }
        self.written = Sizes {
            rows: self.tables.rows.len(),
            index: self.tables.index.len(),
        };
        let slot = match self.slots.iter().position(|s| *s == entry) {
            Some(s) => s as u32,
            None => {
                if self.slots.len() as u32 >= UNWIND_MAX_PROCS {
                    // No slot left: this process's stacks say "no tables".
                    self.tables.note_limit(format!(
                        "pid {pid}: every one of rig's {UNWIND_MAX_PROCS} address-space \
                         tables is in use: its stacks end at their first frame"
                    ));
                    return Ok(());
                }
                self.slots.push(entry);
                let s = (self.slots.len() - 1) as u32;
                for (family, ebpf) in objects.iter_mut() {
                    let m = read::map_mut(ebpf, *family, "unwind_procs")?;
                    let mut procs: Array<_, UnwindProc> =
                        Array::try_from(m).map_err(read::map_err(*family, "unwind_procs"))?;
                    procs
                        .set(s, entry, 0)
                        .map_err(read::map_err(*family, "unwind_procs"))?;
                }
                s
            }
        };
        for (family, ebpf) in objects.iter_mut() {
            let m = read::map_mut(ebpf, *family, "unwind_slots")?;
            let mut slots: HashMap<_, u32, u32> =
                HashMap::try_from(m).map_err(read::map_err(*family, "unwind_slots"))?;
            slots
                .insert(pid, slot, 0)
                .map_err(read::map_err(*family, "unwind_slots"))?;
        }
        self.install_interp(objects, pid, maps)
    }

    /// Where `pid`'s interpreter keeps its threads' frames, in every
    /// object, when it runs one rig can walk; why not, said once, when it
    /// runs one rig cannot.
    fn install_interp(
        &mut self,
        objects: &mut [(Family, Ebpf)],
        pid: u32,
        maps: &ProcMaps,
    ) -> Result<(), ProbeError> {
        let interp = match crate::runtime::interp_frames(maps) {
            None => return Ok(()),
            Some(Err(why)) => {
                if self.mode == Stacks::On {
                    self.tables.note_limit(format!("pid {pid}: {why}"));
                }
                return Ok(());
            }
            Some(Ok(interp)) => interp,
        };
        for (family, ebpf) in objects.iter_mut() {
            let m = read::map_mut(ebpf, *family, "interp_procs")?;
            let mut procs: HashMap<_, u32, InterpProc> =
                HashMap::try_from(m).map_err(read::map_err(*family, "interp_procs"))?;
            procs
                .insert(pid, interp.layout, 0)
                .map_err(read::map_err(*family, "interp_procs"))?;
        }
        Ok(())
    }
}

/// Write `rows` at index `at` of the object's array `name` through a shared
/// mapping of it (the array is BPF_F_MMAPABLE; its value type is `T`).
fn write_array<T: Copy>(
    ebpf: &mut Ebpf,
    family: Family,
    name: &'static str,
    at: usize,
    rows: &[T],
) -> Result<(), ProbeError> {
    if rows.is_empty() {
        return Ok(());
    }
    let m = read::map_mut(ebpf, family, name)?;
    let Map::Array(data) = m else {
        return Err(ProbeError::Missing {
            family,
            what: "array map",
            name: name.into(),
        });
    };
    let data: &MapData = data;
    let fd = data.fd().as_fd().as_raw_fd();
    let row = size_of::<T>();
    let len = (at + rows.len()) * row;
    // SAFETY: mapping a BPF array map's memory, shared, read-write, for the
    // length of the rows written (within max_entries, checked by the
    // placement); it is unmapped below before anything else touches it.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            0,
        );
        if p == libc::MAP_FAILED {
            return Err(ProbeError::Mmap {
                family,
                source: std::io::Error::last_os_error(),
            });
        }
        let dst = (p as *mut u8).add(at * row) as *mut T;
        std::ptr::copy_nonoverlapping(rows.as_ptr(), dst, rows.len());
        libc::munmap(p, len);
    }
    Ok(())
}

/// The stacks of one object at one instant.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StackSnapshot {
    pub counts: BTreeMap<StackKey, StackVal>,
    pub ustacks: BTreeMap<u64, UStack>,
    /// Kernel stack id -> frames (innermost first).
    pub kstacks: BTreeMap<i32, Vec<u64>>,
}

/// Read one object's per-stack counts and the stacks they name.
pub fn read_stacks(
    ebpf: &Ebpf,
    family: Family,
    with_frames: bool,
) -> Result<StackSnapshot, ProbeError> {
    let mut out = read_stack_counts(ebpf, family)?;
    if with_frames {
        read_frames(ebpf, family, &mut out)?;
    }
    Ok(out)
}

/// One object's per-stack counts, no frames yet ([`read_frames`]).
pub fn read_stack_counts(ebpf: &Ebpf, family: Family) -> Result<StackSnapshot, ProbeError> {
    Ok(StackSnapshot {
        counts: read::percpu_hash(ebpf, family, "stack_counts")?,
        ..Default::default()
    })
}

/// The frames of every stack `out`'s counts name.
pub fn read_frames(ebpf: &Ebpf, family: Family, out: &mut StackSnapshot) -> Result<(), ProbeError> {
    if out.counts.is_empty() {
        return Ok(());
    }
    let ustacks: HashMap<&MapData, u64, UStack> =
        HashMap::try_from(ebpf.map("ustacks").ok_or_else(|| ProbeError::Missing {
            family,
            what: "map",
            name: "ustacks".into(),
        })?)
        .map_err(read::map_err(family, "ustacks"))?;
    for k in out.counts.keys() {
        if k.ustack != 0 && !out.ustacks.contains_key(&k.ustack) {
            if let Ok(s) = ustacks.get(&k.ustack, 0) {
                out.ustacks.insert(k.ustack, s);
            }
        }
    }
    if let Some(m) = ebpf.map("kstacks") {
        let kst: StackTraceMap<&MapData> =
            StackTraceMap::try_from(m).map_err(read::map_err(family, "kstacks"))?;
        for k in out.counts.keys() {
            if k.kstack >= 0 && !out.kstacks.contains_key(&k.kstack) {
                if let Ok(t) = kst.get(&(k.kstack as u32), 0) {
                    out.kstacks
                        .insert(k.kstack, t.frames().iter().map(|f| f.ip).collect());
                }
            }
        }
    }
    Ok(())
}
