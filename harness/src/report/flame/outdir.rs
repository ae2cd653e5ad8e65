//! The flamegraphs of an output directory (`rig run`, `rig ab`, `rig
//! gate`), written from its `cases.jsonl` after the cases ran: every case
//! with a counted pass gets `flame/<case slug>/`, and for `rig ab` every
//! case gets A→B differential graphs in `flame/<slug of the case without
//! arm and run>/` (`<graph>.diff.svg`, `<graph>.diff.folded`,
//! `<family>.<arm>.pb.gz`), each arm summed over its runs.

use std::collections::BTreeMap;
use std::io::BufRead;
use std::path::{Path, PathBuf};

use super::input::Recorded;
use super::write::{self, FlameError};

/// One counted case read back.
struct Counted {
    id: String,
    arm: String,
    recorded: Recorded,
}

fn read_cases(dir: &Path) -> Result<Vec<Counted>, FlameError> {
    let f = std::fs::File::open(dir.join("cases.jsonl"))?;
    let mut out = Vec::new();
    for line in std::io::BufReader::new(f).lines() {
        let line = line?;
        let Ok(mut v) = serde_json::from_str::<serde_json::Value>(&line) else {
            continue;
        };
        let Some(a) = v
            .pointer_mut("/counted/attribution")
            .map(serde_json::Value::take)
        else {
            continue;
        };
        let Ok(recorded) = serde_json::from_value::<Recorded>(a) else {
            continue;
        };
        let s = |k: &str| v.get(k).and_then(|x| x.as_str()).unwrap_or("").to_string();
        out.push(Counted {
            id: s("id"),
            arm: s("target_name"),
            recorded,
        });
    }
    Ok(out)
}

/// `flame/<slug>/` for every counted case of `dir`; returns the files.
pub fn cases(dir: &Path, slug: fn(&str) -> String) -> Result<Vec<PathBuf>, FlameError> {
    let mut written = Vec::new();
    for c in read_cases(dir)? {
        let rel = Path::new("flame").join(slug(&c.id));
        written.extend(write::window(dir, &rel, &c.recorded, &c.id)?);
    }
    Ok(written)
}

/// `rig ab`: for every case, arm i ≥ 1 against arm 0 (`arms[0]`), each
/// summed over its runs. A run's case is `keys[id]`, the case key the
/// command grouped it by (identity is built in one place, `metrics`, above
/// this module); a case id without a key is no run of this comparison. With
/// two arms the directory is the case key's slug; with more, the key and
/// arm i.
pub fn ab(
    dir: &Path,
    arms: &[String],
    keys: &BTreeMap<String, String>,
    slug: fn(&str) -> String,
) -> Result<Vec<PathBuf>, FlameError> {
    let cases = read_cases(dir)?;
    // case key → arm → windows
    let mut by: BTreeMap<&str, BTreeMap<&str, Vec<&Recorded>>> = BTreeMap::new();
    for c in &cases {
        let Some(key) = keys.get(&c.id) else {
            continue;
        };
        by.entry(key.as_str())
            .or_default()
            .entry(c.arm.as_str())
            .or_default()
            .push(&c.recorded);
    }
    let mut written = Vec::new();
    let Some(first) = arms.first() else {
        return Ok(written);
    };
    for (key, per_arm) in &by {
        let Some(a) = per_arm.get(first.as_str()) else {
            continue;
        };
        for b_name in &arms[1..] {
            let Some(b) = per_arm.get(b_name.as_str()) else {
                continue;
            };
            let name = if arms.len() == 2 {
                slug(key)
            } else {
                slug(&format!("{key}/{b_name}"))
            };
            let rel = Path::new("flame").join(name);
            written.extend(write::diff(dir, &rel, (first, a), (b_name, b), key)?);
        }
    }
    Ok(written)
}
