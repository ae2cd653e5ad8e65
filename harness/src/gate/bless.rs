//! `--bless`: a new baseline from what was measured.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicBool;

use anyhow::{Context, Result};

use super::*;

/// The baseline with every deterministic counter's value replaced by now;
/// limits kept for counters it had (soft_pct 0 for new ones); sites gone
/// from the run are dropped; non-deterministic counters are kept as they
/// were. The instructions backend, its tolerance and (for `{rig_peer}`
/// targets) the build profile are recorded.
pub fn blessed(b: &Baseline, m: &Measured) -> (Baseline, Vec<String>) {
    let observed = &m.observed;
    let mut nb = b.clone();
    let mut notes = Vec::new();
    if let Some(i) = &m.instructions {
        nb.instructions_backend = Some(i.backend.name().to_string());
        nb.instructions_tolerance_pct = Some(i.tolerance_pct);
    }
    nb.profile = m.binary.as_ref().and_then(|x| x.profile.clone());
    let by_name: BTreeMap<&str, &Observed> =
        observed.iter().map(|o| (o.name.as_str(), o)).collect();
    nb.counters.retain(|name, _| {
        let keep = !is_site(name) || by_name.contains_key(name.as_str());
        if !keep {
            notes.push(format!("dropped `{name}`: the site is gone"));
        }
        keep
    });
    for o in observed {
        if !o.deterministic {
            notes.push(format!(
                "not blessed `{}`: non-deterministic (spread {:.6}/req)",
                o.name, o.spread
            ));
            continue;
        }
        let now = o.now();
        if is_site(&o.name) && now == 0.0 {
            continue;
        }
        nb.counters
            .entry(o.name.clone())
            .and_modify(|l| l.value = now)
            .or_insert(Limit {
                value: now,
                soft_pct: 0.0,
                hard: None,
            });
    }
    (nb, notes)
}

/// `rig gate --bless`: measure, then rewrite the baseline file with
/// [`blessed`] values.
pub fn bless(s: &GateSettings, stop: &AtomicBool) -> Result<i32> {
    let m = measure(s, stop)?;
    if let Some(i) = &m.instructions {
        crate::outln!("rig gate --bless: instructions counted by {}", i.why);
    }
    let (nb, notes) = blessed(&s.baseline, &m);
    for n in &notes {
        crate::errln!("rig gate --bless: {n}");
    }
    crate::fsutil::replace_file(&s.baseline_path, nb.to_toml().as_bytes())
        .with_context(|| format!("writing {}", s.baseline_path.display()))?;
    crate::outln!(
        "rig gate --bless: wrote {} counters to {}",
        nb.counters.len(),
        s.baseline_path.display()
    );
    Ok(0)
}
