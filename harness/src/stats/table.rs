//! One terminal-table row per metric, in the spirit of benchstat.

use super::{Comparison, RankTest};

/// Column titles matching [`benchstat_row`].
pub fn benchstat_header() -> Vec<&'static str> {
    vec!["metric", "A", "B", "Δ (95% CI)", "p", "verdict"]
}

/// `[name, "A median ± spread", "B median ± spread", "Δ% (CI lo .. hi)",
/// "p=… n=…", verdict]`. Δ is relative to A's median, or absolute (in `unit`)
/// when A's median is 0. A p-value the rule did not use (too few runs for
/// it to reach 0.05) is marked "unused".
pub fn benchstat_row(name: &str, c: &Comparison, unit: &str) -> Vec<String> {
    let unit = if unit.is_empty() {
        String::new()
    } else {
        format!(" {unit}")
    };
    let arm = |m: f64, s: f64| format!("{} ± {}{unit}", num(m), num(s));
    let delta = match (c.ci, c.rel) {
        (None, _) => "-".to_string(),
        (Some(ci), Some(rel)) => {
            let base = c.a_median.abs();
            format!(
                "{} ({} .. {})",
                percent(rel),
                percent(ci.lo / base),
                percent(ci.hi / base)
            )
        }
        (Some(ci), None) => format!(
            "{} ({} .. {}){unit}",
            signed(c.diff_median),
            signed(ci.lo),
            signed(ci.hi)
        ),
    };
    let n = match (c.test, c.pairs) {
        (RankTest::WilcoxonSignedRank, Some(p)) => format!("n={p} pairs"),
        _ => format!("n={}+{}", c.a_runs, c.b_runs),
    };
    let p = match c.p_value {
        None => "-".to_string(),
        Some(p) if p < 0.001 => format!("p<0.001 {n}"),
        Some(p) => format!("p={p:.3} {n}"),
    };
    let p = if c.test_applied || c.p_value.is_none() {
        p
    } else {
        format!("{p} unused")
    };
    vec![
        name.to_string(),
        arm(c.a_median, c.a_spread),
        arm(c.b_median, c.b_spread),
        delta,
        p,
        c.verdict.word().to_string(),
    ]
}

/// Four significant digits, no trailing zeros, integers as integers.
pub(crate) fn num(x: f64) -> String {
    if !x.is_finite() {
        return "-".into();
    }
    if x == x.trunc() && x.abs() < 1e15 {
        return format!("{}", x as i64);
    }
    let magnitude = x.abs().log10().floor() as i32;
    let decimals = (3 - magnitude).clamp(0, 12) as usize;
    let s = format!("{x:.decimals$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

fn signed(x: f64) -> String {
    if x > 0.0 {
        format!("+{}", num(x))
    } else {
        num(x)
    }
}

fn percent(x: f64) -> String {
    let x = if x == 0.0 { 0.0 } else { x * 100.0 };
    if !x.is_finite() {
        return "-".into();
    }
    format!("{x:+.2}%")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_keep_four_significant_digits() {
        assert_eq!(num(8.0), "8");
        assert_eq!(num(-3.0), "-3");
        assert_eq!(num(12.3456), "12.35");
        assert_eq!(num(0.41), "0.41");
        assert_eq!(num(1234.56), "1235");
        assert_eq!(num(0.000123456), "0.0001235");
        assert_eq!(num(f64::NAN), "-");
        assert_eq!(signed(1.5), "+1.5");
        assert_eq!(signed(0.0), "0");
        assert_eq!(percent(-0.125), "-12.50%");
        assert_eq!(percent(-0.0), "+0.00%");
    }
}
