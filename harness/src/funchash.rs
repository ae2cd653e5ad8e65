//! Which functions changed between two builds of an executable.
//!
//! In: the path of an x86-64 ELF file (and, for a build, the shared
//! objects of its own that it maps). Out: one [`FunctionHash`] per
//! function symbol (`.symtab`, or `.dynsym` when stripped), and the
//! [`FunctionDiff`] of two such lists: added, removed, changed and renamed
//! functions. A function of a shared object is keyed by its module and its
//! name, `libcalibwork.so!calibwork_alloc`: the module's file name, which
//! is the same in two builds of one library wherever each was built.
//!
//! A function's hash is of its instructions, not its raw bytes: a build
//! that moves code (one function grew, so every later one sits elsewhere)
//! changes every rip-relative displacement and every call target without
//! changing what the unchanged functions do. Each instruction is hashed as
//! its opcode and operands, with rip-relative displacements masked and
//! branch targets outside the function masked (targets inside it are kept
//! as offsets from its start, so its own control flow still counts). A
//! function renamed but otherwise untouched hashes the same under its new
//! name, and is reported as renamed.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use iced_x86::{Decoder, DecoderOptions, Instruction, OpKind, Register};
use object::{Object, ObjectSection, ObjectSymbol, SymbolKind};
use serde::Serialize;
use sha2::{Digest, Sha256};

#[derive(Debug, thiserror::Error)]
pub enum FuncHashError {
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: not an ELF file rig can read: {why}")]
    Parse { path: PathBuf, why: String },
    #[error("{path}: {arch:?} code; function hashes are for x86-64")]
    Arch {
        path: PathBuf,
        arch: object::Architecture,
    },
    #[error("{path}: no function symbols (.symtab and .dynsym are empty)")]
    NoSymbols { path: PathBuf },
}

/// One function of an executable: its symbol, where it is, and the hash of
/// its normalized instructions (16 hex digits).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FunctionHash {
    /// The shared object's file name; `None` for the executable.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub module: Option<String>,
    pub name: String,
    pub addr: u64,
    pub size: u64,
    pub hash: String,
}

/// Every function symbol of `path` with a size and bytes in the file,
/// hashed. Two symbols with the same name (static functions of two files)
/// keep the first; aliases (two names, one address) are both listed.
pub fn hash_functions(path: &Path) -> Result<Vec<FunctionHash>, FuncHashError> {
    let data = std::fs::read(path).map_err(|source| FuncHashError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let file = object::File::parse(&*data).map_err(|e| FuncHashError::Parse {
        path: path.to_path_buf(),
        why: e.to_string(),
    })?;
    if file.architecture() != object::Architecture::X86_64 {
        return Err(FuncHashError::Arch {
            path: path.to_path_buf(),
            arch: file.architecture(),
        });
    }
    let mut syms: Vec<_> = file.symbols().collect();
    if !syms.iter().any(|s| s.kind() == SymbolKind::Text) {
        syms = file.dynamic_symbols().collect();
    }
    let mut out: Vec<FunctionHash> = Vec::new();
    let mut seen = BTreeSet::new();
    for s in syms {
        if s.kind() != SymbolKind::Text || s.size() == 0 || !s.is_definition() {
            continue;
        }
        let Ok(name) = s.name() else { continue };
        if name.is_empty() || !seen.insert(name.to_string()) {
            continue;
        }
        let Some(section) = s
            .section_index()
            .and_then(|i| file.section_by_index(i).ok())
        else {
            continue;
        };
        let Ok(Some(bytes)) = section.data_range(s.address(), s.size()) else {
            continue;
        };
        out.push(FunctionHash {
            module: None,
            name: name.to_string(),
            addr: s.address(),
            size: s.size(),
            hash: hash_code(bytes, s.address()),
        });
    }
    if out.is_empty() {
        return Err(FuncHashError::NoSymbols {
            path: path.to_path_buf(),
        });
    }
    out.sort_by_key(|f| f.addr);
    Ok(out)
}

impl FunctionHash {
    /// What a diff lists it as: its name, or `module!name` in a shared
    /// object.
    pub fn key(&self) -> String {
        match &self.module {
            Some(m) => format!("{m}!{}", self.name),
            None => self.name.clone(),
        }
    }
}

/// A key of a diff split into its module (a shared object's file name)
/// and its function: `libx.so!f` → `(Some("libx.so"), "f")`, `f` →
/// `(None, "f")`. Only a prefix naming a shared object (`.so`) is a
/// module, so a symbol that holds a `!` stays whole.
pub fn split_key(key: &str) -> (Option<&str>, &str) {
    match key.split_once('!') {
        Some((m, f)) if m.ends_with(".so") || m.contains(".so.") => (Some(m), f),
        _ => (None, key),
    }
}

/// The functions of a build: the executable's, then those of each shared
/// object in `modules` (the ones its own build produced), each keyed by
/// the object's file name.
pub fn hash_build(exe: &Path, modules: &[PathBuf]) -> Result<Vec<FunctionHash>, FuncHashError> {
    let mut out = hash_functions(exe)?;
    for m in modules {
        let name = m
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| m.display().to_string());
        out.extend(hash_functions(m)?.into_iter().map(|mut f| {
            f.module = Some(name.clone());
            f
        }));
    }
    Ok(out)
}

