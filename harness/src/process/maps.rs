//! `/proc/<pid>/maps` snapshot: what is mapped where.
//!
//! A `ProcMaps` is a plain snapshot; it keeps working after the process has
//! exited (paths are then opened directly instead of via `/proc/<pid>/root`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use object::{Object, ObjectSection};
use serde::Serialize;

/// Errors reading or parsing a maps file.
#[derive(Debug, thiserror::Error)]
pub enum MapsError {
    #[error("cannot read {path} (pid {pid}): {source}")]
    Read {
        pid: u32,
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("pid {pid}: malformed line {line_no} in /proc/{pid}/maps: {line:?} ({why})")]
    Parse {
        pid: u32,
        line_no: usize,
        line: String,
        why: &'static str,
    },
}

/// One line of `/proc/<pid>/maps`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    /// e.g. `r-xp`
    pub perms: String,
    pub offset: u64,
    /// `maj:min`
    pub dev: String,
    pub inode: u64,
    /// Pathname as printed by the kernel, including pseudo names (`[heap]`,
    /// `[vdso]`, `[stack]`, `[anon:...]`) and a possible ` (deleted)` suffix.
    /// `None` for anonymous mappings.
    pub path: Option<String>,
}

impl Mapping {
    pub fn contains(&self, addr: u64) -> bool {
        self.start <= addr && addr < self.end
    }
    pub fn is_exec(&self) -> bool {
        self.perms.as_bytes().get(2) == Some(&b'x')
    }
    /// Backed by a real file (not anonymous, not a `[pseudo]` mapping).
    pub fn is_file_backed(&self) -> bool {
        match &self.path {
            Some(p) => !p.starts_with('[') && (self.inode != 0 || p.starts_with('/')),
            None => false,
        }
    }
    /// The file was deleted (or replaced) after it was mapped.
    pub fn is_deleted(&self) -> bool {
        self.path
            .as_deref()
            .is_some_and(|p| p.ends_with(" (deleted)"))
    }
}

/// One distinct file mapped in the process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MappedObject {
    /// Path as in the maps file.
    pub path: String,
    /// Lowest start address of any mapping of this file (load base candidate).
    pub start: u64,
    /// `start - offset` of the mapping with the lowest file offset
    /// (for shared objects whose first PT_LOAD has vaddr 0 this is the load
    /// base; see `elf::load_base` for the exact computation).
    pub base: u64,
    pub executable: bool,
}

/// Snapshot of `/proc/<pid>/maps`.
#[derive(Debug, Clone, Serialize)]
pub struct ProcMaps {
    pub pid: u32,
    pub mappings: Vec<Mapping>,
}

fn parse_line(line: &str) -> Result<Mapping, &'static str> {
    // Fields are separated by single spaces except for padding before the
    // pathname; the pathname itself may contain spaces.
    fn next_field<'a>(s: &mut &'a str) -> Option<&'a str> {
        let t = s.trim_start_matches(' ');
        if t.is_empty() {
            return None;
        }
        let end = t.find(' ').unwrap_or(t.len());
        let (f, rest) = t.split_at(end);
        *s = rest;
        Some(f)
    }
    let mut rest = line;
    let range = next_field(&mut rest).ok_or("missing range")?;
    let perms = next_field(&mut rest).ok_or("missing perms")?;
    let offset = next_field(&mut rest).ok_or("missing offset")?;
    let dev = next_field(&mut rest).ok_or("missing dev")?;
    let inode = next_field(&mut rest).ok_or("missing inode")?;
    let (s, e) = range.split_once('-').ok_or("bad range")?;
    let start = u64::from_str_radix(s, 16).map_err(|_| "bad start")?;
    let end = u64::from_str_radix(e, 16).map_err(|_| "bad end")?;
    let offset = u64::from_str_radix(offset, 16).map_err(|_| "bad offset")?;
    let inode = inode.parse::<u64>().map_err(|_| "bad inode")?;
    if perms.len() != 4 {
        return Err("bad perms");
    }
    let path = rest.trim_start_matches(' ');
    let path = if path.is_empty() {
        None
    } else {
        Some(path.to_string())
    };
    Ok(Mapping {
        start,
        end,
        perms: perms.to_string(),
        offset,
        dev: dev.to_string(),
        inode,
        path,
    })
}

