//! Target specs: one TOML file per server under test.
//!
//! In: a `config/targets/*.toml` file. Out: a validated [`TargetSpec`] that the
//! launcher turns into a command line ([`TargetSpec::command`]).
//!
//! ```toml
//! name = "peer"
//! argv = ["{rig_peer}", "--port", "{port}", "--workers", "1"]  # never a shell string
//! env = { RUST_LOG = "warn" }      # optional
//! cwd = "."                        # optional; default: the spec file's directory
//! port = "argv"                    # or { env = "PORT" } or { fixed = 43211 }
//! ready = { tcp = true }           # or { stdout = "READY" } or { http = "/plain" }
//! ready_timeout_ms = 10000         # optional; default 10000
//!
//! [protocols]                      # what the load may speak on the one port
//! h1 = true
//! h2c = true
//! # h2_tls = { ca = "../../fixtures/tls/ca.pem", server_name = "localhost" }
//! # h2_tls = { server_name = "localhost", insecure = true }  # any certificate
//! # h3 = { ca = "../../fixtures/tls/ca.pem", server_name = "localhost" }  # UDP, same port
//!
//! [[endpoints]]
//! path = "/plain"
//! status = 200
//! content_type = "text/plain"
//! body = { literal = "hello" }     # or { file = "..." } or { sha256 = "64 hex" }
//! ```
//!
//! Rules, and why:
//! - **Relative paths are relative to the spec file's directory** (`cwd`,
//!   `argv[0]` when it contains a `/`, body files, the TLS CA), so a spec
//!   means the same thing whatever directory rig is started from. Other argv
//!   elements are passed as written; they are resolved by the target against
//!   its `cwd`, which defaults to the spec's directory for the same reason.
//! - **argv is a list, never a shell string**: no quoting bugs, and the pid
//!   rig starts is the server itself, not a shell in front of it (a spec may
//!   still say `["sh", "-c", "..."]` explicitly).
//! - Placeholders, in argv, env values and cwd: `{port}` (the port rig picked
//!   or the fixed one), `{calib_server}` (the calibration server built by
//!   `rig-fixtures`), `{rig_peer}` (`$RIG_PEER`, else the `rig-peer` binary next to the
//!   running rig executable), `{spec_dir}`, and the A/B fixtures of `rig-fixtures`
//!   (see [`fixture_placeholder`]): `{calib_dyn}`, `{calib_dyn_runpath}`,
//!   `{calibwork_a}` … `{calibwork_e}` (directories holding the variants of
//!   `libcalibwork.so`, for `LD_LIBRARY_PATH`). Any other `{word}` is an
//!   error, so a typo never reaches the target as a literal.
//! - `port`: `"argv"` — rig picks a free loopback port and substitutes it for
//!   `{port}` (which must then appear somewhere); `{ env = "PORT" }` — the same
//!   port is also exported in that variable; `{ fixed = N }` — the target
//!   always listens on N (rig checks before launch that nobody holds it).
//! - `[protocols]`: a target speaks on ONE port. `h1`/`h2c` say which
//!   cleartext protocols the load may use; `h2_tls` says the port is TLS
//!   (ALPN picks h2 or http/1.1) and gives the CA and server name to verify;
//!   `insecure = true` accepts any certificate (a self-signed one that is its
//!   own CA included) and is said in every report of a case that used it.
//!   `h3` says HTTP/3 is served over QUIC on the UDP port of the same
//!   number (as 443/tcp and 443/udp pair up), with its CA and server name;
//!   with `port = "argv"` rig picks a port free for both TCP and UDP.
//! - `tls_variant = "peer-tls.toml"`: the same implementation serving TLS
//!   (a spec whose `[protocols]` has `h2_tls`); a run's TLS cases launch it,
//!   so one `--target` covers cleartext and TLS.
//! - Long-lived connections (the `live` suite), also in `[protocols]`:
//!   `tcp_echo = true` (a connection that does not open with an HTTP
//!   request gets every byte back), `ws = "/ws"` (WebSocket echo behind an
//!   HTTP/1.1 upgrade on that path), `sse = { path = "/sse?interval_ms=200",
//!   interval_ms = 200 }` (`text/event-stream`: an event at once, then one
//!   every `interval_ms`, which the server is configured with: by the path's
//!   query here).
//! - `live_variant = "peer-live.toml"`: the same implementation serving
//!   those (rig-peer's `--live` mode, kept apart so that its default
//!   request path is not changed by them); a run's live cases launch it.
//! - `[[files]] template = "nginx/nginx.conf"  path = "nginx.conf"`: before
//!   each launch, rig renders the template (relative to the spec's
//!   directory; the same placeholders, plus `{run_dir}`) into a fresh
//!   directory of that launch, `{run_dir}`, removed when the target stops.
//!   For servers configured by file (nginx's `listen {port};`).
//! - `wrappers = ["ngx_alloc", "ngx_p*"]`: functions that wrap allocation,
//!   copying or syscalls in this server, skipped (like the built-in set of
//!   allocators and standard libraries) when rig names the *user site* of a
//!   stack: a prefix, `*` at the end the same, `*` at the start matches
//!   anywhere in the name.
//! - `usdt = ["postgresql:transaction__start", "postgresql:query__*"]` and
//!   `func = ["ngx_http_core_run_phases"]`: probes of the server's own code
//!   (USDT markers, functions), spelt as `rig attach --usdt`/`--func` take
//!   them, counted per request in every counted pass of `rig run`, `rig
//!   gate` and `rig ab`; `func_time = true` adds the time inside each
//!   function (`--func-time`); `alloc_func = ["arena_alloc@0"]` and
//!   `free_func = ["arena_reset"]` declare application allocators, counted
//!   by the alloc probes (`--alloc-func`, `--free-func`); `interp_calls =
//!   ["python"]` counts every call of an interpreted function by function
//!   (`--interp-calls`).
//! - Unknown keys are errors (a misspelt `redy` must not silently mean
//!   "no readiness check").

