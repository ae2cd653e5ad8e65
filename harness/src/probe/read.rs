//! Reading the BPF maps into plain `Snapshot` data (per-CPU values summed).

use std::collections::BTreeMap;

use aya::maps::{HashMap, MapData, PerCpuArray, PerCpuHashMap};
use aya::{Ebpf, Pod};
use rig_ebpf::abi::Stats;

use super::{Counter, Family, ProbeError};

/// The error of map `map` of `family`'s object, for `map_err`.
pub(crate) fn map_err(
    family: Family,
    map: &'static str,
) -> impl Fn(aya::maps::MapError) -> ProbeError {
    move |source| ProbeError::Map {
        family,
        map,
        source,
    }
}

/// Map `name` of `family`'s object; `Missing` if the object has none.
pub(crate) fn map<'a>(
    ebpf: &'a Ebpf,
    family: Family,
    name: &'static str,
) -> Result<&'a aya::maps::Map, ProbeError> {
    ebpf.map(name).ok_or_else(|| missing_map(family, name))
}

/// Map `name` of `family`'s object, to write; `Missing` if it has none.
pub(crate) fn map_mut<'a>(
    ebpf: &'a mut Ebpf,
    family: Family,
    name: &'static str,
) -> Result<&'a mut aya::maps::Map, ProbeError> {
    ebpf.map_mut(name).ok_or_else(|| missing_map(family, name))
}

fn missing_map(family: Family, name: &str) -> ProbeError {
    ProbeError::Missing {
        family,
        what: "map",
        name: name.to_string(),
    }
}

/// A per-CPU hash map, values summed over CPUs.
pub(super) fn percpu_hash<K: Pod + Ord, V: Pod + Counter>(
    ebpf: &Ebpf,
    family: Family,
    name: &'static str,
) -> Result<BTreeMap<K, V>, ProbeError> {
    let m: PerCpuHashMap<&MapData, K, V> =
        PerCpuHashMap::try_from(map(ebpf, family, name)?).map_err(map_err(family, name))?;
    let mut out = BTreeMap::new();
    for entry in m.iter() {
        let (k, per_cpu) = entry.map_err(map_err(family, name))?;
        let mut sum = V::default();
        for v in per_cpu.iter() {
            sum.plus(v);
        }
        out.insert(k, sum);
    }
    Ok(out)
}

/// A plain hash map.
pub(super) fn hash<K: Pod + Ord, V: Pod>(
    ebpf: &Ebpf,
    family: Family,
    name: &'static str,
) -> Result<BTreeMap<K, V>, ProbeError> {
    let m: HashMap<&MapData, K, V> =
        HashMap::try_from(map(ebpf, family, name)?).map_err(map_err(family, name))?;
    let mut out = BTreeMap::new();
    for entry in m.iter() {
        let (k, v) = entry.map_err(map_err(family, name))?;
        out.insert(k, v);
    }
    Ok(out)
}

/// A per-CPU array, as index -> summed value for the nonzero entries.
pub(super) fn percpu_array<V: Pod + Counter>(
    ebpf: &Ebpf,
    family: Family,
    name: &'static str,
) -> Result<BTreeMap<u32, V>, ProbeError> {
    let m: PerCpuArray<&MapData, V> =
        PerCpuArray::try_from(map(ebpf, family, name)?).map_err(map_err(family, name))?;
    let mut out = BTreeMap::new();
    for (i, per_cpu) in m.iter().enumerate() {
        let per_cpu = per_cpu.map_err(map_err(family, name))?;
        let mut sum = V::default();
        for v in per_cpu.iter() {
            sum.plus(v);
        }
        if !sum.is_zero() {
            out.insert(i as u32, sum);
        }
    }
    Ok(out)
}

/// The family's self-stats.
pub(super) fn stats(ebpf: &Ebpf, family: Family) -> Result<Stats, ProbeError> {
    Ok(percpu_array::<Stats>(ebpf, family, "stats")?
        .remove(&0)
        .unwrap_or_default())
}
