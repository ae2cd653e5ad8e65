//! Files: every graph of a window as `<graph>.folded` and `<graph>.svg`,
//! and every family as `<family>.pb.gz`, in one directory per case
//! (`flame/<case slug>/` of an output directory); A→B differential graphs
//! of `rig ab`; one graph in one format for `rig flame`.

use std::path::{Path, PathBuf};

use super::input::Recorded;
use super::{folded, graph, pprof, profile, scale_of, svg, Profile, Sample};
use crate::probe::Family;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Svg,
    Folded,
    Pprof,
}

impl std::str::FromStr for Format {
    type Err = String;
    fn from_str(s: &str) -> Result<Format, String> {
        match s {
            "svg" => Ok(Format::Svg),
            "folded" => Ok(Format::Folded),
            "pprof" => Ok(Format::Pprof),
            other => Err(format!("{other:?}: give svg, folded or pprof")),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum FlameError {
    #[error("no graph {0:?}; graphs: {1}")]
    UnknownGraph(String, String),
    #[error("family {0} did not run in this window, or took no stacks")]
    NoFamily(Family),
    #[error(transparent)]
    Svg(#[from] svg::SvgError),
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// One graph (`alloc`, `alloc_bytes`, `cpu`, ...; see `super::measures`)
/// of a recorded window in one format. pprof holds every measure of the
/// graph's family.
pub fn render(
    r: &Recorded,
    label: &str,
    graph_name: &str,
    format: Format,
) -> Result<Vec<u8>, FlameError> {
    let (family, i) = graph(graph_name).ok_or_else(|| {
        FlameError::UnknownGraph(graph_name.to_string(), super::graph_names().join(", "))
    })?;
    let p = profile(r, family, label).ok_or(FlameError::NoFamily(family))?;
    let scale = scale_of(&[&p], i);
    Ok(match format {
        Format::Folded => folded::render(&p, i, &scale).into_bytes(),
        Format::Svg => svg::render(&p, i, &scale)?,
        Format::Pprof => pprof::encode(&p)?,
    })
}

fn profiles(r: &Recorded, label: &str) -> Vec<Profile> {
    r.families
        .iter()
        .filter_map(|f| profile(r, *f, label))
        .collect()
}

/// Every graph and profile of a window with a value, in `base/rel/`
/// (directories made below `base`, files new). Returns the files written.
pub fn window(
    base: &Path,
    rel: &Path,
    r: &Recorded,
    label: &str,
) -> Result<Vec<PathBuf>, FlameError> {
    let mut written = Vec::new();
    let dir = base.join(rel);
    for p in profiles(r, label) {
        let mut any = graphs(base, rel, &p, "", &mut written)?;
        // The probes a user named: one graph of each too, beside the
        // family's graph of them all (`user.PROBE.svg`).
        if p.family == Family::User {
            for one in per_event(&p) {
                let name = format!(".{}", file_name(&one.samples[0].event));
                any |= graphs(base, rel, &one, &name, &mut written)?;
            }
        }
        if any {
            let path = dir.join(format!("{}.pb.gz", p.family.name()));
            crate::fsutil::write_new(&path, &pprof::encode(&p)?)?;
            written.push(path);
        }
    }
    Ok(written)
}

/// Each measure of `p` with a value as `<graph><suffix>.folded` and `.svg`
/// in `base/rel/`; whether any was written.
fn graphs(
    base: &Path,
    rel: &Path,
    p: &Profile,
    suffix: &str,
    written: &mut Vec<PathBuf>,
) -> Result<bool, FlameError> {
    let dir = base.join(rel);
    let mut any = false;
    for (i, m) in p.measures().iter().enumerate() {
        if p.total(i) == 0 {
            continue;
        }
        // A user probe's argument summed may be signed and negative at a
        // stack (a width no graph can draw): its graph is left out, said.
        if p.family == Family::User && p.samples.iter().any(|s| (s.values[i] as i64) < 0) {
            eprintln!(
                "rig: {}{suffix}: no graph of the argument summed: it is negative at some stacks",
                p.family.name()
            );
            continue;
        }
        if !any {
            crate::fsutil::make_dirs_below(base, rel)?;
            any = true;
        }
        let scale = scale_of(&[p], i);
        let path = dir.join(format!("{}{suffix}.folded", m.graph));
        crate::fsutil::write_new(&path, folded::render(p, i, &scale).as_bytes())?;
        written.push(path);
        if let Some(svg) = svg::render_if_any(p, i, &scale)? {
            let path = dir.join(format!("{}{suffix}.svg", m.graph));
            crate::fsutil::write_new(&path, &svg)?;
            written.push(path);
        }
    }
    Ok(any)
}

/// `p` split by event: one profile per probe of the user family.
fn per_event(p: &Profile) -> Vec<Profile> {
    let mut by: std::collections::BTreeMap<&str, Vec<Sample>> = Default::default();
    for s in &p.samples {
        by.entry(s.event.as_str()).or_default().push(s.clone());
    }
    by.into_values()
        .map(|samples| Profile {
            samples,
            ..p.clone()
        })
        .collect()
}

/// A probe's name as a file name: `usdt:python:gc__start` →
/// `usdt_python_gc__start`.
fn file_name(probe: &str) -> String {
    probe
        .chars()
        .map(|c| match c {
            'a'..='z' | 'A'..='Z' | '0'..='9' | '_' | '-' | '.' => c,
            _ => '_',
        })
        .take(120)
        .collect()
}

/// Windows of one arm summed into one profile per family (samples
/// concatenated, requests and time added): an arm's cost per request over
/// all its runs.
pub fn merged(windows: &[&Recorded], family: Family, label: &str) -> Option<Profile> {
    let mut out: Option<Profile> = None;
    for r in windows {
        let Some(p) = profile(r, family, label) else {
            continue;
        };
        match out.as_mut() {
            None => out = Some(p),
            Some(o) => {
                o.requests = match (o.requests, p.requests) {
                    (Some(a), Some(b)) => Some(a + b),
                    _ => None,
                };
                o.elapsed_ns += p.elapsed_ns;
                o.incomplete_events += p.incomplete_events;
                o.missing_stacks += p.missing_stacks;
                o.samples.extend(p.samples);
            }
        }
    }
    if let Some(o) = out.as_mut().filter(|_| windows.len() > 1) {
        o.samples = coalesce(std::mem::take(&mut o.samples));
    }
    out
}

/// One sample per event and stack (by module and offset, as the windows
/// are fresh processes of the same build at other addresses), the values
/// of the windows summed: a per-request value is only exact when it is
/// taken of the sum. Rounded one window (one pid) at a time, three call
/// sites at 0.5 per request each became 1 each, and pprof showed 6 where
/// there were 3.
fn coalesce(samples: Vec<Sample>) -> Vec<Sample> {
    // (event, each frame's kind, module and offset) → index in `out`.
    type Key = (String, Vec<(String, Option<String>, u64)>);
    let mut at: std::collections::HashMap<Key, usize> = std::collections::HashMap::new();
    let mut out: Vec<Sample> = Vec::new();
    for s in samples {
        let key = (
            s.event.clone(),
            s.locs
                .iter()
                .map(|l| (format!("{:?}", l.kind), l.module.clone(), l.module_offset))
                .collect(),
        );
        match at.get(&key) {
            Some(&i) => {
                for (v, add) in out[i].values.iter_mut().zip(&s.values) {
                    *v += add;
                }
            }
            None => {
                at.insert(key, out.len());
                out.push(s);
            }
        }
    }
    out
}

/// A→B of two arms, each the sum of its windows, in `base/rel/`:
/// `<graph>.diff.folded` (stack, A per request, B per request),
/// `<graph>.diff.svg` (inferno's differential flamegraph), and per family
/// `<family>.<arm>.pb.gz` for both arms, so `go tool pprof
/// -diff_base=<family>.A.pb.gz <family>.B.pb.gz` shows B − A.
pub fn diff(
    base: &Path,
    rel: &Path,
    a: (&str, &[&Recorded]),
    b: (&str, &[&Recorded]),
    label: &str,
) -> Result<Vec<PathBuf>, FlameError> {
    let mut written = Vec::new();
    let dir = base.join(rel);
    let mut families: Vec<Family> =
        a.1.iter()
            .chain(b.1)
            .flat_map(|r| r.families.clone())
            .collect();
    families.sort();
    families.dedup();
    for family in families {
        let (Some(pa), Some(pb)) = (merged(a.1, family, label), merged(b.1, family, label)) else {
            continue;
        };
        let mut any = false;
        for (i, m) in pa.measures().iter().enumerate() {
            if pa.total(i) == 0 && pb.total(i) == 0 {
                continue;
            }
            if !any {
                crate::fsutil::make_dirs_below(base, rel)?;
                any = true;
            }
            let scale = scale_of(&[&pa, &pb], i);
            let mut text = format!(
                "# rig flame {} → {}: {label}; columns: stack, {} in {}, in {}\n",
                a.0,
                b.0,
                scale.unit_text(m.what),
                a.0,
                b.0
            );
            for l in folded::diff_lines(&pa, &pb, i, &scale) {
                text.push_str(&l);
                text.push('\n');
            }
            let path = dir.join(format!("{}.diff.folded", m.graph));
            crate::fsutil::write_new(&path, text.as_bytes())?;
            written.push(path);
            if pb.total(i) > 0 {
                match svg::render_diff(&pa, &pb, i, &scale, (a.0, b.0)) {
                    Ok(svg) => {
                        let path = dir.join(format!("{}.diff.svg", m.graph));
                        crate::fsutil::write_new(&path, &svg)?;
                        written.push(path);
                    }
                    Err(e) if e.is_empty() => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
        if any {
            // One scale for both arms: pprof subtracts a base only from a
            // profile of the same sample types and units.
            let scales: Vec<_> = (0..pa.measures().len())
                .map(|i| scale_of(&[&pa, &pb], i))
                .collect();
            for (arm, p) in [(a.0, &pa), (b.0, &pb)] {
                let path = dir.join(format!("{}.{}.pb.gz", family.name(), arm_file(arm)));
                crate::fsutil::write_new(&path, &pprof::gzip(&pprof::build(p, &scales))?)?;
                written.push(path);
            }
        }
    }
    Ok(written)
}

/// An arm's name as part of a file name.
fn arm_file(arm: &str) -> String {
    arm.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::path::{Path, PathBuf};
    use std::process::Command;

    use super::super::input::Recorded;
    use super::super::tests::{alloc_recorded, N};
    use super::diff;

    /// `go` from PATH or Debian's golang-go; `None` (the test skips) only
    /// outside CI.
    fn go() -> Option<PathBuf> {
        let found = std::env::var_os("PATH")
            .into_iter()
            .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
            .chain([PathBuf::from("/usr/lib/go/bin")])
            .map(|d| d.join("go"))
            .find(|p| p.is_file());
        if found.is_none() {
            assert!(
                std::env::var_os("CI").is_none(),
                "go is missing and CI is set: scripts/deps.sh installs golang-go"
            );
            crate::errln!("SKIPPED: go tool pprof (no go; scripts/deps.sh installs golang-go)");
        }
        found
    }

    /// `go tool pprof -top -diff_base=BASE FILE` rows: function → (flat,
    /// cum) of FILE − BASE.
    fn pprof_diff_top(
        go: &Path,
        base: &Path,
        file: &Path,
        sample_index: &str,
    ) -> BTreeMap<String, (String, String)> {
        let home = tempfile::tempdir().unwrap();
        let out = Command::new(go)
            .args([
                "tool",
                "pprof",
                "-top",
                &format!("-sample_index={sample_index}"),
            ])
            .arg(format!("-diff_base={}", base.display()))
            .arg(file)
            .env("HOME", home.path())
            .env("GOCACHE", home.path().join("cache"))
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "{text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        crate::outln!("{text}");
        let mut rows = BTreeMap::new();
        let mut table = false;
        for l in text.lines() {
            if l.trim_start().starts_with("flat") {
                table = true;
                continue;
            }
            let f: Vec<&str> = l.split_whitespace().collect();
            if table && f.len() >= 6 {
                rows.insert(f[5..].join(" "), (f[0].to_string(), f[3].to_string()));
            }
        }
        rows
    }

    /// Arm B of `alloc_recorded`: `malloc` under `build_reply` `a_per` per
    /// request (A: 3), `operator new` under `parse` `c_tenths` tenths per
    /// request (A: 10).
    fn arm_b(a_per: u64, c_tenths: u64) -> Recorded {
        let mut r = alloc_recorded();
        for row in &mut r.stacks.rows {
            match (row.event.as_str(), row.stack.as_deref()) {
                ("malloc", Some("a")) => (row.count, row.amount) = (a_per * N, 24 * a_per * N),
                ("operator new", Some("c")) => {
                    (row.count, row.amount) = (c_tenths * N / 10, 10 * c_tenths * N)
                }
                _ => {}
            }
        }
        r
    }

    #[test]
    fn go_tool_pprof_subtracts_arm_a_from_arm_b_per_request() {
        let Some(go) = go() else { return };
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (alloc_recorded(), arm_b(1, 20));
        let files = diff(
            dir.path(),
            Path::new("x"),
            ("A", &[&a]),
            ("B", &[&b]),
            "case-x",
        )
        .unwrap();
        let (pa, pb) = (
            dir.path().join("x/alloc.A.pb.gz"),
            dir.path().join("x/alloc.B.pb.gz"),
        );
        assert!(files.contains(&pa) && files.contains(&pb), "{files:?}");
        // B − A per request: malloc 3 → 1 at build_reply, operator new
        // 1 → 2 at parse (through the helper inlined into it).
        let rows = pprof_diff_top(&go, &pa, &pb, "alloc_objects");
        let want = |flat: i64, cum: i64| (flat.to_string(), cum.to_string());
        assert_eq!(rows["malloc"], want(-2, -2), "{rows:#?}");
        assert_eq!(rows["build_reply"], want(0, -2), "{rows:#?}");
        assert_eq!(rows["operator new(unsigned long)"], want(1, 1), "{rows:#?}");
        assert_eq!(rows["inlined_helper (inline)"], want(0, 1), "{rows:#?}");
        assert_eq!(rows["parse"], want(0, 1), "{rows:#?}");
        assert_eq!(rows["serve"], want(0, -1), "{rows:#?}");
        assert_eq!(rows["main"], want(0, -1), "{rows:#?}");
        // Bytes: 72 → 24 at malloc, 100 → 200 at operator new.
        let bytes = pprof_diff_top(&go, &pa, &pb, "alloc_space");
        assert_eq!(bytes["malloc"].0, "-48B", "{bytes:#?}");
        assert_eq!(bytes["operator new(unsigned long)"].0, "100B", "{bytes:#?}");
    }

    #[test]
    fn both_arms_share_a_scale_so_go_tool_pprof_can_subtract_them() {
        let Some(go) = go() else { return };
        let dir = tempfile::tempdir().unwrap();
        // B's 1.5 operator news per request need a scale of 10 requests;
        // A alone would be per request, and pprof refuses to subtract
        // profiles of different units.
        let (a, b) = (alloc_recorded(), arm_b(1, 15));
        diff(
            dir.path(),
            Path::new("x"),
            ("A", &[&a]),
            ("B", &[&b]),
            "case-x",
        )
        .unwrap();
        let (pa, pb) = (
            dir.path().join("x/alloc.A.pb.gz"),
            dir.path().join("x/alloc.B.pb.gz"),
        );
        let rows = pprof_diff_top(&go, &pa, &pb, "alloc_objects");
        // Per 10 requests: malloc 30 → 10, operator new 10 → 15.
        assert_eq!(rows["malloc"].0, "-20count/10req", "{rows:#?}");
        assert_eq!(
            rows["operator new(unsigned long)"].0, "5count/10req",
            "{rows:#?}"
        );
    }
}