/// The hash of the code `bytes` that starts at `addr`: each instruction's
/// opcode and operands, displacements and targets that depend on where
/// other code or data was placed masked.
pub fn hash_code(bytes: &[u8], addr: u64) -> String {
    let end = addr + bytes.len() as u64;
    let mut h = Sha256::new();
    let mut decoder = Decoder::with_ip(64, bytes, addr, DecoderOptions::NONE);
    let mut ins = Instruction::default();
    while decoder.can_decode() {
        decoder.decode_out(&mut ins);
        h.update((ins.code() as u32).to_le_bytes());
        for i in 0..ins.op_count() {
            feed_operand(&mut h, &ins, i, addr, end);
        }
        h.update([0xff]);
    }
    let d = h.finalize();
    d[..8].iter().map(|b| format!("{b:02x}")).collect()
}

fn feed_operand(h: &mut Sha256, ins: &Instruction, i: u32, start: u64, end: u64) {
    let kind = ins.op_kind(i);
    h.update([kind as u8]);
    match kind {
        OpKind::Register => h.update((ins.op_register(i) as u32).to_le_bytes()),
        OpKind::NearBranch16 | OpKind::NearBranch32 | OpKind::NearBranch64 => {
            let t = ins.near_branch_target();
            // Inside the function: where it lands in it. Outside: only
            // that it leaves (the callee's own hash says what it is).
            let rel = if (start..end).contains(&t) {
                t - start
            } else {
                u64::MAX
            };
            h.update(rel.to_le_bytes());
        }
        OpKind::FarBranch16 | OpKind::FarBranch32 => {}
        OpKind::Memory => {
            h.update((ins.memory_base() as u32).to_le_bytes());
            h.update((ins.memory_index() as u32).to_le_bytes());
            h.update(ins.memory_index_scale().to_le_bytes());
            h.update((ins.memory_segment() as u32).to_le_bytes());
            let disp = if ins.is_ip_rel_memory_operand() || ins.memory_base() == Register::None {
                // rip-relative, or an absolute address (non-PIE code):
                // where the data was placed, not what the code does.
                0
            } else {
                ins.memory_displacement64()
            };
            h.update(disp.to_le_bytes());
        }
        _ => h.update(ins.immediate(i).to_le_bytes()),
    }
}

/// Two builds' functions compared by name and by hash.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct FunctionDiff {
    /// In the second build only.
    pub added: Vec<String>,
    /// In the first build only.
    pub removed: Vec<String>,
    /// Same name, different code.
    pub changed: Vec<String>,
    /// `(old, new)`: a name in each build only, with the same code (a hash
    /// found once among the removed and once among the added functions).
    pub renamed: Vec<(String, String)>,
    /// Same name, same code.
    pub identical: usize,
}

