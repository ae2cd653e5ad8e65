//! The live heap: blocks allocated since a window opened and not freed
//! since, by (process, caller, entry point).
//!
//! In: a `ProbeSet` attached with the live heap on (`attach_opts`). Opening
//! a window writes a new number to `live_epoch`; every block the BPF side
//! records carries the number it was made under, so reading the window
//! keeps only its own blocks. A free of a block made before the window
//! (or before rig attached) is counted apart as an unmatched free and never
//! subtracted from anything. Out: `LiveHeap`, keyed like the alloc family's
//! counters (`AllocKey`, with `calls` = blocks and `bytes` = bytes still
//! allocated), so the report names it with the same code.

use std::collections::BTreeMap;

use aya::maps::{Array, HashMap, MapData};
use rig_ebpf::abi::{live_count, AllocKey, CallsBytes, LiveCounts, LiveKey, LiveVal};

use super::{read, Counter, Family, ProbeError, ProbeSet};

/// Blocks the live heap holds at once (per session, every process of the
/// tree together). One more allocation is dropped and counted (`dropped`):
/// the result says it is incomplete and by how much.
pub const LIVE_MAX_BLOCKS: u32 = 262_144;
/// Threads with an allocating call in progress at once.
pub const LIVE_MAX_THREADS: u32 = 65_536;

/// A live-heap window's start.
#[derive(Clone, Copy, Debug)]
pub struct LiveStart {
    epoch: u32,
    counts: LiveCounts,
}

/// The blocks still allocated of those made since `LiveStart`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LiveHeap {
    /// (tgid, caller, entry point) -> blocks (`calls`) and bytes still
    /// allocated. `size_class` and `flags` are 0: only outermost calls are
    /// recorded.
    pub blocks: BTreeMap<AllocKey, CallsBytes>,
    /// The same blocks by (tgid, whole stack id), when stacks were taken
    /// (id 0: the stack is missing).
    pub stacks: BTreeMap<(u32, u64), CallsBytes>,
    /// Frees (and reallocs) of blocks allocated before the window opened.
    pub unmatched_frees: u64,
    /// Allocations not recorded because the map was full.
    pub dropped: u64,
    pub dropped_bytes: u64,
    /// Allocations that returned NULL.
    pub failed: u64,
    /// Allocations recorded (outermost calls that returned a block).
    pub recorded: u64,
}

impl Counter for LiveCounts {
    fn minus(&self, s: &Self) -> Self {
        LiveCounts {
            slot: super::slots_minus(&self.slot, &s.slot),
        }
    }
    fn plus(&mut self, o: &Self) {
        super::slots_plus(&mut self.slot, &o.slot);
    }
}

const FAMILY: Family = Family::Alloc;

fn map_err(map: &'static str) -> impl Fn(aya::maps::MapError) -> ProbeError {
    read::map_err(FAMILY, map)
}

impl LiveHeap {
    /// Sum the raw blocks by (process, caller, entry point), and by
    /// (process, stack).
    pub fn of_blocks(
        blocks: impl IntoIterator<Item = (LiveKey, LiveVal)>,
        epoch: u32,
    ) -> (
        BTreeMap<AllocKey, CallsBytes>,
        BTreeMap<(u32, u64), CallsBytes>,
    ) {
        let mut out: BTreeMap<AllocKey, CallsBytes> = BTreeMap::new();
        let mut stacks: BTreeMap<(u32, u64), CallsBytes> = BTreeMap::new();
        for (k, v) in blocks {
            if v.epoch != epoch {
                continue;
            }
            let key = AllocKey {
                caller: v.caller,
                kind: v.kind,
                size_class: 0,
                tgid: k.tgid,
                flags: 0,
            };
            for e in [
                out.entry(key).or_default(),
                stacks.entry((k.tgid, v.ustack)).or_default(),
            ] {
                e.calls += 1;
                e.bytes += v.bytes;
            }
        }
        (out, stacks)
    }

    /// Whether every allocation of the window was recorded.
    pub fn complete(&self) -> bool {
        self.dropped == 0
    }

    pub fn total(&self) -> CallsBytes {
        let mut t = CallsBytes::default();
        for v in self.blocks.values() {
            t.plus(v);
        }
        t
    }
}

