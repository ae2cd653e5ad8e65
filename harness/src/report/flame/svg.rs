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
    o.colors = palette(p.family).parse().unwrap_or(Palette::Basic(flamegraph::color::BasicPalette::Hot));
    // Colors from the function's name, so a graph renders the same twice.
    o.hash = true;
    o.deterministic = true;
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
