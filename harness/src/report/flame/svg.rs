//! SVG flamegraphs, rendered by inferno from the folded lines: searchable
//! (Ctrl-F, or the Search button), zoomable, with the title and the unit
//! of every frame's value. A frame's `fg:w` attribute is its value as the
//! title's unit says (per request in a fixed-count window).

use inferno::flamegraph::{self, color::Palette, Options};

use super::{folded, title, Profile, Scale};
use crate::probe::Family;

#[derive(Debug, thiserror::Error)]
pub enum SvgError {
    #[error("{0}: no stacks with a value to draw")]
    Empty(String),
    #[error("inferno: {0}")]
    Render(#[from] std::io::Error),
}

fn palette(f: Family) -> &'static str {
    match f {
        Family::Alloc => "mem",
        Family::Sched => "io",
        Family::Locks => "wakeup",
        Family::Copy => "aqua",
        _ => "hot",
    }
}

fn options<'a>(p: &Profile, i: usize, scale: &Scale, subtitle: Option<String>) -> Options<'a> {
    let mut o = Options::default();
    o.title = title(p, i, scale);
    o.subtitle = subtitle;
    o.count_name = scale.unit_text(p.measures()[i].what);
    o.name_type = "Function:".into();
    o.colors = palette(p.family)
        .parse()
        .unwrap_or(Palette::Basic(flamegraph::color::BasicPalette::Hot));
    // Colors from the function's name, so a graph renders the same twice.
    o.hash = true;
    o.deterministic = true;
    // A fixed width, as flamegraph.pl draws: inferno's fluid width sizes
    // the frames from the SVG's own width at load, and report.html embeds
    // each graph in a tab that is hidden (0 px wide) until chosen, which
    // gives every frame a negative width and the browser an error apiece.
    o.image_width = Some(1200);
    o
}

fn subtitle(p: &Profile) -> Option<String> {
    let mut parts = Vec::new();
    if p.family == Family::Cpu && p.period_ns > 0 {
        parts.push(format!(
            "sampled every {} ns of CPU time: statistics, not exact counts",
            p.period_ns
        ));
    }
    if p.incomplete_events > 0 || p.missing_stacks > 0 {
        parts.push(format!(
            "{} events with an incomplete stack, {} without one",
            p.incomplete_events, p.missing_stacks
        ));
    }
    (!parts.is_empty()).then(|| parts.join("; "))
}

fn draw(mut o: Options<'_>, lines: &[String], what: &str) -> Result<Vec<u8>, SvgError> {
    if lines.is_empty() {
        return Err(SvgError::Empty(what.to_string()));
    }
    let mut out = Vec::new();
    flamegraph::from_lines(&mut o, lines.iter().map(String::as_str), &mut out)?;
    Ok(out)
}

impl SvgError {
    /// Every stack rounded to nothing at the graph's scale: there is no
    /// graph to draw, which is not a failure of the run that asked.
    pub fn is_empty(&self) -> bool {
        matches!(self, SvgError::Empty(_))
    }
}

/// The SVG, or `None` when nothing is left to draw at the scale.
pub fn render_if_any(p: &Profile, i: usize, scale: &Scale) -> Result<Option<Vec<u8>>, SvgError> {
    match render(p, i, scale) {
        Ok(svg) => Ok(Some(svg)),
        Err(e) if e.is_empty() => Ok(None),
        Err(e) => Err(e),
    }
}

/// The flamegraph of measure `i` of `p`.
pub fn render(p: &Profile, i: usize, scale: &Scale) -> Result<Vec<u8>, SvgError> {
    let lines = folded::lines(p, i, scale);
    draw(
        options(p, i, scale, subtitle(p)),
        &lines,
        &title(p, i, scale),
    )
}