mod command;
mod extends;
mod parse;
mod raw;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;

use extends::resolve as resolve_extends;
use parse::{parse, program_error};

/// Errors loading a spec.
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    #[error("cannot read target spec {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("invalid target spec:\n{}", render_errors(.0))]
    Invalid(Vec<ConfigError>),
    #[error("target spec {path}: placeholder {{{placeholder}}}: {why}")]
    Placeholder {
        path: PathBuf,
        placeholder: String,
        why: String,
    },
}

fn render_errors(errors: &[ConfigError]) -> String {
    errors
        .iter()
        .map(|e| e.to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

/// One problem found in a spec file, located at `line:col` (1-based).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub path: PathBuf,
    pub line: usize,
    pub col: usize,
    pub message: String,
    /// The offending source line (without its newline).
    pub source_line: String,
    pub warning: bool,
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}:{}:{}: {}{}",
            self.path.display(),
            self.line,
            self.col,
            if self.warning { "warning: " } else { "" },
            self.message
        )?;
        if !self.source_line.is_empty() {
            let width = self.line.to_string().len();
            write!(
                f,
                "\n{:>width$} | {}\n{:>width$} | {:>col$}",
                self.line,
                self.source_line,
                "",
                "^",
                col = self.col
            )?;
        }
        Ok(())
    }
}

/// How `{port}` reaches the target.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum PortPassing {
    /// Substituted for `{port}` in argv (rig picks a free port).
    Argv,
    /// Exported in this environment variable (and substituted for `{port}`).
    Env(String),
    /// The target always listens on this port.
    Fixed(u16),
}

/// When the target counts as ready.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum Ready {
    /// A TCP connect to the port succeeds.
    Tcp,
    /// A stdout line contains this text.
    Stdout(String),
    /// `GET <path>` answers with any status below 500.
    Http(String),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TlsSpec {
    /// Absolute (resolved against the spec's directory). Required unless
    /// `insecure`.
    pub ca: Option<PathBuf>,
    pub server_name: String,
    /// Accept any server certificate (handshake signatures still checked).
    pub insecure: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Protocols {
    pub h1: bool,
    pub h2c: bool,
    pub h2_tls: Option<TlsSpec>,
    /// HTTP/3 over QUIC on the UDP port of the same number (as servers
    /// pair 443/tcp with 443/udp).
    pub h3: Option<TlsSpec>,
    /// Raw TCP echo on the port.
    pub tcp_echo: bool,
    /// The path of a WebSocket echo.
    pub ws: Option<String>,
    pub sse: Option<SseSpec>,
}

impl Protocols {
    /// Whether anything is served over TCP (everything but HTTP/3).
    pub fn tcp(&self) -> bool {
        self.h1
            || self.h2c
            || self.h2_tls.is_some()
            || self.tcp_echo
            || self.ws.is_some()
            || self.sse.is_some()
    }
}

/// A server-sent event stream: its path (with whatever query configures
/// it) and the heartbeat interval the server was configured with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SseSpec {
    pub path: String,
    pub interval_ms: u64,
}