impl ProcMaps {
    /// Read `/proc/<pid>/maps`.
    pub fn read(pid: u32) -> Result<ProcMaps, MapsError> {
        let path = format!("/proc/{pid}/maps");
        let text = std::fs::read_to_string(&path).map_err(|source| MapsError::Read {
            pid,
            path: path.clone(),
            source,
        })?;
        Self::parse(pid, &text)
    }

    /// Parse the text of a maps file.
    pub fn parse(pid: u32, text: &str) -> Result<ProcMaps, MapsError> {
        let mut mappings = Vec::new();
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let m = parse_line(line).map_err(|why| MapsError::Parse {
                pid,
                line_no: i + 1,
                line: line.to_string(),
                why,
            })?;
            mappings.push(m);
        }
        mappings.sort_by_key(|m| m.start);
        Ok(ProcMaps { pid, mappings })
    }

    /// The mapping containing `addr`.
    pub fn find(&self, addr: u64) -> Option<&Mapping> {
        let idx = self.mappings.partition_point(|m| m.start <= addr);
        let m = self.mappings.get(idx.checked_sub(1)?)?;
        m.contains(addr).then_some(m)
    }

    /// File offset of `addr` (`addr - start + offset`), only for
    /// file-backed mappings.
    pub fn file_offset(&self, addr: u64) -> Option<(&Mapping, u64)> {
        let m = self.find(addr)?;
        if !m.is_file_backed() {
            return None;
        }
        Some((m, addr - m.start + m.offset))
    }

    /// One entry per distinct file-backed path, in address order.
    pub fn objects(&self) -> Vec<MappedObject> {
        let mut order: Vec<String> = Vec::new();
        let mut by_path: HashMap<String, MappedObject> = HashMap::new();
        let mut lowest_off: HashMap<String, u64> = HashMap::new();
        for m in &self.mappings {
            if !m.is_file_backed() {
                continue;
            }
            let path = m.path.clone().unwrap();
            let base = m.start.wrapping_sub(m.offset);
            match by_path.get_mut(&path) {
                Some(o) => {
                    o.start = o.start.min(m.start);
                    o.executable |= m.is_exec();
                    let lo = lowest_off.get_mut(&path).unwrap();
                    if m.offset < *lo {
                        *lo = m.offset;
                        o.base = base;
                    }
                }
                None => {
                    order.push(path.clone());
                    lowest_off.insert(path.clone(), m.offset);
                    by_path.insert(
                        path.clone(),
                        MappedObject {
                            path,
                            start: m.start,
                            base,
                            executable: m.is_exec(),
                        },
                    );
                }
            }
        }
        order
            .into_iter()
            .map(|p| by_path.remove(&p).unwrap())
            .collect()
    }

    /// The path (as in maps) of the first mapped file whose path satisfies
    /// `pred`, e.g. `|p| basename(p).starts_with("libc.so")`.
    pub fn find_object(&self, pred: impl Fn(&str) -> bool) -> Option<String> {
        self.objects().into_iter().map(|o| o.path).find(|p| pred(p))
    }

    /// The executable of process `pid` (these maps' process), by its path
    /// as in maps.
    pub fn exe(&self, pid: u32) -> Option<String> {
        let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok()?;
        let exe = exe.to_string_lossy().into_owned();
        self.objects()
            .into_iter()
            .map(|o| o.path)
            .find(|p| *p == exe)
    }

    /// All mappings of `path` (as in maps), in address order.
    pub fn mappings_of<'a>(&'a self, path: &'a str) -> impl Iterator<Item = &'a Mapping> + 'a {
        self.mappings
            .iter()
            .filter(move |m| m.path.as_deref() == Some(path))
    }

    /// `/proc/<pid>/root/<path>`: opens the file as the target sees it, across
    /// mount namespaces (only valid while the process lives).
    pub fn open_path(&self, path: &str) -> PathBuf {
        let rel = path.trim_start_matches('/');
        PathBuf::from(format!("/proc/{}/root", self.pid)).join(rel)
    }

    /// Whether `/proc/<pid>` still exists.
    pub fn pid_alive(&self) -> bool {
        Path::new(&format!("/proc/{}/root", self.pid)).exists()
    }

    /// The file `m` maps, as mapped: `/proc/<pid>/map_files/<range>` while
    /// the process lives (the mapped object itself, also when the file was
    /// deleted or replaced on disk since, and across mount namespaces),
    /// [`ProcMaps::readable_path`] otherwise.
    pub fn mapped_file(&self, m: &Mapping) -> PathBuf {
        let mf = PathBuf::from(format!(
            "/proc/{}/map_files/{:x}-{:x}",
            self.pid, m.start, m.end
        ));
        if m.is_file_backed() && std::fs::metadata(&mf).is_ok() {
            return mf;
        }
        self.readable_path(m.path.as_deref().unwrap_or(""))
    }

    /// Best path to open the file mapped as `path` right now: through
    /// `/proc/<pid>/root` while the process lives, the plain path otherwise;
    /// for ` (deleted)` files, `/proc/<pid>/map_files/<range>` while alive.
    pub fn readable_path(&self, path: &str) -> PathBuf {
        if self.pid_alive() {
            if let Some(stripped) = path.strip_suffix(" (deleted)") {
                if let Some(m) = self.mappings_of(path).next() {
                    let mf = PathBuf::from(format!(
                        "/proc/{}/map_files/{:x}-{:x}",
                        self.pid, m.start, m.end
                    ));
                    if mf.exists() {
                        return mf;
                    }
                }
                return self.open_path(stripped);
            }
            let p = self.open_path(path);
            if p.exists() {
                return p;
            }
        }
        PathBuf::from(path.strip_suffix(" (deleted)").unwrap_or(path))
    }
}

