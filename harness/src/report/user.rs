//! The probes a user named (`--usdt`, `--func`): one entry per marker or
//! function, with its calls in the window and by call site — the code that
//! fired the marker, or the function's caller — and the argument summed
//! where one was asked for (`--usdt …@N`), and by the string an argument
//! points at where that was asked for (`--usdt …#S[/L]`: a JVM's objects
//! by class, a Python interpreter's calls by function).
//!
//! Every probe that was attached is listed, also one that never fired in
//! the window: its zero is a count, not an absence.

use std::collections::BTreeMap;

use serde::Serialize;

use super::build::Builder;
use super::stacks::{StackFrames, StackSection};
use crate::probe::user::{ByArg, SiteAt, UserSite};
use crate::process::maps::ProcMaps;
use crate::symbolize::{AddrKind, Naming, Site};

/// One probe a user named.
#[derive(Clone, Debug, Serialize)]
pub struct UserProbeRow {
    /// `usdt:PROVIDER:NAME` or `func:NAME`.
    pub probe: String,
    /// The argument summed (numbered from 0), if one was asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub arg: Option<u8>,
    pub calls: u64,
    /// The argument's sum over the window (as the marker's type: signed
    /// arguments sum signed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub arg_sum: Option<i128>,
    /// Time inside the function over the window, its outermost calls per
    /// thread (`--func-time`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ns_inside: Option<u64>,
    /// Where it was probed: `module+0xoffset` per site.
    pub probed_at: Vec<String>,
    /// Calls by call site, most first.
    pub sites: Vec<UserSiteRow>,
    /// The string argument its calls are counted by (`#S[/L]`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub by: Option<ByArg>,
    /// Calls by that string, most first (a string longer than
    /// `user_arg::STR - 1` bytes is cut there; one that could not be read
    /// is the empty string).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub by_value: Vec<UserValueRow>,
}

/// Calls of a probe whose string argument was `value`.
#[derive(Clone, Debug, Serialize)]
pub struct UserValueRow {
    pub value: String,
    pub calls: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub arg_sum: Option<i128>,
    /// Bytes of the objects of this type a marker counted by type, its
    /// calls times the size its runtime gave at the window's end (a JVM's
    /// instance size); absent when unknown (an array), never 0.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    /// Its calls by where they were made, most first (with stacks): the
    /// innermost frame of JIT code its runtime names as the program's own
    /// (a Java class at the Java method that makes it), else the stack's
    /// user site.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub sites: Vec<UserSiteRow>,
}

#[derive(Clone, Debug, Serialize)]
pub struct UserSiteRow {
    pub site: Site,
    pub calls: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub arg_sum: Option<i128>,
}

impl Builder<'_> {
    /// The user family's probes, each with its calls by site.
    pub fn user(&mut self, stacks: &StackSection) -> Vec<UserProbeRow> {
        let w = self.w;
        let sites = &w.user_sites;
        let kind_of = |site: u32| match sites.get(site as usize).map(|s| s.at) {
            Some(SiteAt::Marker) => AddrKind::InstructionPointer,
            _ => AddrKind::ReturnAddress,
        };
        // Markers are named where they fire, functions by their callers.
        let mut named: [BTreeMap<(u32, u64), Site>; 2] = Default::default();
        for (i, kind) in [AddrKind::InstructionPointer, AddrKind::ReturnAddress]
            .into_iter()
            .enumerate()
        {
            let addrs: Vec<(u32, u64)> = w
                .delta
                .user
                .keys()
                .filter(|k| kind_of(k.site) == kind)
                .filter(|k| sites.get(k.site as usize).map(|s| s.at) != Some(SiteAt::InterpCall))
                .map(|k| (k.tgid, k.caller))
                .collect();
            named[i] = self.callers(addrs, kind);
        }
        let mut rows: Vec<UserProbeRow> = Vec::new();
        for s in sites {
            let at = format!("{}+{:#x}", s.module, s.file_offset);
            match rows.iter_mut().find(|r| r.probe == s.probe) {
                Some(r) => r.probed_at.push(at),
                None => rows.push(UserProbeRow {
                    probe: s.probe.clone(),
                    arg: s.arg,
                    calls: 0,
                    arg_sum: s.arg.map(|_| 0),
                    ns_inside: s.timed.then_some(0),
                    probed_at: vec![at],
                    sites: Vec::new(),
                    by: s.by,
                    by_value: Vec::new(),
                }),
            }
        }
        for (k, v) in &w.delta.user {
            let Some((s, row)) = probe_row(&mut rows, sites, k.site) else {
                continue;
            };
            let sum = arg_sum(s, v.bytes);
            add((&mut row.calls, &mut row.arg_sum), v.calls, sum);
            let site = if s.at == SiteAt::InterpCall {
                super::interp::entered(w, k.tgid, k.caller)
            } else {
                let i = usize::from(kind_of(k.site) == AddrKind::ReturnAddress);
                named[i][&(k.tgid, k.caller)].clone()
            };
            let same = |r: &&mut UserSiteRow| super::same_site(&r.site, &site);
            match row.sites.iter_mut().find(same) {
                Some(r) => add((&mut r.calls, &mut r.arg_sum), v.calls, sum),
                None => row.sites.push(UserSiteRow {
                    site,
                    calls: v.calls,
                    arg_sum: sum,
                }),
            }
        }
        for (k, v) in &w.delta.user_by {
            let Some((s, row)) = probe_row(&mut rows, sites, k.site) else {
                continue;
            };
            let (value, sum) = (k.text(), arg_sum(s, v.bytes));
            let i = match row.by_value.iter().position(|r| r.value == value) {
                Some(i) => i,
                None => {
                    row.by_value.push(UserValueRow {
                        value,
                        calls: 0,
                        arg_sum: sum.map(|_| 0),
                        bytes: None,
                        sites: Vec::new(),
                    });
                    row.by_value.len() - 1
                }
            };
            let r = &mut row.by_value[i];
            add((&mut r.calls, &mut r.arg_sum), v.calls, sum);
            let made = stacks.stacks.get(&format!("{:016x}", k.ustack));
            if let Some(site) = made.and_then(|m| made_at(w.maps_of(k.tgid), m)) {
                match r.sites.iter_mut().find(|r| super::same_site(&r.site, site)) {
                    Some(r) => add((&mut r.calls, &mut r.arg_sum), v.calls, sum),
                    None => r.sites.push(UserSiteRow {
                        site: site.clone(),
                        calls: v.calls,
                        arg_sum: sum,
                    }),
                }
            }
        }
        for (k, ns) in &w.delta.user_ns {
            let Some(s) = sites.get(k.site as usize) else {
                continue;
            };
            if let Some(r) = rows.iter_mut().find(|r| r.probe == s.probe) {
                r.ns_inside = Some(r.ns_inside.unwrap_or(0) + ns);
            }
        }
        for r in &mut rows {
            r.sites.sort_by_key(|s| std::cmp::Reverse(s.calls));
            r.by_value
                .sort_by(|a, b| b.calls.cmp(&a.calls).then(a.value.cmp(&b.value)));
            let sizes = w.object_sizes.get(&r.probe);
            for v in &mut r.by_value {
                v.sites.sort_by_key(|s| std::cmp::Reverse(s.calls));
                v.bytes = sizes
                    .and_then(|s| s.get(&v.value))
                    .map(|size| size * v.calls);
            }
        }
        rows
    }
}