/// What a response body must be.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum Body {
    Literal(String),
    /// Absolute (resolved against the spec's directory).
    File(PathBuf),
    /// Lower-case hex SHA-256 of the body.
    Sha256(String),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Endpoint {
    pub method: String,
    pub path: String,
    pub status: u16,
    pub content_type: Option<String>,
    pub body: Option<Body>,
}

/// A validated target spec. Paths are absolute.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TargetSpec {
    pub name: String,
    /// argv as written (placeholders unresolved; see [`TargetSpec::command`]).
    pub argv: Vec<String>,
    pub env: BTreeMap<String, String>,
    /// As written; resolved by [`TargetSpec::command`].
    pub cwd: Option<String>,
    pub port: PortPassing,
    pub ready: Ready,
    pub ready_timeout: Duration,
    pub protocols: Protocols,
    pub endpoints: Vec<Endpoint>,
    /// The same implementation with a TLS listener (another spec file):
    /// cases that need TLS launch that one.
    pub tls_variant: Option<PathBuf>,
    /// The same implementation serving the live endpoints (WebSocket, SSE,
    /// TCP echo): a run's live cases launch that one.
    pub live_variant: Option<PathBuf>,
    /// Files rendered into the launch's `{run_dir}` before it starts.
    pub files: Vec<FileTemplate>,
    /// Extra wrapper patterns for naming user sites (`wrappers = [...]`).
    pub wrappers: Vec<String>,
    /// Probes of the server's own code counted in every counted pass, as
    /// `rig attach --usdt`/`--func` spell them (`usdt = [...]`, `func =
    /// [...]`); their form is checked when a command loads the spec.
    pub usdt: Vec<String>,
    pub func: Vec<String>,
    /// `func_time = true`: the time inside each `func` too.
    pub func_time: bool,
    /// Application allocators counted by the alloc family (`alloc_func =
    /// ["arena_alloc@0"]`, `free_func = [...]`), as `--alloc-func` and
    /// `--free-func` spell them.
    pub alloc_func: Vec<String>,
    pub free_func: Vec<String>,
    /// The languages whose interpreted calls are counted by function
    /// (`interp_calls = ["python"]`), as `--interp-calls` spells them.
    pub interp_calls: Vec<String>,
    /// Run the target as this user (name or uid) and group (default: the
    /// user's primary group); `None`: as rig's user (root warns).
    pub user: Option<String>,
    pub group: Option<String>,
    /// The spec file (absolute).
    pub path: PathBuf,
    /// Its directory: base of every relative path in the spec.
    pub dir: PathBuf,
}

/// A config file a launch needs, rendered from a template.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FileTemplate {
    /// The template (absolute).
    pub template: PathBuf,
    /// Where it goes, relative to `{run_dir}`.
    pub path: String,
}

/// A command ready to spawn: everything resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedCommand {
    pub program: PathBuf,
    pub args: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub cwd: PathBuf,
}

/// Placeholders a spec may use.
pub const PLACEHOLDERS: &[&str] = &[
    "port",
    "calib_server",
    "rig_peer",
    "spec_dir",
    "run_dir",
    // A/B fixtures (fixture_placeholder):
    "calib_dyn",
    "calib_dyn_runpath",
    "calibwork_a",
    "calibwork_b",
    "calibwork_c",
    "calibwork_d",
    "calibwork_e",
    "stall_server",
    "conn_server",
];

/// The A/B calibration fixtures of `rig-fixtures` (fixtures/calib/COSTS.md,
/// "A/B fixtures"): the `calib_dyn` binaries and the directory of each
/// `libcalibwork.so` variant. `None` for any other placeholder.
pub fn fixture_placeholder(name: &str) -> Option<PathBuf> {
    let p = match name {
        "calib_dyn" => rig_fixtures::calib_dyn(),
        "calib_dyn_runpath" => rig_fixtures::calib_dyn_runpath(),
        "calibwork_a" => rig_fixtures::calibwork_dir('a'),
        "calibwork_b" => rig_fixtures::calibwork_dir('b'),
        "calibwork_c" => rig_fixtures::calibwork_dir('c'),
        "calibwork_d" => rig_fixtures::calibwork_dir('d'),
        "calibwork_e" => rig_fixtures::calibwork_dir('e'),
        "stall_server" => rig_fixtures::stall_server(),
        "conn_server" => rig_fixtures::conn_server(),
        _ => return None,
    };
    Some(p.to_path_buf())
}

