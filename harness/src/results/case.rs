//! A `cases.jsonl` line read back: the fields of `case::CaseResult` that
//! `rig compare` and report.html read, as typed views.
//!
//! In: a case line parsed as JSON (by any version of rig). Out: a
//! [`CaseLine`] borrowing its strings from that JSON. Every field is
//! optional: a line of an older rig, or of a case that ran no such pass or
//! family, reads as `None` (or empty) exactly where the field is absent,
//! and a field written as `null` as its default. Fields a reader only
//! passes through to the page stay JSON ([`Value`]), absent as `null`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::metrics::PerRequest;

/// One case line.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct CaseLine<'a> {
    #[serde(borrow)]
    pub id: Option<&'a str>,
    #[serde(borrow)]
    pub suite: Option<&'a str>,
    #[serde(borrow)]
    pub target_name: Option<&'a str>,
    #[serde(borrow)]
    pub protocol: Option<&'a str>,
    #[serde(borrow)]
    pub path: Option<&'a str>,
    /// The case's kind (`http`, `memory`, `memslope`...).
    #[serde(borrow)]
    pub kind: Option<&'a str>,
    pub keepalive: Option<bool>,
    /// An HTTP, soak or recovery case's load; `null` for other kinds.
    #[serde(borrow)]
    pub load: Option<LoadSetting<'a>>,
    /// `null` for a case without connections of its own.
    pub topology: Option<Topology>,
    #[serde(borrow)]
    pub status: Option<&'a str>,
    #[serde(borrow)]
    pub reasons: Option<Vec<&'a str>>,
    pub memory: Option<Memory>,
    pub memslope: Option<MemSlope>,
    pub soak: Option<Soak>,
    #[serde(borrow)]
    pub live: Option<Live<'a>>,
    #[serde(borrow)]
    pub clean: Option<Clean<'a>>,
    #[serde(borrow)]
    pub counted: Option<Counted<'a>>,
}

/// A field written as `null` reads as absent: its default. (A line
/// whose pass lacks a part has it `null`, report.html's cut lines too.)
fn or_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

impl<'a> CaseLine<'a> {
    /// The view of `v`; an error names the field of the wrong type.
    pub fn of(v: &'a Value) -> serde_json::Result<CaseLine<'a>> {
        CaseLine::deserialize(v)
    }

    /// The executable's SHA-256 as the clean pass, else the counted one,
    /// launched it.
    pub fn exe_sha256(&self) -> Option<&'a str> {
        let clean = self.clean.as_ref().and_then(|c| c.launch.exe_sha256);
        clean.or_else(|| self.counted.as_ref().and_then(|c| c.launch.exe_sha256))
    }

    /// The launches of the clean and the counted pass, by pass name.
    pub fn launches(&self) -> impl Iterator<Item = (&'static str, &Launch<'a>)> {
        let clean = self.clean.as_ref().map(|c| ("clean", &c.launch));
        let counted = self.counted.as_ref().map(|c| ("counted", &c.launch));
        clean.into_iter().chain(counted)
    }
}

/// The case's load setting (`scenario::LoadSpec`).
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct LoadSetting<'a> {
    #[serde(borrow)]
    pub kind: Option<&'a str>,
    pub rate: Option<f64>,
}

#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct Topology {
    pub connections: Option<u64>,
    pub streams: Option<u64>,
}

/// `case::LaunchInfo`.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct Launch<'a> {
    pub pid: Value,
    #[serde(borrow)]
    pub exe_sha256: Option<&'a str>,
    #[serde(borrow)]
    pub arm_proof: Option<ArmProof<'a>>,
}

/// `launch::identity::ArmProof`.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct ArmProof<'a> {
    #[serde(borrow, deserialize_with = "or_default")]
    pub verified: Vec<Object<'a>>,
    pub processes: Value,
}

/// A file by path and hash (`launch::start::ObjectFact`, a
/// manifest's expected object).
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct Object<'a> {
    #[serde(borrow)]
    pub path: Option<&'a str>,
    #[serde(borrow)]
    pub sha256: Option<&'a str>,
}

/// `case::CleanPass`.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct Clean<'a> {
    #[serde(borrow, deserialize_with = "or_default")]
    pub launch: Launch<'a>,
    #[serde(borrow, deserialize_with = "or_default")]
    pub load: Load<'a>,
    #[serde(deserialize_with = "or_default")]
    pub server: Server,
    pub client_us_per_request: Option<f64>,
    pub generator_limited: Value,
    /// The 50 ms samples.
    pub series: Option<Vec<Sample>>,
}

/// `sample::Point`.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct Sample {
    pub t_ms: Option<f64>,
    pub rss_kib: Option<f64>,
    pub pss_kib: Option<f64>,
    pub cg_mem_bytes: Option<f64>,
    pub cpu_ns: Option<f64>,
}

