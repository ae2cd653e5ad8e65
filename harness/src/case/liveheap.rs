//! The memslope pass's live heap: blocks allocated since READY and still
//! allocated, by call site, at each tier, fitted against the number of
//! open connections. The slope of a site is the bytes one connection keeps
//! allocated there; what stays once every connection is closed is what a
//! closed connection left behind (a leak shows there, at its site).
//!
//! The alloc probes go on after the warm-up, with the live heap on
//! (`ProbeSet::attach_opts`): uretprobes on every allocating entry point,
//! which cost more than the entry probes of a counted pass, so only this
//! pass and `rig attach --live-heap` use them.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::launch::start::Launched;
use crate::probe::{Family, LiveHeap, ProbeSet, Scope, Stacks, WindowEnd, WindowStart};
use crate::process::maps::ProcMaps;
use crate::report::live::live_rows;
use crate::report::stacks::{StackSection, Wrappers};
use crate::stats::{least_squares, LineFit};
use crate::symbolize::{Site, Symbolizer};
use rig_ebpf::abi::CallsBytes;

/// Sites kept in a result, most bytes per connection first (the rest are
/// counted in `sites_omitted`).
pub const LIVE_SITES: usize = 20;

/// The live heap at one count of open connections.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct LivePoint {
    pub connections: usize,
    /// Bytes (as asked for, without allocator overhead) and blocks
    /// allocated since READY and not freed.
    pub bytes: u64,
    pub blocks: u64,
}

/// One allocating site of the live heap over the tiers.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct LiveSiteFit {
    /// The caller of the outermost allocator call, as the alloc table names it.
    pub site: Site,
    /// `function (file:line)`.
    pub label: String,
    pub kind: String,
    pub allocator: String,
    /// Least-squares slope of this site's live bytes (blocks) against the
    /// open connections over the fit's tiers.
    pub bytes_per_connection: f64,
    pub blocks_per_connection: f64,
    /// Live bytes and blocks at each point of `LiveHeapFit::opened`.
    pub bytes: Vec<u64>,
    pub blocks: Vec<u64>,
    /// With every connection closed again.
    pub bytes_after_close: u64,
    pub blocks_after_close: u64,
}

/// The live heap of a memslope pass.
#[derive(Clone, Debug, Serialize)]
pub struct LiveHeapFit {
    /// READY, then each tier as it was opened.
    pub opened: Vec<LivePoint>,
    /// Every connection closed again.
    pub after_close: LivePoint,
    /// Live bytes against open connections over the fit's tiers: the slope
    /// is the heap one connection keeps.
    pub fit: Option<LineFit>,
    /// Most bytes per connection (then most left after close) first.
    pub sites: Vec<LiveSiteFit>,
    /// The same blocks by user site: the first frame of each block's whole
    /// stack outside the allocators and standard libraries (`kind` and
    /// `allocator` empty), most bytes per connection first. Blocks whose
    /// stack is missing are in `sites` only.
    pub user_sites: Vec<LiveSiteFit>,
    pub sites_omitted: usize,
    /// Frees of blocks allocated before READY (counted, never subtracted).
    pub unmatched_frees: u64,
    /// Allocations not recorded because the live-heap map was full: the
    /// numbers above miss that many blocks.
    pub dropped: u64,
    pub dropped_bytes: u64,
    pub complete: bool,
}

/// The probes of a pass and its readings so far.
pub(super) struct LiveWatch {
    probes: ProbeSet,
    /// From READY: the live heap's start, and the window whose end names
    /// the blocks' whole stacks.
    start: Option<WindowStart>,
    opened: Vec<(usize, LiveHeap)>,
    after_close: Option<LiveHeap>,
    maps: BTreeMap<u32, ProcMaps>,
}

impl LiveWatch {
    /// Attach the alloc probes with the live heap to the launched tree.
    pub fn attach(l: &Launched) -> anyhow::Result<LiveWatch> {
        let probes = ProbeSet::attach_opts(l.pid, &[Family::Alloc], Scope::Tree, Stacks::On, true)?;
        Ok(LiveWatch {
            probes,
            start: None,
            opened: Vec::new(),
            after_close: None,
            maps: BTreeMap::new(),
        })
    }

    /// READY: blocks from now on are the pass's.
    pub fn open(&mut self) -> anyhow::Result<()> {
        self.start = Some(self.probes.start_window()?);
        Ok(())
    }

    fn read(&mut self) -> anyhow::Result<LiveHeap> {
        let start = self
            .start
            .as_ref()
            .and_then(WindowStart::live)
            .ok_or_else(|| anyhow::anyhow!("the live heap was not opened"))?;
        let h = self.probes.live_heap(start)?;
        // Name addresses with the maps of now, while the processes live.
        for p in self.probes.processes() {
            if let Ok(m) = ProcMaps::read(p.pid) {
                self.maps.insert(p.pid, m);
            }
        }
        Ok(h)
    }

    pub fn opened(&mut self, connections: usize) -> anyhow::Result<()> {
        let h = self.read()?;
        self.opened.push((connections, h));
        Ok(())
    }

    pub fn closed(&mut self) -> anyhow::Result<()> {
        self.after_close = Some(self.read()?);
        Ok(())
    }