/// `{word}` occurrences in `s` (word = `[A-Za-z0-9_]+`), with byte offsets.
fn placeholders(s: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'{' {
            let rest = &s[i + 1..];
            let n = rest
                .bytes()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == b'_')
                .count();
            if n > 0 && rest.as_bytes().get(n) == Some(&b'}') {
                out.push((i, &rest[..n]));
                i += n + 2;
                continue;
            }
        }
        i += 1;
    }
    out
}

/// Make `p` absolute against `dir` (the spec file's directory).
fn under(dir: &Path, p: &str) -> PathBuf {
    let p = Path::new(p);
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        dir.join(p)
    }
}

fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

/// Check a spec file: `Ok(summary)` (warnings included in it) or every error
/// found, each with `file:line:col` and the offending line.
pub fn check_config(path: impl AsRef<Path>) -> Result<String, Vec<ConfigError>> {
    let path = absolute(path.as_ref());
    let text = crate::fsutil::read_config(&path).map_err(|e| {
        vec![ConfigError {
            path: path.clone(),
            line: 0,
            col: 0,
            message: format!("cannot read: {e}"),
            source_line: String::new(),
            warning: false,
        }]
    })?;
    // An extending spec is checked as merged; each error is then put back
    // on the line of the file that holds its key (see `relocate`).
    let own_text = text.clone();
    let text = match resolve_extends(&path, &text, 0) {
        Ok(t) => t,
        Err(SpecError::Invalid(errors)) => return Err(errors),
        Err(e) => {
            return Err(vec![ConfigError {
                path: path.clone(),
                line: 1,
                col: 1,
                message: e.to_string(),
                source_line: String::new(),
                warning: false,
            }])
        }
    };
    let (spec, mut diags) = parse(&path, &text);
    diags.extend(spec.as_ref().and_then(|s| program_error(&path, &text, s)));
    if text != own_text {
        diags = diags
            .into_iter()
            .map(|d| extends::relocate(d, &own_text))
            .collect();
    }
    let (warnings, errors): (Vec<_>, Vec<_>) = diags.into_iter().partition(|d| d.warning);
    if !errors.is_empty() {
        return Err(errors.into_iter().chain(warnings).collect());
    }
    let spec = spec.expect("no errors means a spec");
    let mut s = spec.summary();
    for w in warnings {
        s.push('\n');
        s.push_str(&w.to_string());
    }
    Ok(s)
}

impl TargetSpec {
    /// The transports whose listener on the port must be the target's:
    /// TCP unless the spec serves HTTP/3 alone, and UDP as well when it
    /// serves HTTP/3.
    pub fn transports(&self) -> Vec<crate::launch::port::Transport> {
        use crate::launch::port::Transport;
        match (self.protocols.tcp(), self.protocols.h3.is_some()) {
            (false, true) => vec![Transport::Udp],
            (true, true) => vec![Transport::Tcp, Transport::Udp],
            _ => vec![Transport::Tcp],
        }
    }

    /// Read, parse and validate a spec file. Warnings are dropped (use
    /// [`check_config`] to see them).
    pub fn load(path: impl AsRef<Path>) -> Result<TargetSpec, SpecError> {
        let path = absolute(path.as_ref());
        let text = crate::fsutil::read_config(&path).map_err(|source| SpecError::Read {
            path: path.clone(),
            source,
        })?;
        let merged = resolve_extends(&path, &text, 0)?;
        let put_back = |errors: Vec<ConfigError>| {
            if merged == text {
                return errors;
            }
            errors
                .into_iter()
                .map(|d| extends::relocate(d, &text))
                .collect()
        };
        let spec = Self::from_text(&path, &merged).map_err(|e| match e {
            SpecError::Invalid(errors) => SpecError::Invalid(put_back(errors)),
            e => e,
        })?;
        match program_error(&path, &merged, &spec) {
            Some(e) => Err(SpecError::Invalid(put_back(vec![e]))),
            None => Ok(spec),
        }
    }