/// Last path component.
pub fn basename(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// Hex of the GNU build-id note of an ELF file.
pub fn build_id(path: &Path) -> Option<String> {
    let data = std::fs::read(path).ok()?;
    build_id_of_data(&data)
}

pub(crate) fn build_id_of_data(data: &[u8]) -> Option<String> {
    let file = object::File::parse(data).ok()?;
    if let Ok(Some(id)) = file.build_id() {
        return Some(hex(id));
    }
    // Fallback: a `.note.gnu.build-id` section parsed by hand.
    let sec = file.section_by_name(".note.gnu.build-id")?;
    let d = sec.data().ok()?;
    if d.len() < 16 {
        return None;
    }
    let namesz = u32::from_le_bytes(d[0..4].try_into().ok()?) as usize;
    let descsz = u32::from_le_bytes(d[4..8].try_into().ok()?) as usize;
    let desc_off = 12 + ((namesz + 3) & !3);
    Some(hex(d.get(desc_off..desc_off + descsz)?))
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "\
55d0c0a00000-55d0c0a02000 r--p 00000000 fe:00 1234                       /usr/bin/my server
55d0c0a02000-55d0c0a06000 r-xp 00002000 fe:00 1234                       /usr/bin/my server
55d0c1000000-55d0c1021000 rw-p 00000000 00:00 0                          [heap]
7f0000000000-7f0000021000 rw-p 00000000 00:00 0 
7f1000000000-7f1000026000 r--p 00000000 fe:00 326279                     /usr/lib/x86_64-linux-gnu/libc.so.6
7f1000026000-7f100017c000 r-xp 00026000 fe:00 326279                     /usr/lib/x86_64-linux-gnu/libc.so.6
7f2000000000-7f2000001000 r-xp 00001000 fe:00 999                        /tmp/plugin.so (deleted)
7ffc00000000-7ffc00021000 rw-p 00000000 00:00 0                          [stack]
7ffc00100000-7ffc00102000 r-xp 00000000 00:00 0                          [vdso]
ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  [vsyscall]
";

    #[test]
    fn parse_handwritten_maps() {
        let m = ProcMaps::parse(42, TEXT).unwrap();
        assert_eq!(m.mappings.len(), 10);
        let exe = &m.mappings[1];
        assert_eq!(exe.path.as_deref(), Some("/usr/bin/my server"));
        assert_eq!(exe.perms, "r-xp");
        assert_eq!(exe.offset, 0x2000);
        assert_eq!(exe.dev, "fe:00");
        assert_eq!(exe.inode, 1234);
        assert!(exe.is_exec());
        assert_eq!(m.mappings[2].path.as_deref(), Some("[heap]"));
        assert_eq!(m.mappings[3].path, None);
        assert!(m.mappings[6].is_deleted());
        assert_eq!(
            m.mappings[6].path.as_deref(),
            Some("/tmp/plugin.so (deleted)")
        );
        assert_eq!(m.mappings[9].path.as_deref(), Some("[vsyscall]"));
        assert_eq!(m.mappings[9].end, 0xffffffffff601000);

        // find / file_offset
        assert_eq!(m.find(0x55d0c0a02010).unwrap().offset, 0x2000);
        assert!(m.find(0x55d0c0a06000).is_none());
        assert!(m.find(0x10).is_none());
        let (mm, off) = m.file_offset(0x7f1000026010).unwrap();
        assert_eq!(
            mm.path.as_deref(),
            Some("/usr/lib/x86_64-linux-gnu/libc.so.6")
        );
        assert_eq!(off, 0x26010);
        assert!(
            m.file_offset(0x55d0c1000010).is_none(),
            "[heap] is not file-backed"
        );
        assert!(
            m.file_offset(0x7f0000000010).is_none(),
            "anon is not file-backed"
        );
        assert!(
            m.file_offset(0x7ffc00100010).is_none(),
            "[vdso] is not file-backed"
        );

        // objects
        let objs = m.objects();
        let paths: Vec<_> = objs.iter().map(|o| o.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "/usr/bin/my server",
                "/usr/lib/x86_64-linux-gnu/libc.so.6",
                "/tmp/plugin.so (deleted)"
            ]
        );
        assert_eq!(objs[1].start, 0x7f1000000000);
        assert_eq!(objs[1].base, 0x7f1000000000);
        assert!(objs[1].executable);
        assert_eq!(objs[2].base, 0x7f2000000000 - 0x1000);
        assert_eq!(
            m.find_object(|p| basename(p).starts_with("libc.so"))
                .as_deref(),
            Some("/usr/lib/x86_64-linux-gnu/libc.so.6")
        );
        assert_eq!(m.find_object(|p| p.contains("nope")), None);
        assert_eq!(
            m.open_path("/usr/lib/x86_64-linux-gnu/libc.so.6"),
            PathBuf::from("/proc/42/root/usr/lib/x86_64-linux-gnu/libc.so.6")
        );
    }

    #[test]
    fn parse_errors_carry_pid() {
        let err = ProcMaps::parse(7, "zzzz r-xp 0 0 0\n").unwrap_err();
        assert!(err.to_string().contains("pid 7"), "{err}");
        let err = ProcMaps::read(u32::MAX - 1).unwrap_err();
        assert!(
            err.to_string().contains(&format!("{}", u32::MAX - 1)),
            "{err}"
        );
    }

    #[test]
    fn read_self_and_build_id() {
        let pid = std::process::id();
        let m = ProcMaps::read(pid).unwrap();
        let libc = m
            .find_object(|p| basename(p).starts_with("libc.so"))
            .expect("test binary links libc");
        let id = build_id(&m.open_path(&libc)).expect("libc has a build-id");
        assert_eq!(id.len(), 40);
        // Independent check with readelf -n.
        let out = std::process::Command::new("readelf")
            .args(["-n", &libc])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains(&format!("Build ID: {id}")), "{text}");
    }
}
