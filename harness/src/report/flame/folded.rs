//! Folded stacks, the input format of `flamegraph.pl` and inferno: one
//! line per stack, frames outermost first separated by `;`, then a space
//! and the stack's value. Kernel frames end in `_[k]` (as perf's collapser
//! writes them); functions inlined at an address are frames of their own.

use super::{LocKind, Merged, Profile, Scale};

/// A frame name as a folded line can hold it: `;` separates frames and a
/// line break ends the line (Rust types such as `[u8; 8]` hold a `;`).
pub fn frame_name(name: &str) -> String {
    if !name.contains([';', '\n', '\r']) {
        return name.to_string();
    }
    name.replace(';', ",").replace(['\n', '\r'], " ")
}

/// Folded stack (without value) → window total of measure `i`, for every
/// stack with a non-zero value.
pub fn stacks(p: &Profile, i: usize) -> Merged {
    let mut out = Merged::new();
    for s in &p.samples {
        let v = s.values[i];
        if v == 0 {
            continue;
        }
        let mut frames: Vec<String> = Vec::new();
        for loc in s.locs.iter().rev() {
            for l in &loc.lines {
                let mut f = frame_name(&l.function);
                if loc.kind == LocKind::Kernel {
                    f.push_str("_[k]");
                }
                frames.push(f);
            }
        }
        let at = out.entry(frames.join(";")).or_default();
        // A user probe's signed argument sums modulo 2^64.
        *at = at.wrapping_add(v);
    }
    out
}

/// The lines of measure `i`, each stack's value as `scale` shows it
/// (stacks that round to zero are left out), sorted.
pub fn lines(p: &Profile, i: usize, scale: &Scale) -> Vec<String> {
    stacks(p, i)
        .into_iter()
        .map(|(k, v)| (k, scale.value(v)))
        .filter(|(_, v)| *v > 0)
        .map(|(k, v)| format!("{k} {v}"))
        .collect()
}

/// The folded file of measure `i`: a `# ` header (inferno and
/// flamegraph.pl skip it) saying what the numbers are, then the lines.
pub fn render(p: &Profile, i: usize, scale: &Scale) -> String {
    let mut out = format!("# rig flame: {}\n", super::title(p, i, scale));
    if p.incomplete_events > 0 || p.missing_stacks > 0 {
        out.push_str(&format!(
            "# {} events with an incomplete stack, {} without one (see the attribution's stacks section)\n",
            p.incomplete_events, p.missing_stacks
        ));
    }
    for l in lines(p, i, scale) {
        out.push_str(&l);
        out.push('\n');
    }
    out
}

/// Differential folded lines, A→B: `stack valueA valueB` (the input of
/// inferno's and flamegraph.pl's differential mode), per request as
/// `scale` shows it.
pub fn diff_lines(a: &Profile, b: &Profile, i: usize, scale: &Scale) -> Vec<String> {
    let (sa, sb) = (stacks(a, i), stacks(b, i));
    let mut keys: Vec<&String> = sa.keys().chain(sb.keys()).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .map(|k| {
            let va = sa.get(k).map_or(0, |v| scale.value(*v));
            let vb = sb.get(k).map_or(0, |v| scale.value(*v));
            (k, va, vb)
        })
        .filter(|(_, va, vb)| *va > 0 || *vb > 0)
        .map(|(k, va, vb)| format!("{k} {va} {vb}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::tests::{alloc_profile, N};
    use super::*;

    #[test]
    fn folds_outermost_first_with_inlined_and_kernel_frames_and_per_request_values() {
        let p = alloc_profile();
        let scale = super::super::scale_of(&[&p], 0);
        assert_eq!(
            scale,
            Scale {
                requests: Some(N),
                per: 1
            }
        );
        assert_eq!(
            lines(&p, 0, &scale),
            vec![
                "main;serve;build_reply;malloc 3".to_string(),
                "main;serve;parse;inlined_helper;operator new(unsigned long) 1".to_string(),
            ]
        );
        // Bytes: 3 x 24 + 1 x 100 per request.
        let bytes = super::super::scale_of(&[&p], 1);
        assert_eq!(
            lines(&p, 1, &bytes),
            vec![
                "main;serve;build_reply;malloc 72".to_string(),
                "main;serve;parse;inlined_helper;operator new(unsigned long) 100".to_string(),
            ]
        );
        let text = render(&p, 0, &scale);
        assert!(
            text.starts_with("# rig flame: case-x: 500 requests, allocations per request\n"),
            "{text}"
        );
    }

    #[test]
    fn uses_a_larger_request_count_when_a_per_request_value_is_not_whole() {
        let mut p = alloc_profile();
        // 1.5 allocations per request at the first stack.
        p.samples[0].values = vec![N * 3 / 2, N * 3 / 2 * 24];
        let scale = super::super::scale_of(&[&p], 0);
        assert_eq!(scale.per, 10);
        assert_eq!(lines(&p, 0, &scale)[0], "main;serve;build_reply;malloc 15");
        assert_eq!(
            scale.unit_text("allocations"),
            "allocations per 10 requests"
        );
        // 1/3 per request has no whole value per 10^k requests: totals.
        p.requests = Some(3);
        p.samples[0].values = vec![1, 24];
        p.samples[1].values = vec![3, 300];
        let scale = super::super::scale_of(&[&p], 0);
        assert_eq!(scale.per, 3);
        assert_eq!(
            lines(&p, 0, &scale),
            vec![
                "main;serve;build_reply;malloc 1",
                "main;serve;parse;inlined_helper;operator new(unsigned long) 3"
            ]
        );
        assert_eq!(scale.unit_text("allocations"), "allocations per 3 requests");
    }

    #[test]
    fn kernel_frames_sit_above_the_event_frame_and_semicolons_are_escaped() {
        let p = super::super::tests::syscall_profile();
        let scale = super::super::scale_of(&[&p], 0);
        assert_eq!(
            lines(&p, 0, &scale),
            vec!["main;<[u8, 4] as Tr>::f;syscall;[getppid];entry_SYSCALL_64_[k];do_syscall_64_[k] 3"]
        );
    }

    #[test]
    fn differential_lines_carry_both_arms_per_request() {
        let a = alloc_profile();
        let mut b = alloc_profile();
        b.samples[0].values = vec![2 * N, 48 * N];
        b.samples.remove(1);
        let scale = super::super::scale_of(&[&a, &b], 0);
        assert_eq!(
            diff_lines(&a, &b, 0, &scale),
            vec![
                "main;serve;build_reply;malloc 3 2",
                "main;serve;parse;inlined_helper;operator new(unsigned long) 1 0",
            ]
        );
    }
}
