//! The flamegraphs an output directory holds: `flame/<case slug>/<family>.svg`
//! and, for `rig ab`, `flame/<slug>/<family>.diff.svg`.
//!
//! Each is embedded as the SVG file itself (a `data:` URL in an iframe):
//! the flamegraph keeps its own search and zoom script, and its element ids
//! and script cannot clash with the page's or another flamegraph's.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use anyhow::{Context, Result};
use base64::Engine;
use serde_json::{json, Value};

#[derive(Default)]
pub struct Flames {
    /// slug → (family, differential, SVG text)
    by_case: BTreeMap<String, Vec<(String, bool, String)>>,
}

fn family_rank(f: &str) -> usize {
    crate::metrics::names::family_names()
        .position(|x| x == f)
        .unwrap_or(usize::MAX)
}

/// The root element's height, for the iframe (inferno writes it in px).
fn height(svg: &str) -> u64 {
    let Some(root) = svg.find("<svg") else {
        return 400;
    };
    let tag = &svg[root..svg[root..].find('>').map_or(svg.len(), |e| root + e)];
    tag.find(" height=\"")
        .and_then(|i| {
            let rest = &tag[i + 9..];
            rest[..rest.find('"')?]
                .trim_end_matches("px")
                .parse::<f64>()
                .ok()
        })
        .map_or(400, |h| h.ceil() as u64)
}

impl Flames {
    pub fn read(dir: &Path) -> Result<Flames> {
        let mut out = Flames::default();
        let Ok(rd) = std::fs::read_dir(dir) else {
            return Ok(out);
        };
        for case in rd.flatten().filter(|e| e.path().is_dir()) {
            let slug = case.file_name().to_string_lossy().into_owned();
            let mut list = Vec::new();
            for f in std::fs::read_dir(case.path())?.flatten() {
                let name = f.file_name().to_string_lossy().into_owned();
                let Some(stem) = name.strip_suffix(".svg") else {
                    continue;
                };
                let (family, diff) = match stem.strip_suffix(".diff") {
                    Some(f) => (f.to_string(), true),
                    None => (stem.to_string(), false),
                };
                let text = std::fs::read_to_string(f.path())
                    .with_context(|| format!("reading {}", f.path().display()))?;
                list.push((family, diff, text));
            }
            list.sort_by(|a, b| (family_rank(&a.0), &a.0).cmp(&(family_rank(&b.0), &b.0)));
            out.by_case.insert(slug, list);
        }
        Ok(out)
    }

    /// The flamegraphs of one case (plain or differential) for the page.
    pub fn of(&self, slug: &str, diff: bool) -> Vec<Value> {
        let b64 = base64::engine::general_purpose::STANDARD;
        self.by_case
            .get(slug)
            .into_iter()
            .flatten()
            .filter(|(_, d, _)| *d == diff)
            .map(|(family, _, svg)| {
                json!({
                    "family": family,
                    "height": height(svg),
                    "src": format!("data:image/svg+xml;base64,{}", b64.encode(svg)),
                })
            })
            .collect()
    }

    /// Flamegraphs of slugs that are no case of `known` (the differential
    /// ones of `rig ab`, named by the case without its arm), and every
    /// differential one.
    pub fn except(&self, known: &BTreeSet<String>) -> Vec<Value> {
        self.by_case
            .keys()
            .filter_map(|slug| {
                let mut all = self.of(slug, true);
                if !known.contains(slug) {
                    all.extend(self.of(slug, false));
                }
                (!all.is_empty()).then(|| json!({"slug": slug, "flames": all}))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_the_height_of_the_root_element() {
        assert_eq!(
            super::height(r#"<?xml?><svg version="1.1" width="1200" height="342" x="1">"#),
            342
        );
        assert_eq!(super::height("<svg width=\"10\">"), 400);
    }
}