impl FunctionDiff {
    pub fn is_empty(&self) -> bool {
        self.added.is_empty()
            && self.removed.is_empty()
            && self.changed.is_empty()
            && self.renamed.is_empty()
    }

    /// What the diff says about function `name` of the second build: a
    /// key, or a function's name alone (a per-site counter names its
    /// function without its module), which matches it in any module.
    pub fn state_of(&self, name: &str) -> FunctionState {
        let is = |key: &String| key == name || split_key(key).1 == name;
        if self.changed.iter().any(is) {
            FunctionState::Changed
        } else if self.added.iter().any(is) {
            FunctionState::Added
        } else if let Some((old, _)) = self.renamed.iter().find(|(_, new)| is(new)) {
            FunctionState::Renamed(split_key(old).1.to_string())
        } else {
            FunctionState::Identical
        }
    }
}

/// A function of the second build against the first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FunctionState {
    Changed,
    Added,
    /// From this name in the first build, code unchanged.
    Renamed(String),
    Identical,
}

pub fn diff(a: &[FunctionHash], b: &[FunctionHash]) -> FunctionDiff {
    let by_name = |v: &[FunctionHash]| -> BTreeMap<String, String> {
        v.iter().map(|f| (f.key(), f.hash.clone())).collect()
    };
    let (ma, mb) = (by_name(a), by_name(b));
    let mut d = FunctionDiff::default();
    for (name, ha) in &ma {
        match mb.get(name) {
            Some(hb) if hb == ha => d.identical += 1,
            Some(_) => d.changed.push(name.clone()),
            None => d.removed.push(name.clone()),
        }
    }
    d.added = mb
        .keys()
        .filter(|n| !ma.contains_key(*n))
        .cloned()
        .collect();
    // A hash that appears once among the removed and once among the added
    // of one module is one function under a new name; a hash shared by
    // several (tiny stubs that are all `ret`) says nothing about which
    // became which.
    type Once = BTreeMap<(Option<String>, String), String>;
    let once = |names: &[String], m: &BTreeMap<String, String>| -> Once {
        let mut count: BTreeMap<(Option<String>, String), (usize, &str)> = BTreeMap::new();
        for n in names {
            let module = split_key(n).0.map(str::to_string);
            let e = count.entry((module, m[n].clone())).or_insert((0, n));
            e.0 += 1;
        }
        count
            .into_iter()
            .filter(|(_, (c, _))| *c == 1)
            .map(|(k, (_, n))| (k, n.to_string()))
            .collect()
    };
    let gone = once(&d.removed, &ma);
    let new = once(&d.added, &mb);
    for (key, old) in &gone {
        if let Some(n) = new.get(key) {
            d.renamed.push((old.clone(), n.clone()));
        }
    }
    d.removed.retain(|n| !d.renamed.iter().any(|(o, _)| o == n));
    d.added.retain(|n| !d.renamed.iter().any(|(_, x)| x == n));
    d.renamed.sort();
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(name: &str, hash: &str) -> FunctionHash {
        FunctionHash {
            module: None,
            name: name.into(),
            addr: 0,
            size: 1,
            hash: hash.into(),
        }
    }

    #[test]
    fn a_moved_call_hashes_the_same_and_a_new_operand_does_not() {
        // call rel32 to two different places outside the function; then
        // mov eax, 1 against mov eax, 2.
        let call_a = [0xe8, 0x10, 0x00, 0x00, 0x00, 0xc3];
        let call_b = [0xe8, 0x40, 0x02, 0x00, 0x00, 0xc3];
        assert_eq!(hash_code(&call_a, 0x1000), hash_code(&call_b, 0x2000));
        let mov1 = [0xb8, 0x01, 0x00, 0x00, 0x00, 0xc3];
        let mov2 = [0xb8, 0x02, 0x00, 0x00, 0x00, 0xc3];
        assert_ne!(hash_code(&mov1, 0x1000), hash_code(&mov2, 0x1000));
        // lea rax, [rip+X]: the displacement is masked.
        let lea_a = [0x48, 0x8d, 0x05, 0x00, 0x10, 0x00, 0x00, 0xc3];
        let lea_b = [0x48, 0x8d, 0x05, 0x00, 0x20, 0x00, 0x00, 0xc3];
        assert_eq!(hash_code(&lea_a, 0x1000), hash_code(&lea_b, 0x3000));
    }

    #[test]
    fn a_jump_inside_the_function_keeps_its_target() {
        // jmp +0 (to the next instruction) and jmp -2 (to itself): both
        // stay inside the function, so they differ.
        let next = [0xeb, 0x00, 0xc3];
        let back = [0xeb, 0xfe, 0xc3];
        assert_ne!(hash_code(&next, 0x1000), hash_code(&back, 0x1000));
    }

    #[test]
    fn a_renamed_function_is_reported_as_renamed_not_added_and_removed() {
        let a = [
            f("keep", "1"),
            f("old", "2"),
            f("edit", "3"),
            f("gone", "4"),
        ];
        let b = [
            f("keep", "1"),
            f("new", "2"),
            f("edit", "9"),
            f("fresh", "5"),
        ];
        let d = diff(&a, &b);
        assert_eq!(d.renamed, vec![("old".to_string(), "new".to_string())]);
        assert_eq!(d.changed, vec!["edit"]);
        assert_eq!(d.added, vec!["fresh"]);
        assert_eq!(d.removed, vec!["gone"]);
        assert_eq!(d.identical, 1);
        assert_eq!(d.state_of("new"), FunctionState::Renamed("old".into()));
        assert_eq!(d.state_of("keep"), FunctionState::Identical);
    }

    #[test]
    fn the_calibration_server_hashes_itself_identically() {
        let path = rig_fixtures::calib_server();
        let a = hash_functions(path).unwrap();
        assert!(a.iter().any(|f| f.name == "calib_alloc_small"), "{a:?}");
        let d = diff(&a, &hash_functions(path).unwrap());
        assert!(d.is_empty(), "{d:?}");
        assert_eq!(d.identical, a.len());
    }

    #[test]
    fn a_shared_object_of_the_build_is_hashed_and_keyed_by_its_module() {
        // Variant b of libcalibwork.so compiles out one allocation of
        // calibwork_alloc (fixtures/calib/COSTS.md, "A/B fixtures"); d
        // differs from a only by a string no function reads.
        let exe = rig_fixtures::calib_dyn();
        let build = |v: char| hash_build(exe, &[rig_fixtures::calibwork_so(v)]).unwrap();
        let (a, b, d) = (build('a'), build('b'), build('d'));
        assert!(
            a.iter()
                .any(|f| f.key() == "libcalibwork.so!calibwork_alloc"),
            "{a:?}"
        );
        assert!(
            a.iter().any(|f| f.module.is_none() && f.name == "main"),
            "{a:?}"
        );
        let ab = diff(&a, &b);
        assert_eq!(
            ab.changed,
            vec!["libcalibwork.so!calibwork_alloc"],
            "{ab:?}"
        );
        assert!(ab.added.is_empty() && ab.removed.is_empty() && ab.renamed.is_empty());
        assert_eq!(ab.state_of("calibwork_alloc"), FunctionState::Changed);
        assert_eq!(ab.state_of("calibwork_copy"), FunctionState::Identical);
        let ad = diff(&a, &d);
        assert!(ad.is_empty(), "{ad:?}");
        assert_eq!(ad.identical, a.len());
        // Without the module, the executable alone: nothing changed.
        let exe_only = diff(&hash_functions(exe).unwrap(), &hash_functions(exe).unwrap());
        assert!(exe_only.is_empty());
    }

    #[test]
    fn a_key_names_its_module_only_when_that_is_a_shared_object() {
        assert_eq!(split_key("libx.so!f"), (Some("libx.so"), "f"));
        assert_eq!(
            split_key("libssl.so.3!SSL_read"),
            (Some("libssl.so.3"), "SSL_read")
        );
        assert_eq!(split_key("f"), (None, "f"));
        assert_eq!(split_key("operator!"), (None, "operator!"));
    }
}
