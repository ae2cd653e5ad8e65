//! What a launched target is: the CPUs it may run on, and every file it
//! maps with size, SHA-256 and build-id (what actually ran).

use std::path::PathBuf;

use serde::Serialize;
use sha2::{Digest, Sha256};

use super::maps::ProcMaps;
use super::start::LaunchError;

/// One file mapped by the target (or its executable), for the manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ObjectFact {
    /// As printed in `/proc/<pid>/maps` (or the `/proc/<pid>/exe` link).
    pub path: String,
    pub size: u64,
    pub sha256: String,
    pub build_id: Option<String>,
    /// The file on disk was deleted or replaced after it was mapped; the
    /// hash is of what is mapped (read through `/proc/<pid>/map_files`).
    pub deleted: bool,
}

/// Parse a CPU list (`0-3,5`), as in Cpus_allowed_list or sysfs `online`.
pub fn parse_cpu_list(s: &str) -> Option<Vec<usize>> {
    let mut out = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (a.parse().ok()?, b.parse().ok()?);
                out.extend(a..=b);
            }
            None => out.push(part.parse().ok()?),
        }
    }
    Some(out)
}

/// CPUs a process may run on, from `Cpus_allowed_list` in `/proc/<pid>/status`.
pub fn affinity_of(pid: u32) -> std::io::Result<Vec<usize>> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .and_then(parse_cpu_list)
        .ok_or_else(|| std::io::Error::other("no Cpus_allowed_list"))
}

pub(super) fn online_cpus() -> (String, Vec<usize>) {
    let s = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap_or_default();
    let list = parse_cpu_list(&s).unwrap_or_default();
    (s.trim().to_string(), list)
}

/// SHA-256 (hex) and size of everything read from `r`, plus the bytes when
/// `keep` (for the build-id).
pub fn hash_file(path: &std::path::Path) -> std::io::Result<(u64, String, Vec<u8>)> {
    let data = std::fs::read(path)?;
    let digest = Sha256::digest(&data);
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    Ok((data.len() as u64, hex, data))
}

/// Size, SHA-256 and build-id of every distinct file `pid` maps, read
/// through `/proc/<pid>/map_files` (what is mapped, even if the file on disk
/// was since replaced), and of its executable.
// A launch error is built once per failed launch and carries what the user
// needs to fix it; its size does not matter.
#[allow(clippy::result_large_err)]
pub fn mapped_objects(pid: u32) -> Result<(ObjectFact, Vec<ObjectFact>), LaunchError> {
    let maps = ProcMaps::read(pid)?;
    let mut objects: Vec<ObjectFact> = Vec::new();
    for m in maps.mappings.iter().filter(|m| m.is_file_backed()) {
        let path = m.path.clone().unwrap_or_default();
        if objects.iter().any(|o| o.path == path) {
            continue;
        }
        let via = PathBuf::from(format!("/proc/{pid}/map_files/{:x}-{:x}", m.start, m.end));
        let via = if via.exists() {
            via
        } else {
            maps.readable_path(&path)
        };
        let (size, sha256, data) = hash_file(&via).map_err(|source| LaunchError::Hash {
            pid,
            path: path.clone(),
            source,
        })?;
        objects.push(ObjectFact {
            deleted: m.is_deleted(),
            build_id: super::maps::build_id_of_data(&data),
            path,
            size,
            sha256,
        });
    }
    let exe_link = format!("/proc/{pid}/exe");
    let exe_path = std::fs::read_link(&exe_link)
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "?".into());
    let (size, sha256, data) =
        hash_file(std::path::Path::new(&exe_link)).map_err(|source| LaunchError::Hash {
            pid,
            path: exe_path.clone(),
            source,
        })?;
    let exe = ObjectFact {
        deleted: exe_path.ends_with(" (deleted)"),
        build_id: super::maps::build_id_of_data(&data),
        path: exe_path,
        size,
        sha256,
    };
    Ok((exe, objects))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0-1\n"), Some(vec![0, 1]));
        assert_eq!(parse_cpu_list("0,2-4,7"), Some(vec![0, 2, 3, 4, 7]));
        assert_eq!(parse_cpu_list(""), Some(vec![]));
        assert_eq!(parse_cpu_list("x"), None);
    }
}
