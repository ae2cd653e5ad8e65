//! Files: every graph of a window as `<graph>.folded` and `<graph>.svg`,
//! and every family as `<family>.pb.gz`, in one directory per case
//! (`flame/<case slug>/` of an output directory); A→B differential graphs
//! of `rig ab`; one graph in one format for `rig flame`.

use std::path::{Path, PathBuf};

use super::input::Recorded;
use super::{folded, graph, pprof, profile, scale_of, svg, Profile};
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
        let mut any = false;
        for (i, m) in p.measures().iter().enumerate() {
            if p.total(i) == 0 {
                continue;
            }
            if !any {
                crate::fsutil::make_dirs_below(base, rel)?;
                any = true;
            }
            let scale = scale_of(&[&p], i);
            let path = dir.join(format!("{}.folded", m.graph));
            crate::fsutil::write_new(&path, folded::render(&p, i, &scale).as_bytes())?;
            written.push(path);
            let path = dir.join(format!("{}.svg", m.graph));
            crate::fsutil::write_new(&path, &svg::render(&p, i, &scale)?)?;
            written.push(path);
        }
        if any {
            let path = dir.join(format!("{}.pb.gz", p.family.name()));
            crate::fsutil::write_new(&path, &pprof::encode(&p)?)?;
            written.push(path);
        }
    }
    Ok(written)
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
                let path = dir.join(format!("{}.diff.svg", m.graph));
                crate::fsutil::write_new(
                    &path,
                    &svg::render_diff(&pa, &pb, i, &scale, (a.0, b.0))?,
                )?;
                written.push(path);
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
