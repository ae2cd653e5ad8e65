//! A target spec as parsed, before validation: every value a message may
//! point at keeps its span in the file.

use std::collections::BTreeMap;

use serde::Deserialize;
use toml::Spanned;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSpec {
    pub(super) name: Spanned<String>,
    pub(super) argv: Spanned<Vec<Spanned<String>>>,
    #[serde(default)]
    pub(super) env: BTreeMap<String, Spanned<String>>,
    pub(super) cwd: Option<Spanned<String>>,
    pub(super) port: Option<Spanned<RawPort>>,
    pub(super) ready: Spanned<RawReady>,
    pub(super) ready_timeout_ms: Option<Spanned<u64>>,
    #[serde(default)]
    pub(super) protocols: RawProtocols,
    #[serde(default)]
    pub(super) endpoints: Vec<RawEndpoint>,
    pub(super) tls_variant: Option<Spanned<String>>,
    pub(super) live_variant: Option<Spanned<String>>,
    #[serde(default)]
    pub(super) files: Vec<RawFile>,
    #[serde(default)]
    pub(super) wrappers: Vec<String>,
    #[serde(default)]
    pub(super) usdt: Vec<String>,
    #[serde(default)]
    pub(super) func: Vec<String>,
    #[serde(default)]
    pub(super) func_time: bool,
    #[serde(default)]
    pub(super) alloc_func: Vec<String>,
    #[serde(default)]
    pub(super) free_func: Vec<String>,
    #[serde(default)]
    pub(super) interp_calls: Vec<String>,
    pub(super) user: Option<Spanned<String>>,
    pub(super) group: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawFile {
    pub(super) template: Spanned<String>,
    pub(super) path: Spanned<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "lowercase", deny_unknown_fields)]
pub(super) enum RawPort {
    Argv,
    Env(String),
    Fixed(u16),
}

#[derive(Deserialize)]
#[serde(rename_all = "lowercase", deny_unknown_fields)]
pub(super) enum RawReady {
    Tcp(bool),
    Stdout(String),
    Http(String),
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawProtocols {
    #[serde(default)]
    pub(super) h1: bool,
    #[serde(default)]
    pub(super) h2c: bool,
    pub(super) h2_tls: Option<Spanned<RawTls>>,
    pub(super) h3: Option<Spanned<RawTls>>,
    #[serde(default)]
    pub(super) tcp_echo: bool,
    pub(super) ws: Option<Spanned<String>>,
    pub(super) sse: Option<Spanned<RawSse>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSse {
    pub(super) path: String,
    pub(super) interval_ms: u64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTls {
    pub(super) ca: Option<Spanned<String>>,
    pub(super) server_name: String,
    #[serde(default)]
    pub(super) insecure: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawEndpoint {
    pub(super) method: Option<String>,
    pub(super) path: Spanned<String>,
    pub(super) status: Spanned<i64>,
    pub(super) content_type: Option<String>,
    pub(super) body: Option<Spanned<RawBody>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "lowercase", deny_unknown_fields)]
pub(super) enum RawBody {
    Literal(String),
    File(String),
    Sha256(String),
}