/// The alloc layers the user probes' calls are (a runtime's markers for
/// its heap's objects and collections: the JVM's `java` layer, CPython's
/// collections), added to `layers`: beside the heap's, never in its
/// totals; objects sized by the sizes their runtime gave per type (the
/// marker's own size argument is not theirs), the rest unsized.
pub(super) fn marker_layers(layers: &mut Vec<super::AllocLayer>, user: &[UserProbeRow]) {
    use crate::runtime::MarkerCounts;
    for p in user {
        let mut parts = p.probe.splitn(3, ':');
        let (Some("usdt"), Some(provider), Some(name)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let Some((layer, counts)) = crate::runtime::marker_layer((provider, name)) else {
            continue;
        };
        let i = match layers.iter().position(|l| l.allocator == layer) {
            Some(i) => i,
            None => {
                layers.push(super::AllocLayer {
                    allocator: layer.to_string(),
                    beside_the_heap: true,
                    ..Default::default()
                });
                layers.len() - 1
            }
        };
        let t = &mut layers[i].totals;
        match counts {
            MarkerCounts::Objects => {
                let sized = p.by_value.iter().filter_map(|v| Some((v.calls, v.bytes?)));
                let (calls, bytes) = sized.fold((0, 0), |(c, b), (vc, vb)| (c + vc, b + vb));
                t.allocations += p.calls;
                t.bytes += bytes;
                t.not_sized += p.calls.saturating_sub(calls);
            }
            MarkerCounts::Collections => t.gc_cycles += p.calls,
        }
    }
}

/// Where the calls of a stack were made: its innermost frame of JIT code
/// that its runtime does not call its own (`runtime::jit_own_code`: a
/// JVM's stubs), so a JVM's object is named at the Java method that made
/// it, past the JVM's allocation code; else the stack's user site.
fn made_at<'s>(maps: &ProcMaps, s: &'s StackFrames) -> Option<&'s Site> {
    s.frames
        .iter()
        .find(|f| {
            f.naming == Naming::Jit
                && f.function
                    .as_deref()
                    .is_some_and(|n| !crate::runtime::jit_own_code(maps, n))
        })
        .or_else(|| s.frames.get(s.user_site))
}

/// The site at attach cookie `site`, and the row of its probe.
fn probe_row<'r, 's>(
    rows: &'r mut [UserProbeRow],
    sites: &'s [UserSite],
    site: u32,
) -> Option<(&'s UserSite, &'r mut UserProbeRow)> {
    let s = sites.get(site as usize)?;
    Some((s, rows.iter_mut().find(|r| r.probe == s.probe)?))
}

/// Adds `calls` and `sum` to a row's calls and sum.
fn add(to: (&mut u64, &mut Option<i128>), calls: u64, sum: Option<i128>) {
    *to.0 += calls;
    *to.1 = to.1.zip(sum).map(|(a, b)| a + b);
}

/// Site `s`'s summed argument as its marker types it (a signed argument
/// sums signed), when it sums one.
fn arg_sum(s: &UserSite, sum: u64) -> Option<i128> {
    s.arg.map(|_| match s.arg_abi.is_signed {
        0 => i128::from(sum),
        _ => i128::from(sum as i64),
    })
}
