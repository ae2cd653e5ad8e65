//! The live heap by call site: blocks still allocated, named as the alloc
//! table names its calls (the caller of the outermost allocator call, per
//! process, summed over the processes of a tree).
//!
//! In: one or more `LiveHeap` readings of the same session (a window's end,
//! or each tier of a memslope pass), the memory maps to name their
//! addresses with, and the session's `Symbolizer`. Out: one row per (site,
//! entry point) with the blocks and bytes of every reading, in order.

use std::collections::BTreeMap;

use rig_ebpf::abi::CallsBytes;
use serde::Serialize;

use super::alloc_call;
use crate::probe::{AllocEntry, LiveHeap};
use crate::process::maps::ProcMaps;
use crate::symbolize::{AddrKind, Site, Symbolizer};

/// One allocating site's blocks still allocated, at each reading.
#[derive(Clone, Debug, PartialEq)]
pub struct LiveRow {
    pub site: Site,
    /// The entry point called (`malloc`, `operator new`, `__rust_alloc`).
    pub kind: String,
    pub allocator: String,
    /// Blocks (`calls`) and bytes still allocated, one per reading.
    pub live: Vec<CallsBytes>,
}

/// The live heap of one window (`rig attach --live-heap`).
#[derive(Clone, Debug, Serialize)]
pub struct LiveHeapSection {
    /// Bytes and blocks allocated in the window and not freed by its end.
    pub bytes: u64,
    pub blocks: u64,
    /// By site, most bytes first.
    pub sites: Vec<LiveSite>,
    /// With whole stacks: by user site (the stack's first frame outside
    /// the allocators, standard libraries and `--wrapper`s, as in
    /// `stacks`), most bytes first; empty without stacks.
    pub user_sites: Vec<LiveUserSite>,
    /// Blocks whose stack is missing (not taken or not stored): in `sites`,
    /// not in `user_sites`.
    pub blocks_without_stack: u64,
    /// Allocations the window recorded (each outermost call once: a
    /// malloc inside operator new is not another).
    pub recorded: u64,
    /// Frees (and reallocs) of blocks allocated before the window opened:
    /// counted here, subtracted from nothing.
    pub unmatched_frees: u64,
    /// Allocations not recorded because the live-heap map was full; any
    /// makes the result incomplete by that many blocks.
    pub dropped: u64,
    pub dropped_bytes: u64,
    pub complete: bool,
}

/// One site of a window's live heap.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct LiveSite {
    pub site: Site,
    pub kind: String,
    pub allocator: String,
    pub blocks: u64,
    pub bytes: u64,
}

/// One user site of a window's live heap (whole stacks only).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct LiveUserSite {
    pub site: Site,
    pub blocks: u64,
    pub bytes: u64,
}

impl LiveHeapSection {
    pub fn new(
        heap: &LiveHeap,
        maps: &BTreeMap<u32, ProcMaps>,
        entries: &[AllocEntry],
        sym: &mut Symbolizer,
        stacks: &super::stacks::StackSection,
    ) -> LiveHeapSection {
        let total = heap.total();
        let mut sites: Vec<LiveSite> = live_rows(&[heap], maps, entries, sym)
            .into_iter()
            .map(|r| LiveSite {
                site: r.site,
                kind: r.kind,
                allocator: r.allocator,
                blocks: r.live[0].calls,
                bytes: r.live[0].bytes,
            })
            .collect();
        sites.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(b.blocks.cmp(&a.blocks)));
        let mut user_sites: Vec<LiveUserSite> = Vec::new();
        let mut blocks_without_stack = 0;
        if stacks.enabled {
            for ((_, id), v) in &heap.stacks {
                let frames = stacks.stacks.get(&format!("{id:016x}"));
                let Some(site) = frames.and_then(|f| f.frames.get(f.user_site)) else {
                    blocks_without_stack += v.calls;
                    continue;
                };
                let same = |u: &LiveUserSite| {
                    u.site.module == site.module && u.site.module_offset == site.module_offset
                };
                match user_sites.iter_mut().find(|u| same(u)) {
                    Some(u) => {
                        u.blocks += v.calls;
                        u.bytes += v.bytes;
                    }
                    None => user_sites.push(LiveUserSite {
                        site: site.clone(),
                        blocks: v.calls,
                        bytes: v.bytes,
                    }),
                }
            }
            user_sites.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(b.blocks.cmp(&a.blocks)));
        }
        LiveHeapSection {
            user_sites,
            blocks_without_stack,
            bytes: total.bytes,
            blocks: total.calls,
            sites,
            recorded: heap.recorded,
            unmatched_frees: heap.unmatched_frees,
            dropped: heap.dropped,
            dropped_bytes: heap.dropped_bytes,
            complete: heap.complete(),
        }
    }
}

/// Name every reading's blocks by site: one row per (site, entry point,
/// allocator), with a value for each reading (zero where it had none).
/// A process missing from `maps` is named with any map there is (a forked
/// child shares its parent's layout).
pub fn live_rows(
    readings: &[&LiveHeap],
    maps: &BTreeMap<u32, ProcMaps>,
    entries: &[AllocEntry],
    sym: &mut Symbolizer,
) -> Vec<LiveRow> {
    let mut by_proc: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
    for h in readings {
        for k in h.blocks.keys() {
            by_proc.entry(k.tgid).or_default().push(k.caller);
        }
    }
    let mut sites: BTreeMap<(u32, u64), Site> = BTreeMap::new();
    for (tgid, mut addrs) in by_proc {
        addrs.sort_unstable();
        addrs.dedup();
        let Some(m) = maps.get(&tgid).or_else(|| maps.values().next()) else {
            continue;
        };
        let named = sym.symbolize(m, &addrs, AddrKind::ReturnAddress);
        sites.extend(addrs.into_iter().map(|a| (tgid, a)).zip(named));
    }
    let mut rows: Vec<LiveRow> = Vec::new();
    for (i, h) in readings.iter().enumerate() {
        for (k, v) in &h.blocks {
            let Some(site) = sites.get(&(k.tgid, k.caller)) else {
                continue;
            };
            let (_, kind, allocator) = alloc_call(k.kind, entries);
            let same = |r: &LiveRow| {
                r.site.module == site.module
                    && r.site.module_offset == site.module_offset
                    && r.kind == kind
                    && r.allocator == allocator
            };
            let row = match rows.iter().position(same) {
                Some(j) => &mut rows[j],
                None => {
                    rows.push(LiveRow {
                        site: site.clone(),
                        kind: kind.clone(),
                        allocator: allocator.clone(),
                        live: vec![CallsBytes::default(); readings.len()],
                    });
                    rows.last_mut().expect("just pushed")
                }
            };
            row.live[i].calls += v.calls;
            row.live[i].bytes += v.bytes;
        }
    }
    rows
}