impl ProbeSet {
    /// Open a live-heap window: blocks allocated from now on are the
    /// window's. Blocks left from earlier windows are forgotten (their
    /// frees count as unmatched, as those of blocks from before attach do).
    /// `None` when the set was attached without the live heap.
    pub fn open_live_heap(&self) -> Result<Option<LiveStart>, ProbeError> {
        if !self.live_heap {
            return Ok(None);
        }
        self.with_object(FAMILY, open).transpose()
    }

    /// The blocks made since `start` that are still allocated now.
    pub fn live_heap(&self, start: &LiveStart) -> Result<LiveHeap, ProbeError> {
        self.with_object(FAMILY, |ebpf| {
            let raw = read::hash::<LiveKey, LiveVal>(ebpf, FAMILY, "live")?;
            let c = read_counts(ebpf)?.minus(&start.counts);
            let (blocks, stacks) = LiveHeap::of_blocks(raw, start.epoch);
            Ok(LiveHeap {
                blocks,
                stacks,
                unmatched_frees: c.slot[live_count::UNMATCHED_FREES],
                dropped: c.slot[live_count::DROPPED],
                dropped_bytes: c.slot[live_count::DROPPED_BYTES],
                failed: c.slot[live_count::FAILED],
                recorded: c.slot[live_count::RECORDED],
            })
        })
        .unwrap_or_else(|| Ok(LiveHeap::default()))
    }
}

fn open(ebpf: &mut aya::Ebpf) -> Result<LiveStart, ProbeError> {
    let counts = read_counts(ebpf)?;
    let epoch = {
        let m = read::map_mut(ebpf, FAMILY, "live_epoch")?;
        let mut a: Array<&mut MapData, u32> = Array::try_from(m).map_err(map_err("live_epoch"))?;
        let next = a.get(&0, 0).map_err(map_err("live_epoch"))? + 1;
        a.set(0, next, 0).map_err(map_err("live_epoch"))?;
        next
    };
    let m = read::map_mut(ebpf, FAMILY, "live")?;
    let mut live: HashMap<&mut MapData, LiveKey, LiveVal> =
        HashMap::try_from(m).map_err(map_err("live"))?;
    let stale: Vec<LiveKey> = live
        .iter()
        .filter_map(Result::ok)
        .filter(|(_, v)| v.epoch != epoch)
        .map(|(k, _)| k)
        .collect();
    for k in stale {
        // Freed meanwhile: already gone, nothing to do.
        let _ = live.remove(&k);
    }
    Ok(LiveStart { epoch, counts })
}

fn read_counts(ebpf: &aya::Ebpf) -> Result<LiveCounts, ProbeError> {
    Ok(
        read::percpu_array::<LiveCounts>(ebpf, FAMILY, "live_count")?
            .remove(&0)
            .unwrap_or_default(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_only_the_windows_blocks_summed_by_caller() {
        let b = |addr, bytes, caller, epoch| {
            (
                LiveKey {
                    addr,
                    tgid: 7,
                    _pad: 0,
                },
                LiveVal {
                    bytes,
                    caller,
                    ustack: caller << 8,
                    kind: 1,
                    epoch,
                },
            )
        };
        let (got, stacks) = LiveHeap::of_blocks(
            [
                b(0x1000, 64, 0xaa, 2),
                b(0x2000, 32, 0xaa, 2),
                b(0x3000, 4096, 0xbb, 2),
                b(0x4000, 999, 0xaa, 1),
            ],
            2,
        );
        let key = |caller| AllocKey {
            caller,
            kind: 1,
            size_class: 0,
            tgid: 7,
            flags: 0,
        };
        assert_eq!(got.len(), 2);
        assert_eq!(
            got[&key(0xaa)],
            CallsBytes {
                calls: 2,
                bytes: 96
            }
        );
        assert_eq!(
            got[&key(0xbb)],
            CallsBytes {
                calls: 1,
                bytes: 4096
            }
        );
        assert_eq!(stacks.len(), 2);
        assert_eq!(
            stacks[&(7, 0xaa00)],
            CallsBytes {
                calls: 2,
                bytes: 96
            }
        );
    }
}
