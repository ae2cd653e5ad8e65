//! The counted pass: probes attached, one fixed-count window
//! ([`crate::window::drive`]), exact per-request counters.

use std::collections::BTreeMap;

use crate::launch::spec::TargetSpec;
use crate::launch::start::{Launched, ObjectFact};
use crate::load::{Client, LoadReport};
use crate::probe::user::UserProbe;
use crate::probe::{Family, ProbeSet, Scope, Stacks};
use crate::report::Attribution;
use crate::scenario::{Case, HttpCase};
use crate::symbolize::Symbolizer;

use super::*;
use crate::window::ebpf::{ProbeWindow, SettleEnd};
use crate::window::{drive, Phase, WarmUp};

pub(super) struct CountedMeasure {
    pub(super) report: LoadReport,
    pub(super) attribution: Attribution,
    pub(super) reasons: Vec<String>,
    /// Requests the warm-ups before and under the probes answered: with
    /// the report's, everything the window made the server serve.
    pub(super) warmed: u64,
}

/// `live_heap`: also record which of the window's allocations are still
/// allocated at its end, by site (uretprobes on the allocators: dearer, so
/// only the soak's windows ask for it).
pub(super) fn counted_measure(
    rs: &RunSettings,
    case: &Case,
    http: &HttpCase,
    spec: &TargetSpec,
    l: &Launched,
    sym: &mut Symbolizer,
    live_heap: bool,
) -> Result<CountedMeasure, Fail> {
    let mut ls = load_spec(rs, http, spec, l.port)?;
    // Exact per-request counts want a closed, fixed-count window: the
    // open-loop schedule belongs to the clean pass.
    ls.threads = Some(1);
    let mut client = Client::connect(&ls)?;
    let slots = (ls.connections * ls.streams) as u64;
    // A failed warm-up before the probes fails the pass; the one under them
    // only faults in BPF state, its answers are not judged.
    let warmed = std::cell::Cell::new(0);
    let check = |phase: Phase, warm: &LoadReport| -> anyhow::Result<()> {
        warmed.set(warmed.get() + warm.succeeded);
        let reasons = match phase {
            Phase::Before => check_load("counted warm-up", warm),
            Phase::Under => Vec::new(),
        };
        match reasons.is_empty() {
            true => Ok(()),
            false => Err(anyhow::anyhow!(reasons.join("; "))),
        }
    };
    // The probes of the server's own code its spec and the matrix name.
    let m = &rs.matrix.probes;
    let in_spec = crate::named_probes!(spec);
    let in_matrix = crate::named_probes!(m);
    let user_probes = UserProbe::of_spec(in_spec)
        .map_err(|e| Fail(format!("target spec {}: {e}", spec.name)))?
        .into_iter()
        .chain(
            UserProbe::of_spec(in_matrix)
                .map_err(|e| Fail(format!("the matrix's [probes]: {e}")))?,
        )
        .collect::<Vec<_>>();
    if (in_spec.declares_allocators() || in_matrix.declares_allocators())
        && !rs.families.contains(&Family::Alloc)
    {
        return Err(Fail(
            "alloc_func/free_func name application allocators, which the alloc probes count: \
             add alloc to --probes"
                .into(),
        ));
    }
    // The launched process and everything it forks (prefork servers).
    let open = || -> anyhow::Result<ProbeWindow> {
        let live_heap = live_heap && rs.families.contains(&Family::Alloc);
        let probes = ProbeSet::attach_named(
            l.pid,
            &rs.families,
            Scope::Tree,
            Stacks::On,
            live_heap,
            &user_probes,
        )?;
        Ok(ProbeWindow::new(probes, SettleEnd::IfStartSettled, || {
            !l.has_exited()
        }))
    };
    let driven = drive(
        &mut client,
        WarmUp::counted(slots),
        case.counted_requests,
        check,
        open,
    )?;
    drop(client);
    // The commands report nothing of a case cut by SIGINT/SIGTERM: do not
    // spend the exit's second on symbolizing its window (reading DWARF of
    // every library it touched).
    if crate::interrupt::requested() {
        return Err(Fail(crate::interrupt::interrupted_by()));
    }
    let (report, reading) = (driven.report, driven.reading);
    let window = reading.window;
    let mut reasons = Vec::new();
    reasons.extend(check_load("counted", &report));
    let wrappers = crate::report::stacks::Wrappers::with_extra(&spec.wrappers);
    let mut attribution =
        Attribution::build_with(&window, Some(report.succeeded), None, sym, &wrappers);
    attribution.window.quiesced = Some(reading.quiesced);
    if !attribution.complete {
        reasons.push(format!(
            "counted pass: the probes lost events: {:?}",
            attribution.losses
        ));
    }
    Ok(CountedMeasure {
        report,
        attribution,
        reasons,
        warmed: warmed.get(),
    })
}

pub(super) fn counted_pass(
    rs: &RunSettings,
    case: &Case,
    http: &HttpCase,
    spec: &TargetSpec,
    sym: &mut Symbolizer,
    objs: &mut Option<Vec<ObjectFact>>,
) -> Result<(CountedPass, Vec<String>), Fail> {
    let (l, arm_proof) = launch_pass(rs, case, spec, "counted")?;
    record_objects(&l, objs);
    let measured = counted_measure(rs, case, http, spec, &l, sym, false);
    let mut info = LaunchInfo::of(&l);
    info.arm_proof = arm_proof;
    let died = exited_reason("counted", &l);
    let exit = stop(l);
    let m = measured.map_err(|Fail(why)| failed("counted", why, died.clone(), &exit))?;
    let mut reasons = m.reasons;
    reasons.extend(died);
    reasons.extend(oom_reason("counted", &exit));
    Ok((
        CountedPass {
            launch: info,
            per_request: PerRequest::of(&m.attribution),
            load: m.report,
            attribution: m.attribution,
            exit,
        },
        reasons,
    ))
}

/// Every exact per-request counter of the case's counted pass, by name
/// (none without one).
pub fn counted_metrics(r: &CaseResult) -> BTreeMap<String, f64> {
    match &r.counted {
        Some(c) => crate::metrics::counters(&c.per_request, &c.attribution),
        None => BTreeMap::new(),
    }
}