/// `load::LoadReport`.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct Load<'a> {
    pub succeeded: Option<u64>,
    pub errors: Value,
    pub scheduled: Value,
    pub on_time: Value,
    pub late: Value,
    pub generator_late: Value,
    pub expired: Value,
    pub rps: Option<f64>,
    #[serde(deserialize_with = "or_default")]
    pub latency: Percentiles,
    #[serde(deserialize_with = "or_default")]
    pub queue_delay: Percentiles,
    #[serde(borrow)]
    pub histogram: Option<Histograms<'a>>,
}

/// `load::EncodedHists`: each histogram serialized.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct Histograms<'a> {
    #[serde(borrow)]
    pub latency: Option<&'a str>,
    #[serde(borrow)]
    pub request_latency: Option<&'a str>,
    #[serde(borrow)]
    pub dispatch_lag: Option<&'a str>,
}

/// `load::hist::HistSummary`'s percentiles, in ns.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct Percentiles {
    pub p50_ns: Option<f64>,
    pub p90_ns: Option<f64>,
    pub p99_ns: Option<f64>,
    pub p999_ns: Option<f64>,
}

/// `case::ServerUsage`.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct Server {
    pub cpu_us_per_request: Option<f64>,
    pub rss_max_kib: Option<f64>,
    pub pss_max_kib: Option<f64>,
}

/// `case::MemoryPass`.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct Memory {
    pub proc: Value,
}

impl Memory {
    /// The idle RSS (`proc.rss_kib`).
    pub fn rss_kib(&self) -> Option<f64> {
        #[derive(Deserialize)]
        struct Proc {
            rss_kib: Option<f64>,
        }
        Proc::deserialize(&self.proc).ok()?.rss_kib
    }
}

/// `case::MemSlopePass`: its points as connections were opened and
/// closed, the RSS line over them, and the live heap.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct MemSlope {
    #[serde(deserialize_with = "or_default")]
    pub opened: Vec<ConnPoint>,
    #[serde(deserialize_with = "or_default")]
    pub closed: Vec<ConnPoint>,
    pub rss: Option<LineFit>,
    pub live_heap: Option<LiveHeap>,
}

/// `case::SoakPass`.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct Soak {
    #[serde(deserialize_with = "or_default")]
    pub intervals: Vec<SoakInterval>,
    pub rss_per_request: Option<LineFit>,
}

/// `case::SoakInterval`.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct SoakInterval {
    pub end_ms: Option<f64>,
    pub served: Option<f64>,
    pub p50_ns: Option<f64>,
    pub p99_ns: Option<f64>,
    pub p999_ns: Option<f64>,
    pub rss_bytes: Option<f64>,
}

/// `case::LivePass`.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct Live<'a> {
    #[serde(borrow)]
    pub endpoint: Option<&'a str>,
    pub ready_fds: Option<f64>,
    #[serde(deserialize_with = "or_default")]
    pub cycles: Vec<LiveCycle>,
}

/// `case::LiveCycle`.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct LiveCycle {
    pub cycle: Option<f64>,
    #[serde(deserialize_with = "or_default")]
    pub phases: Vec<PhaseSample>,
}

/// `case::PhaseSample`.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct PhaseSample {
    pub rss_max_bytes: Option<f64>,
    pub pss_max_bytes: Option<f64>,
    pub fds_max: Option<f64>,
}

/// `case::liveheap::LiveHeapFit`.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct LiveHeap {
    pub fit: Option<LineFit>,
    pub after_close: Option<LivePoint>,
    #[serde(deserialize_with = "or_default")]
    pub sites: Vec<LiveSite>,
    #[serde(deserialize_with = "or_default")]
    pub user_sites: Vec<LiveSite>,
    pub unmatched_frees: Value,
    pub dropped: Value,
    pub complete: Value,
}

/// `stats::fit::LineFit`.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct LineFit {
    pub slope: Option<f64>,
    pub intercept: Option<f64>,
    pub r2: Option<f64>,
}

/// `case::liveheap::LivePoint`.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct LivePoint {
    pub bytes: Value,
    pub blocks: Value,
}

/// `case::liveheap::LiveSiteFit`.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct LiveSite {
    pub label: Value,
    pub kind: Value,
    pub bytes_per_connection: Option<f64>,
    pub blocks_per_connection: Option<f64>,
    pub bytes_after_close: Option<u64>,
}

/// `case::ConnPoint`.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct ConnPoint {
    pub connections: Option<f64>,
    pub rss_bytes: Option<f64>,
    pub pss_bytes: Option<f64>,
    pub cgroup_bytes: Option<f64>,
}