/// The differential flamegraph A→B of measure `i`: widths are B's, red
/// frames grew from A to B, blue ones shrank (inferno's differential
/// mode). Stacks only A had have no width here; the folded file has them.
pub fn render_diff(
    a: &Profile,
    b: &Profile,
    i: usize,
    scale: &Scale,
    arms: (&str, &str),
) -> Result<Vec<u8>, SvgError> {
    let lines = folded::diff_lines(a, b, i, scale);
    let mut o = options(b, i, scale, None);
    o.title = format!("{} → {}: {}", arms.0, arms.1, title(b, i, scale));
    o.subtitle = Some(format!(
        "widths: {}; red grew, blue shrank from {} to {}",
        arms.1, arms.0, arms.1
    ));
    draw(o, &lines, &title(a, i, scale))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::super::scale_of;
    use std::collections::BTreeMap;

    use super::super::tests::{alloc_profile, N};
    use super::*;

    /// Every frame of an inferno SVG: (title, width in %, `fg:w`).
    pub fn frames(svg: &str) -> Vec<(String, f64, u64)> {
        let mut out = Vec::new();
        for g in svg.split("<g>").skip(1) {
            let Some(title) = g
                .split_once("<title>")
                .and_then(|(_, t)| t.split_once("</title>"))
                .map(|(t, _)| t)
            else {
                continue;
            };
            let attr = |name: &str| {
                g.split_once(&format!(" {name}=\""))
                    .and_then(|(_, v)| v.split_once('"'))
                    .map(|(v, _)| v.to_string())
            };
            let (Some(w), Some(fw)) = (attr("width"), attr("fg:w")) else {
                continue;
            };
            out.push((
                title
                    .replace("&lt;", "<")
                    .replace("&gt;", ">")
                    .replace("&amp;", "&"),
                w.trim_end_matches('%').parse().unwrap(),
                fw.parse().unwrap(),
            ));
        }
        out
    }

    #[test]
    fn draws_each_frame_with_its_per_request_value_and_width() {
        let p = alloc_profile();
        let scale = scale_of(&[&p], 0);
        let svg = String::from_utf8(render(&p, 0, &scale).unwrap()).unwrap();
        assert!(
            svg.contains("case-x: 500 requests, allocations per request"),
            "title"
        );
        assert!(svg.contains("Search"), "searchable");
        let got = frames(&svg);
        let want = [
            ("all (4 allocations per request, 100%)", 4),
            ("main (4 allocations per request, 100.00%)", 4),
            ("serve (4 allocations per request, 100.00%)", 4),
            ("build_reply (3 allocations per request, 75.00%)", 3),
            ("malloc (3 allocations per request, 75.00%)", 3),
            ("parse (1 allocations per request, 25.00%)", 1),
            ("inlined_helper (1 allocations per request, 25.00%)", 1),
            (
                "operator new(unsigned long) (1 allocations per request, 25.00%)",
                1,
            ),
        ];
        for (title, w) in want {
            let f = got
                .iter()
                .find(|f| f.0 == title)
                .unwrap_or_else(|| panic!("no frame {title:?} in {got:#?}"));
            assert_eq!(f.2, w, "{title}");
            assert!((f.1 - 100.0 * w as f64 / 4.0).abs() < 1e-4, "{f:?}");
        }
        assert_eq!(got.len(), want.len(), "{got:#?}");
    }

    #[test]
    fn differential_graph_is_drawn_with_b_widths() {
        let a = alloc_profile();
        let mut b = alloc_profile();
        b.samples[0].values = vec![2 * N, 0];
        let scale = scale_of(&[&a, &b], 0);
        let svg = String::from_utf8(render_diff(&a, &b, 0, &scale, ("A", "B")).unwrap()).unwrap();
        let got = frames(&svg);
        // malloc under build_reply went from 3 to 2 per request: -1 of B's 3.
        let malloc = got.iter().find(|f| f.0.starts_with("malloc")).unwrap();
        assert_eq!(malloc.2, 2);
        assert!(malloc.0.ends_with("66.67%; -33.33%)"), "{malloc:?}");
        assert!(svg.contains("A → B"), "title names the arms");
    }

    /// The fill of every frame of an inferno SVG: title → `rgb(r,g,b)`.
    fn fills(svg: &str) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        for g in svg.split("<g>").skip(1) {
            let title = g
                .split_once("<title>")
                .and_then(|(_, t)| t.split_once("</title>"))
                .map(|(t, _)| t);
            let fill = g
                .split_once(" fill=\"")
                .and_then(|(_, v)| v.split_once('"'))
                .map(|(v, _)| v);
            if let (Some(t), Some(f)) = (title, fill) {
                out.insert(t.to_string(), f.to_string());
            }
        }
        out
    }

    #[test]
    fn differential_graph_colours_grown_frames_red_and_shrunk_frames_blue() {
        let a = alloc_profile();
        let mut b = alloc_profile();
        // malloc under build_reply 3 → 1 per request (-2, the largest
        // change), operator new under parse 1 → 2 (+1, half of it).
        b.samples[0].values = vec![N, 24 * N];
        b.samples[1].values = vec![2 * N, 200 * N];
        let scale = scale_of(&[&a, &b], 0);
        let svg = String::from_utf8(render_diff(&a, &b, 0, &scale, ("A", "B")).unwrap()).unwrap();
        let got = fills(&svg);
        let fill = |prefix: &str| {
            let (t, f) = got
                .iter()
                .find(|(t, _)| t.starts_with(prefix))
                .unwrap_or_else(|| panic!("no frame {prefix:?} in {got:#?}"));
            (t.as_str(), f.as_str())
        };
        // inferno: red (255, c, c) for more, blue (c, c, 255) for less,
        // c = 100 + 150 (max − |delta|) / max; the largest change is the
        // deepest colour, half of it paler.
        assert_eq!(
            fill("malloc"),
            (
                "malloc (1 allocations per request, 33.33%; -66.67%)",
                "rgb(100,100,255)"
            )
        );
        assert_eq!(
            fill("operator new"),
            (
                "operator new(unsigned long) (2 allocations per request, 66.67%; +33.33%)",
                "rgb(255,175,175)"
            )
        );
        // Frames that only hold the changed ones do not change themselves.
        for f in ["main", "serve", "build_reply", "parse", "inlined_helper"] {
            assert_eq!(fill(f).1, "rgb(250,250,250)", "{f}");
        }
    }
}
