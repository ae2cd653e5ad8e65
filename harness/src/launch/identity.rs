//! Proof that each arm is the arm: a swapped library that the loader never
//! picked up makes two arms the same code, and their difference noise.
//!
//! An arm differs from its sibling by its binary, a directory first on
//! `LD_LIBRARY_PATH` (the `.so` swap) or an `LD_PRELOAD`. After launch, the
//! objects the process really mapped (hashed through `/proc/<pid>/map_files`)
//! must be those files, byte for byte: a library found elsewhere (a binary's
//! DT_RPATH beats LD_LIBRARY_PATH; a system copy of the same soname) means
//! the run measured the wrong code, and it is refused with what was mapped
//! instead.

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::launch::spec::TargetSpec;
use crate::launch::start::{hash_file, Launched, ObjectFact};
use crate::process::maps::basename;

/// A file the arm's process must map, and why.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Expected {
    pub path: PathBuf,
    pub sha256: String,
    /// `binary`, `LD_LIBRARY_PATH` or `LD_PRELOAD`.
    pub via: &'static str,
    /// For LD_LIBRARY_PATH files: the process need only map the ones it
    /// uses, but must map at least one of the directory's.
    pub optional: bool,
}

/// What a verified launch mapped, per expectation.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct ArmProof {
    pub verified: Vec<ObjectFact>,
    /// Every process checked: the launched pid, then its descendants.
    pub processes: Vec<u32>,
}

/// The files that make this arm this arm: its binary, every shared object in
/// the LD_LIBRARY_PATH directories its env sets, its LD_PRELOADs.
pub fn expected_objects(spec: &TargetSpec) -> Result<Vec<Expected>, String> {
    // Port 0: only the program path and env matter here.
    let cmd = spec.inspect_command().map_err(|e| format!("{e}"))?;
    let mut out = Vec::new();
    let program = if cmd.program.components().count() > 1 {
        cmd.program.clone()
    } else {
        which(&cmd.program).ok_or_else(|| format!("{} is not on PATH", cmd.program.display()))?
    };
    let (_, sha, _) = hash_file(&program).map_err(|e| format!("{}: {e}", program.display()))?;
    out.push(Expected {
        path: program,
        sha256: sha,
        via: "binary",
        optional: false,
    });
    if let Some(dirs) = cmd.env.get("LD_LIBRARY_PATH") {
        for dir in dirs.split(':').filter(|d| !d.is_empty()) {
            let dir = if Path::new(dir).is_absolute() {
                PathBuf::from(dir)
            } else {
                cmd.cwd.join(dir)
            };
            let rd = std::fs::read_dir(&dir)
                .map_err(|e| format!("LD_LIBRARY_PATH {}: {e}", dir.display()))?;
            for e in rd.flatten() {
                let p = e.path();
                let name = e.file_name().to_string_lossy().into_owned();
                if p.is_file() && name.contains(".so") {
                    let (_, sha, _) = hash_file(&p).map_err(|e| format!("{}: {e}", p.display()))?;
                    out.push(Expected {
                        path: p,
                        sha256: sha,
                        via: "LD_LIBRARY_PATH",
                        optional: true,
                    });
                }
            }
        }
    }
    if let Some(pre) = cmd.env.get("LD_PRELOAD") {
        for p in pre.split([':', ' ']).filter(|p| !p.is_empty()) {
            let p = PathBuf::from(p);
            let (_, sha, _) =
                hash_file(&p).map_err(|e| format!("LD_PRELOAD {}: {e}", p.display()))?;
            out.push(Expected {
                path: p,
                sha256: sha,
                via: "LD_PRELOAD",
                optional: false,
            });
        }
    }
    Ok(out)
}

fn which(prog: &Path) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| Path::new(d).join(prog))
        .find(|p| p.is_file())
}

/// Check a launched arm against its expectations: the process rig started
/// and every process of its tree (a prefork server's workers run the code
/// being compared). `Err` says which process mapped what instead.
pub fn verify(arm: &str, expected: &[Expected], l: &Launched) -> Result<ArmProof, String> {
    let mut proof = verify_process(arm, expected, l.pid, &l.exe, &l.objects)?;
    for pid in crate::process::descendants(l.pid) {
        // A worker that exited since the listing has nothing to check.
        let Ok((exe, objects)) = crate::launch::start::mapped_objects(pid) else {
            continue;
        };
        let p = verify_process(arm, expected, pid, &exe, &objects)?;
        for o in p.verified {
            if !proof.verified.contains(&o) {
                proof.verified.push(o);
            }
        }
        proof.processes.extend(p.processes);
    }
    Ok(proof)
}

fn verify_process(
    arm: &str,
    expected: &[Expected],
    pid: u32,
    exe: &ObjectFact,
    objects: &[ObjectFact],
) -> Result<ArmProof, String> {
    let mapped: Vec<&ObjectFact> = std::iter::once(exe).chain(objects.iter()).collect();
    let mut verified = Vec::new();
    let mut dir_hits = 0usize;
    let dir_files = expected
        .iter()
        .filter(|e| e.via == "LD_LIBRARY_PATH")
        .count();
    for e in expected {
        let name = basename(&e.path.to_string_lossy()).to_string();
        // The same file name mapped from anywhere: is it this file?
        let same_name: Vec<&&ObjectFact> = mapped
            .iter()
            .filter(|o| basename(&o.path) == name || (e.via == "binary" && o.path == exe.path))
            .collect();
        let hit = same_name.iter().find(|o| o.sha256 == e.sha256);
        match (hit, e.optional) {
            (Some(o), _) => {
                if e.via == "LD_LIBRARY_PATH" {
                    dir_hits += 1;
                }
                verified.push((**o).clone());
            }
            (None, true) if same_name.is_empty() => {} // not used by this process
            (None, _) => {
                let instead = same_name
                    .iter()
                    .map(|o| format!("{} (sha256 {})", o.path, &o.sha256[..16]))
                    .collect::<Vec<_>>()
                    .join(", ");
                return Err(format!(
                    "arm {arm} is not the arm: {} {} (sha256 {}) is not what pid {} runs; mapped instead: {}{}",
                    e.via,
                    e.path.display(),
                    &e.sha256[..16],
                    pid,
                    if instead.is_empty() { "nothing of that name".into() } else { instead },
                    if e.via == "LD_LIBRARY_PATH" {
                        " (a DT_RPATH in the binary, or an already loaded copy, beats LD_LIBRARY_PATH)"
                    } else {
                        ""
                    }
                ));
            }
        }
    }
    if dir_files > 0 && dir_hits == 0 {
        return Err(format!(
            "arm {arm} is not the arm: pid {pid} maps none of the {dir_files} libraries of its LD_LIBRARY_PATH"
        ));
    }
    Ok(ArmProof {
        verified,
        processes: vec![pid],
    })
}