/// `case::CountedPass`. On report.html's cases, `attribution` is cut
/// to what the page shows and `top_sites` is the page's own.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct Counted<'a> {
    #[serde(borrow, deserialize_with = "or_default")]
    pub launch: Launch<'a>,
    #[serde(borrow, deserialize_with = "or_default")]
    pub load: Load<'a>,
    #[serde(deserialize_with = "or_default")]
    pub per_request: PerRequest,
    #[serde(borrow, deserialize_with = "or_default")]
    pub attribution: Attribution<'a>,
    pub top_sites: Value,
}

impl Counted<'_> {
    /// The requests the counted window's totals are divided by: the
    /// window's, else the load's; `None` for none.
    pub fn requests(&self) -> Option<u64> {
        let window = self.attribution.window.as_ref();
        window
            .and_then(|w| w.requests)
            .or(self.load.succeeded)
            .filter(|n| *n > 0)
    }
}

/// `report::Attribution`.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct Attribution<'a> {
    pub complete: Value,
    pub window: Option<Window>,
    pub losses: Value,
    pub processes: Value,
    #[serde(borrow, deserialize_with = "or_default")]
    pub alloc: Vec<AllocRow<'a>>,
    #[serde(borrow, deserialize_with = "or_default")]
    pub copy: Vec<SiteRow<'a>>,
    #[serde(borrow, deserialize_with = "or_default")]
    pub syscalls: Vec<SyscallRow<'a>>,
    #[serde(borrow, deserialize_with = "or_default")]
    pub faults: Vec<FaultRow<'a>>,
    #[serde(borrow, deserialize_with = "or_default")]
    pub user: Vec<UserProbeRow<'a>>,
}

/// `report::user::UserProbeRow`.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct UserProbeRow<'a> {
    #[serde(borrow)]
    pub probe: Option<&'a str>,
    pub arg: Option<u8>,
    pub calls: Option<u64>,
    pub arg_sum: Option<i128>,
    #[serde(borrow, deserialize_with = "or_default")]
    pub sites: Vec<UserSiteRow<'a>>,
    /// `#S[/L]`: the string argument its calls are counted by.
    #[serde(deserialize_with = "or_default")]
    pub by: Option<UserBy>,
    #[serde(borrow, deserialize_with = "or_default")]
    pub by_value: Vec<UserValueRow<'a>>,
}

/// `probe::user::ByArg`.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct UserBy {
    pub arg: u8,
    pub len: Option<u8>,
}

/// `report::user::UserValueRow` (the string may hold escapes: owned).
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct UserValueRow<'a> {
    pub value: String,
    pub calls: Option<u64>,
    pub arg_sum: Option<i128>,
    /// Where its calls were made, most first.
    #[serde(borrow, deserialize_with = "or_default")]
    pub sites: Vec<UserSiteRow<'a>>,
}

/// `report::user::UserSiteRow`.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct UserSiteRow<'a> {
    #[serde(borrow, deserialize_with = "or_default")]
    pub site: Site<'a>,
    pub calls: Option<u64>,
    pub arg_sum: Option<i128>,
}

/// `report::WindowInfo`.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct Window {
    pub requests: Option<u64>,
}

/// A copy row (`report::CopyRow`).
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct SiteRow<'a> {
    #[serde(borrow)]
    pub kind: Option<&'a str>,
    #[serde(borrow, deserialize_with = "or_default")]
    pub site: Site<'a>,
    pub calls: Option<u64>,
    pub bytes: Option<u64>,
}

/// `report::AllocRow`: a site row and its allocator layer.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct AllocRow<'a> {
    #[serde(borrow)]
    pub kind: Option<&'a str>,
    #[serde(borrow)]
    pub allocator: Option<&'a str>,
    #[serde(borrow, deserialize_with = "or_default")]
    pub site: Site<'a>,
    pub calls: Option<u64>,
    pub bytes: Option<u64>,
}

/// `report::SyscallRow`.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct SyscallRow<'a> {
    #[serde(borrow)]
    pub name: Option<&'a str>,
    pub count: Option<u64>,
}

/// `report::FaultRow`.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct FaultRow<'a> {
    #[serde(borrow, deserialize_with = "or_default")]
    pub site: Site<'a>,
    pub count: Option<u64>,
}

/// `symbolize::Site`, as far as a reader names it.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct Site<'a> {
    #[serde(borrow)]
    pub function: Option<&'a str>,
    #[serde(borrow)]
    pub module: Option<&'a str>,
    pub module_offset: Option<u64>,
    #[serde(borrow)]
    pub file: Option<&'a str>,
    pub line: Option<u64>,
}