    /// Name the sites and fit them over `tiers` (the connection counts of
    /// the memory fit).
    pub fn finish(self, tiers: &[usize], sym: &mut Symbolizer) -> anyhow::Result<LiveHeapFit> {
        let after = self
            .after_close
            .ok_or_else(|| anyhow::anyhow!("the live heap was not read after closing"))?;
        // The window from READY holds every stack the blocks were made on.
        let start = self
            .start
            .ok_or_else(|| anyhow::anyhow!("the live heap was not opened"))?;
        let w = self.probes.end_window(start, WindowEnd::Completed)?;
        let stacks = StackSection::build(&w, &w.copy_impls, sym, &Wrappers::default());
        let entries = self.probes.alloc_entries();
        let mut readings: Vec<&LiveHeap> = self.opened.iter().map(|(_, h)| h).collect();
        readings.push(&after);
        let rows = live_rows(&readings, &self.maps, &entries, sym);
        let conns: Vec<usize> = self.opened.iter().map(|(n, _)| *n).collect();
        let in_fit: Vec<bool> = conns.iter().map(|n| tiers.contains(n)).collect();
        let slope = |ys: &[u64]| -> f64 {
            let xy: Vec<(f64, f64)> = conns
                .iter()
                .zip(ys)
                .zip(&in_fit)
                .filter(|(_, keep)| **keep)
                .map(|((x, y), _)| (*x as f64, *y as f64))
                .collect();
            least_squares(&xy).map_or(0.0, |f| f.slope)
        };
        let n = conns.len();
        let mut sites: Vec<LiveSiteFit> = rows
            .into_iter()
            .map(|r| {
                let bytes: Vec<u64> = r.live[..n].iter().map(|v| v.bytes).collect();
                let blocks: Vec<u64> = r.live[..n].iter().map(|v| v.calls).collect();
                LiveSiteFit {
                    label: r.site.label(),
                    site: r.site,
                    kind: r.kind,
                    allocator: r.allocator,
                    bytes_per_connection: slope(&bytes),
                    blocks_per_connection: slope(&blocks),
                    bytes,
                    blocks,
                    bytes_after_close: r.live[n].bytes,
                    blocks_after_close: r.live[n].calls,
                }
            })
            .collect();
        let by_fit = |a: &LiveSiteFit, b: &LiveSiteFit| {
            b.bytes_per_connection
                .abs()
                .total_cmp(&a.bytes_per_connection.abs())
                .then(b.bytes_after_close.cmp(&a.bytes_after_close))
        };
        sites.sort_by(by_fit);
        let sites_omitted = sites.len().saturating_sub(LIVE_SITES);
        sites.truncate(LIVE_SITES);
        let mut user_sites: Vec<LiveSiteFit> = by_user_site(&readings, &stacks)
            .into_iter()
            .map(|(site, live)| {
                let bytes: Vec<u64> = live[..n].iter().map(|v| v.bytes).collect();
                let blocks: Vec<u64> = live[..n].iter().map(|v| v.calls).collect();
                LiveSiteFit {
                    label: site.label(),
                    site,
                    kind: String::new(),
                    allocator: String::new(),
                    bytes_per_connection: slope(&bytes),
                    blocks_per_connection: slope(&blocks),
                    bytes,
                    blocks,
                    bytes_after_close: live[n].bytes,
                    blocks_after_close: live[n].calls,
                }
            })
            .collect();
        user_sites.sort_by(by_fit);
        user_sites.truncate(LIVE_SITES);
        let point = |connections: usize, h: &LiveHeap| {
            let t = h.total();
            LivePoint {
                connections,
                bytes: t.bytes,
                blocks: t.calls,
            }
        };
        let opened: Vec<LivePoint> = self.opened.iter().map(|(c, h)| point(*c, h)).collect();
        let xy: Vec<(f64, f64)> = opened
            .iter()
            .filter(|p| tiers.contains(&p.connections))
            .map(|p| (p.connections as f64, p.bytes as f64))
            .collect();
        // The last reading covers the whole pass: its losses are all of them.
        Ok(LiveHeapFit {
            fit: least_squares(&xy),
            opened,
            after_close: point(0, &after),
            sites,
            user_sites,
            sites_omitted,
            unmatched_frees: after.unmatched_frees,
            dropped: after.dropped,
            dropped_bytes: after.dropped_bytes,
            complete: after.complete(),
        })
    }
}

/// Each reading's blocks summed by user site (the first frame of the
/// block's whole stack outside the allocators, as `stacks` names it): one
/// entry per site, a value per reading. Blocks without a stack are left
/// out.
fn by_user_site(readings: &[&LiveHeap], stacks: &StackSection) -> Vec<(Site, Vec<CallsBytes>)> {
    let mut out: Vec<(Site, Vec<CallsBytes>)> = Vec::new();
    for (i, h) in readings.iter().enumerate() {
        for ((_, id), v) in &h.stacks {
            let Some(site) = stacks
                .stacks
                .get(&format!("{id:016x}"))
                .and_then(|f| f.frames.get(f.user_site))
            else {
                continue;
            };
            let same = |s: &Site| s.module == site.module && s.module_offset == site.module_offset;
            let at = match out.iter().position(|(s, _)| same(s)) {
                Some(at) => at,
                None => {
                    out.push((site.clone(), vec![CallsBytes::default(); readings.len()]));
                    out.len() - 1
                }
            };
            out[at].1[i].calls += v.calls;
            out[at].1[i].bytes += v.bytes;
        }
    }
    out
}