    /// Parse spec text as if it were the file `path`.
    pub fn from_text(path: &Path, text: &str) -> Result<TargetSpec, SpecError> {
        let (spec, diags) = parse(path, text);
        let errors: Vec<_> = diags.into_iter().filter(|d| !d.warning).collect();
        match (spec, errors.is_empty()) {
            (Some(s), true) => Ok(s),
            _ => Err(SpecError::Invalid(errors)),
        }
    }

    /// One paragraph for humans.
    pub fn summary(&self) -> String {
        let port = match &self.port {
            PortPassing::Argv => "free loopback port via {port}".to_string(),
            PortPassing::Env(v) => format!("free loopback port via ${v}"),
            PortPassing::Fixed(p) => format!("fixed port {p}"),
        };
        let ready = match &self.ready {
            Ready::Tcp => "tcp connect".to_string(),
            Ready::Stdout(s) => format!("stdout line containing {s:?}"),
            Ready::Http(p) => format!("GET {p} answering < 500"),
        };
        let mut protos = Vec::new();
        if self.protocols.h1 {
            protos.push("h1".to_string());
        }
        if self.protocols.h2c {
            protos.push("h2c".to_string());
        }
        if let Some(t) = &self.protocols.h2_tls {
            protos.push(match t.insecure {
                false => format!("h2 over TLS ({})", t.server_name),
                true => format!(
                    "h2 over TLS ({}, certificate NOT verified: insecure)",
                    t.server_name
                ),
            });
        }
        if let Some(t) = &self.protocols.h3 {
            protos.push(match t.insecure {
                false => format!("h3 over QUIC, UDP ({})", t.server_name),
                true => format!(
                    "h3 over QUIC, UDP ({}, certificate NOT verified: insecure)",
                    t.server_name
                ),
            });
        }
        if self.protocols.tcp_echo {
            protos.push("TCP echo".to_string());
        }
        if let Some(p) = &self.protocols.ws {
            protos.push(format!("WebSocket {p}"));
        }
        if let Some(s) = &self.protocols.sse {
            protos.push(format!("SSE {} (every {} ms)", s.path, s.interval_ms));
        }
        format!(
            "{}: {} ({}); ready: {} within {} ms; protocols: {}; {} endpoint(s)",
            self.name,
            self.argv.join(" "),
            port,
            ready,
            self.ready_timeout.as_millis(),
            if protos.is_empty() {
                "none listed".into()
            } else {
                protos.join(", ")
            },
            self.endpoints.len()
        )
    }
}

/// Environment variable naming the rig-peer binary `{rig_peer}` stands for.
pub const RIG_PEER_ENV: &str = "RIG_PEER";

/// The `rig-peer` binary: `$RIG_PEER` when set, else the one next to the
/// running executable. Test binaries live one level down
/// (`target/debug/deps/`), so the parent of `deps` is tried too.
///
/// Why `$RIG_PEER`: which rig-peer sits next to rig depends on the last cargo
/// command that built it. Cargo unifies features across the packages of one
/// invocation, so `cargo test --workspace` builds rig-peer with hyper's
/// `client` feature (its dev-dependencies) and rustls' `logging` (rig's),
/// `cargo build -p rig-peer` without them — and hyper's `ParseContext` is 8
/// bytes larger with `client`, so `parse_headers` copies 72 B per request
/// instead of 64. A gate names the exact binary it measured.
pub fn rig_peer() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os(RIG_PEER_ENV) {
        // Absolute: the target runs in its spec's directory, not rig's.
        let p =
            std::path::absolute(PathBuf::from(p)).map_err(|e| format!("{RIG_PEER_ENV}: {e}"))?;
        return if p.is_file() {
            Ok(p)
        } else {
            Err(format!(
                "{RIG_PEER_ENV}={} is not a file; point it at a rig-peer binary or unset it",
                p.display()
            ))
        };
    }
    let exe =
        std::env::current_exe().map_err(|e| format!("cannot find the rig executable: {e}"))?;
    let dir = exe.parent().unwrap_or(Path::new("/"));
    let mut tried = vec![dir.join("rig-peer")];
    if dir.file_name().is_some_and(|n| n == "deps") {
        if let Some(up) = dir.parent() {
            tried.push(up.join("rig-peer"));
        }
    }
    tried.iter().find(|p| p.is_file()).cloned().ok_or_else(|| {
        format!(
            "no rig-peer binary at {}; build it (`cargo build -p rig-peer`, same profile as rig) \
             or set {RIG_PEER_ENV}",
            tried
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(" or ")
        )
    })
}
