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
//! - `tls_variant = "peer-tls.toml"`: the same implementation serving TLS
//!   (a spec whose `[protocols]` has `h2_tls`); a run's TLS cases launch it,
//!   so one `--target` covers cleartext and TLS.
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
//! - Unknown keys are errors (a misspelt `redy` must not silently mean
//!   "no readiness check").

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use toml::Spanned;

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
    /// Files rendered into the launch's `{run_dir}` before it starts.
    pub files: Vec<FileTemplate>,
    /// Extra wrapper patterns for naming user sites (`wrappers = [...]`).
    pub wrappers: Vec<String>,
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

// ---------------------------------------------------------------------------
// Raw (as parsed, with spans) form.

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSpec {
    name: Spanned<String>,
    argv: Spanned<Vec<Spanned<String>>>,
    #[serde(default)]
    env: BTreeMap<String, Spanned<String>>,
    cwd: Option<Spanned<String>>,
    port: Option<Spanned<RawPort>>,
    ready: Spanned<RawReady>,
    ready_timeout_ms: Option<Spanned<u64>>,
    #[serde(default)]
    protocols: RawProtocols,
    #[serde(default)]
    endpoints: Vec<RawEndpoint>,
    tls_variant: Option<Spanned<String>>,
    #[serde(default)]
    files: Vec<RawFile>,
    #[serde(default)]
    wrappers: Vec<String>,
    user: Option<Spanned<String>>,
    group: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    template: Spanned<String>,
    path: Spanned<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "lowercase", deny_unknown_fields)]
enum RawPort {
    Argv,
    Env(String),
    Fixed(u16),
}

#[derive(Deserialize)]
#[serde(rename_all = "lowercase", deny_unknown_fields)]
enum RawReady {
    Tcp(bool),
    Stdout(String),
    Http(String),
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawProtocols {
    #[serde(default)]
    h1: bool,
    #[serde(default)]
    h2c: bool,
    h2_tls: Option<Spanned<RawTls>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTls {
    ca: Option<Spanned<String>>,
    server_name: String,
    #[serde(default)]
    insecure: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEndpoint {
    method: Option<String>,
    path: Spanned<String>,
    status: Spanned<i64>,
    content_type: Option<String>,
    body: Option<Spanned<RawBody>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "lowercase", deny_unknown_fields)]
enum RawBody {
    Literal(String),
    File(String),
    Sha256(String),
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

/// Collects located problems while validating one file.
struct Diag<'a> {
    path: &'a Path,
    text: &'a str,
    out: Vec<ConfigError>,
}

impl Diag<'_> {
    fn at(&mut self, span: Range<usize>, warning: bool, message: String) {
        let (line, col, source_line) = locate(self.text, span.start);
        self.out.push(ConfigError {
            path: self.path.to_path_buf(),
            line,
            col,
            message,
            source_line,
            warning,
        });
    }
    fn error(&mut self, span: Range<usize>, message: impl Into<String>) {
        self.at(span, false, message.into())
    }
    fn warn(&mut self, span: Range<usize>, message: impl Into<String>) {
        self.at(span, true, message.into())
    }
}

/// 1-based line and column (in characters) of byte `offset`, and that line.
fn locate(text: &str, offset: usize) -> (usize, usize, String) {
    let offset = offset.min(text.len());
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let col = text[line_start..offset].chars().count() + 1;
    let line_end = text[offset..].find('\n').map_or(text.len(), |i| offset + i);
    let source_line = text[line_start..line_end]
        .trim_end_matches('\r')
        .to_string();
    (line, col, source_line)
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

fn is_hex64(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|c| c.is_ascii_hexdigit())
}

/// Parse and check a spec's text. `path` is the file (used for locations and
/// as the base of relative paths). Errors and warnings come back together.
fn parse(path: &Path, text: &str) -> (Option<TargetSpec>, Vec<ConfigError>) {
    let mut d = Diag {
        path,
        text,
        out: Vec::new(),
    };
    let raw: RawSpec = match toml::from_str(text) {
        Ok(r) => r,
        Err(e) => {
            let span = e.span().unwrap_or(0..0);
            d.error(span, explain_toml(e.message()));
            return (None, d.out);
        }
    };
    let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();

    let name = raw.name.get_ref().trim().to_string();
    if name.is_empty() {
        d.error(raw.name.span(), "`name` is empty; give the target a name");
    }

    let port = match raw.port.as_ref().map(|p| (p.get_ref(), p.span())) {
        None | Some((RawPort::Argv, _)) => PortPassing::Argv,
        Some((RawPort::Env(v), span)) => {
            if v.is_empty() {
                d.error(
                    span,
                    "`port = { env = \"\" }`: name the variable, e.g. { env = \"PORT\" }",
                );
            }
            PortPassing::Env(v.clone())
        }
        Some((RawPort::Fixed(p), span)) => {
            if *p == 0 {
                d.error(
                    span,
                    "`port = { fixed = 0 }` means \"any port\": use port = \"argv\" and let rig pick one",
                );
            }
            PortPassing::Fixed(*p)
        }
    };

    let argv_span = raw.argv.span();
    let argv: Vec<String> = raw
        .argv
        .get_ref()
        .iter()
        .map(|a| a.get_ref().clone())
        .collect();
    if argv.is_empty() {
        d.error(
            argv_span.clone(),
            "`argv` is empty: give the program and its arguments as a list, e.g. argv = [\"{calib_server}\", \"--port\", \"{port}\"]",
        );
    } else if argv[0].trim().is_empty() {
        d.error(
            raw.argv.get_ref()[0].span(),
            "argv[0] is empty: it must name the program",
        );
    }
    let mut mentions_port = false;
    let mut check_placeholders = |d: &mut Diag, s: &Spanned<String>| {
        for (off, ph) in placeholders(s.get_ref()) {
            if ph == "port" {
                mentions_port = true;
            } else if !PLACEHOLDERS.contains(&ph) {
                // +1: the span starts at the opening quote.
                let at = s.span().start + 1 + off;
                d.error(
                    at..at,
                    format!(
                        "unknown placeholder {{{ph}}}; known: {}",
                        PLACEHOLDERS
                            .iter()
                            .map(|p| format!("{{{p}}}"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                );
            }
        }
    };
    for a in raw.argv.get_ref() {
        check_placeholders(&mut d, a);
    }
    for v in raw.env.values() {
        check_placeholders(&mut d, v);
    }
    if let Some(c) = &raw.cwd {
        check_placeholders(&mut d, c);
    }
    // A config-file server learns its port from a rendered template.
    let template_mentions_port = raw.files.iter().any(|f| {
        std::fs::read_to_string(under(&dir, f.template.get_ref()))
            .is_ok_and(|t| placeholders(&t).iter().any(|(_, p)| *p == "port"))
    });
    if port == PortPassing::Argv && !mentions_port && !template_mentions_port && !argv.is_empty() {
        d.error(
            argv_span,
            "port = \"argv\" but no argument or [[files]] template contains {port}: the target would \
             never learn the port rig picked; add e.g. \"--port\", \"{port}\" (or use port = { env = \"PORT\" })",
        );
    }
    if let PortPassing::Env(var) = &port {
        if raw.env.contains_key(var) {
            let span = raw.port.as_ref().map(|p| p.span()).unwrap_or(0..0);
            d.error(
                span,
                format!("`env` sets {var} itself, but port = {{ env = \"{var}\" }} makes rig set it; remove one"),
            );
        }
    }

    let ready = match raw.ready.get_ref() {
        RawReady::Tcp(true) => Ready::Tcp,
        RawReady::Tcp(false) => {
            d.error(
                raw.ready.span(),
                "ready = { tcp = false } disables the only readiness check it names; use tcp = true, \
                 { stdout = \"TEXT\" } or { http = \"/path\" }",
            );
            Ready::Tcp
        }
        RawReady::Stdout(s) => {
            if s.is_empty() {
                d.error(raw.ready.span(), "ready = { stdout = \"\" } matches any line; give the text the target prints when ready");
            }
            Ready::Stdout(s.clone())
        }
        RawReady::Http(p) => {
            if !p.starts_with('/') {
                d.error(
                    raw.ready.span(),
                    format!("ready = {{ http = {p:?} }}: the path must start with '/'"),
                );
            }
            Ready::Http(p.clone())
        }
    };

    let ready_timeout = match &raw.ready_timeout_ms {
        Some(t) if *t.get_ref() == 0 => {
            d.error(
                t.span(),
                "ready_timeout_ms = 0 gives the target no time at all; use e.g. 10000",
            );
            Duration::ZERO
        }
        Some(t) => Duration::from_millis(*t.get_ref()),
        None => Duration::from_millis(10_000),
    };

    let h2_tls = raw.protocols.h2_tls.as_ref().map(|spanned| {
        let t = spanned.get_ref();
        let ca = t.ca.as_ref().map(|c| {
            let ca = under(&dir, c.get_ref());
            if !ca.is_file() {
                d.error(
                    c.span(),
                    format!("h2_tls.ca: {} does not exist (relative paths are relative to the spec's directory {})", ca.display(), dir.display()),
                );
            }
            ca
        });
        if ca.is_none() && !t.insecure {
            d.error(
                spanned.span(),
                "h2_tls: give `ca = \"FILE\"` (the CA that signed the server's certificate), \
                 or `insecure = true` to accept any certificate",
            );
        }
        TlsSpec {
            ca,
            server_name: t.server_name.clone(),
            insecure: t.insecure,
        }
    });
    let protocols = Protocols {
        h1: raw.protocols.h1,
        h2c: raw.protocols.h2c,
        h2_tls,
    };
    let tls_variant = raw.tls_variant.as_ref().map(|t| {
        let p = under(&dir, t.get_ref());
        if !p.is_file() {
            d.error(
                t.span(),
                format!("tls_variant: {} does not exist (relative paths are relative to the spec's directory {})", p.display(), dir.display()),
            );
        }
        p
    });

    let mut files = Vec::new();
    for f in &raw.files {
        let template = under(&dir, f.template.get_ref());
        if !template.is_file() {
            d.error(
                f.template.span(),
                format!(
                    "template {} does not exist (relative paths are relative to the spec's directory {})",
                    template.display(),
                    dir.display()
                ),
            );
        }
        let rel = f.path.get_ref();
        if rel.is_empty()
            || rel.starts_with('/')
            || Path::new(rel)
                .components()
                .any(|c| c == std::path::Component::ParentDir)
        {
            d.error(
                f.path.span(),
                format!("files.path {rel:?} must be a relative path inside {{run_dir}} (no `..`)"),
            );
        }
        files.push(FileTemplate {
            template,
            path: rel.clone(),
        });
    }

    let mut endpoints = Vec::new();
    for e in &raw.endpoints {
        if !e.path.get_ref().starts_with('/') {
            d.error(
                e.path.span(),
                format!("endpoint path {:?} must start with '/'", e.path.get_ref()),
            );
        }
        let status = *e.status.get_ref();
        if !(100..=599).contains(&status) {
            d.error(
                e.status.span(),
                format!("status {status} is not an HTTP status; use 100..=599"),
            );
        }
        let body = e.body.as_ref().map(|b| match b.get_ref() {
            RawBody::Literal(s) => Body::Literal(s.clone()),
            RawBody::File(f) => {
                let p = under(&dir, f);
                if !p.is_file() {
                    d.error(
                        b.span(),
                        format!("body file {} does not exist (relative paths are relative to the spec's directory {})", p.display(), dir.display()),
                    );
                }
                Body::File(p)
            }
            RawBody::Sha256(h) => {
                if !is_hex64(h) {
                    d.error(
                        b.span(),
                        format!("sha256 must be 64 hex digits, got {} characters{}", h.len(),
                            if h.bytes().all(|c| c.is_ascii_hexdigit()) { "" } else { " (some not hex)" }),
                    );
                }
                Body::Sha256(h.to_ascii_lowercase())
            }
        });
        endpoints.push(Endpoint {
            method: e.method.clone().unwrap_or_else(|| "GET".into()),
            path: e.path.get_ref().clone(),
            status: status.clamp(0, u16::MAX as i64) as u16,
            content_type: e.content_type.clone(),
            body,
        });
    }
    if let Ready::Http(p) = &ready {
        if !endpoints.is_empty() && !endpoints.iter().any(|e| &e.path == p) {
            d.warn(
                raw.ready.span(),
                format!("ready path {p} is not among [[endpoints]]; readiness accepts any status < 500, so a 404 also counts"),
            );
        }
    }

    if let Some(u) = &raw.user {
        if let Err(why) = super::user::resolve(
            u.get_ref(),
            raw.group.as_ref().map(|g| g.get_ref().as_str()),
        ) {
            d.error(u.span(), why);
        }
    } else if let Some(g) = &raw.group {
        d.error(
            g.span(),
            "`group` needs `user` too: the target drops to both",
        );
    }
    let spec = TargetSpec {
        name,
        argv,
        env: raw
            .env
            .iter()
            .map(|(k, v)| (k.clone(), v.get_ref().clone()))
            .collect(),
        cwd: raw.cwd.as_ref().map(|c| c.get_ref().clone()),
        port,
        ready,
        ready_timeout,
        protocols,
        endpoints,
        tls_variant,
        files,
        wrappers: raw.wrappers.clone(),
        user: raw.user.as_ref().map(|u| u.get_ref().clone()),
        group: raw.group.as_ref().map(|g| g.get_ref().clone()),
        path: path.to_path_buf(),
        dir,
    };
    (Some(spec), d.out)
}

/// [`program_problem`] of a spec read from a file, located at its argv[0].
fn program_error(path: &Path, text: &str, spec: &TargetSpec) -> Option<ConfigError> {
    let prog = spec.argv.first()?;
    let message = program_problem(&spec.dir, prog)?;
    let off = text
        .find("argv")
        .and_then(|i| text[i..].find(prog.as_str()).map(|j| i + j))
        .unwrap_or(0);
    let (line, col, source_line) = locate(text, off);
    Some(ConfigError {
        path: path.to_path_buf(),
        line,
        col,
        message,
        source_line,
        warning: false,
    })
}

/// Why `argv[0]` cannot start, found before any launch: a path (relative to
/// the spec's directory) that is not an executable file, or a bare name not
/// in `PATH`. Placeholders resolve at launch and are not checked here.
fn program_problem(dir: &Path, prog: &str) -> Option<String> {
    use std::os::unix::fs::PermissionsExt;
    if prog.contains('{') {
        return None;
    }
    let executable = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if prog.contains('/') {
        let p = under(dir, prog);
        return match std::fs::metadata(&p) {
            Err(_) => Some(format!(
                "argv[0] {} does not exist (relative paths are relative to the spec's directory {})",
                p.display(),
                dir.display()
            )),
            Ok(_) if !executable(&p) => Some(format!(
                "argv[0] {} is not an executable file",
                p.display()
            )),
            Ok(_) => None,
        };
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    if std::env::split_paths(&path).any(|d| executable(&d.join(prog))) {
        None
    } else {
        Some(format!(
            "argv[0] `{prog}` is not an executable in PATH; give its path or install it"
        ))
    }
}

/// `extends = "base.toml"`: this spec is the base with this file's
/// top-level keys put over it (`env` merged key by key; `[protocols]` and
/// `[[endpoints]]` replaced whole when given). An A/B arm is typically its
/// base plus one env change (`LD_LIBRARY_PATH`, `LD_PRELOAD`) or another
/// `argv`. The merged spec is then parsed as if it were this file, so its
/// relative paths resolve against this file's directory.
fn resolve_extends(path: &Path, text: &str, depth: usize) -> Result<String, SpecError> {
    let mut table: toml::Table = match toml::from_str(text) {
        Ok(t) => t,
        Err(_) => return Ok(text.to_string()), // parse() reports it with its line
    };
    let Some(base) = table.remove("extends") else {
        return Ok(text.to_string());
    };
    let invalid = |message: String| {
        SpecError::Invalid(vec![ConfigError {
            path: path.to_path_buf(),
            line: 1,
            col: 1,
            message,
            source_line: String::new(),
            warning: false,
        }])
    };
    let base = base.as_str().ok_or_else(|| {
        invalid(
            "`extends` must be a string: the path of the base spec, relative to this spec's \
             directory or absolute, e.g. extends = \"calib.toml\""
                .into(),
        )
    })?;
    if depth > 8 {
        return Err(invalid(format!(
            "`extends = {base:?}`: more than 8 levels (a cycle?)"
        )));
    }
    let dir = path.parent().unwrap_or(Path::new("."));
    let base_path = under(dir, base);
    let base_text = std::fs::read_to_string(&base_path).map_err(|source| SpecError::Read {
        path: base_path.clone(),
        source,
    })?;
    let base_text = resolve_extends(&base_path, &base_text, depth + 1)?;
    let mut merged: toml::Table = toml::from_str(&base_text).map_err(|e| {
        invalid(format!(
            "extended spec {}: {}",
            base_path.display(),
            e.message()
        ))
    })?;
    for (k, v) in table {
        match (k.as_str(), merged.get_mut("env"), v) {
            ("env", Some(toml::Value::Table(base_env)), toml::Value::Table(env)) => {
                base_env.extend(env);
            }
            (_, _, v) => {
                merged.insert(k, v);
            }
        }
    }
    toml::to_string(&merged).map_err(|e| invalid(format!("merging {}: {e}", base_path.display())))
}

/// Add a hint to the toml crate's messages where the cause is rig's schema.
fn explain_toml(msg: &str) -> String {
    let msg = msg.trim_end();
    let hint = if msg.contains("unknown field") {
        Some("unknown keys are errors so that a misspelt key never silently means its default")
    } else if msg.contains("missing field") {
        Some("required: name, argv, ready")
    } else if msg.contains("unknown variant") && msg.contains("argv") {
        Some("port is \"argv\", { env = \"VAR\" } or { fixed = N }")
    } else if msg.contains("unknown variant") && msg.contains("stdout") {
        Some("ready is { tcp = true }, { stdout = \"TEXT\" } or { http = \"/path\" }")
    } else if msg.contains("unknown variant") && msg.contains("literal") {
        Some("body is { literal = \"...\" }, { file = \"path\" } or { sha256 = \"64 hex\" }")
    } else if msg.contains("invalid type: string") && msg.contains("sequence") {
        Some("argv is a list of strings, never a shell string: [\"prog\", \"--flag\", \"{port}\"]")
    } else {
        None
    };
    match hint {
        Some(h) => format!("{msg} ({h})"),
        None => msg.to_string(),
    }
}

fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

/// Check a spec file: `Ok(summary)` (warnings included in it) or every error
/// found, each with `file:line:col` and the offending line.
pub fn check_config(path: impl AsRef<Path>) -> Result<String, Vec<ConfigError>> {
    let path = absolute(path.as_ref());
    let text = std::fs::read_to_string(&path).map_err(|e| {
        vec![ConfigError {
            path: path.clone(),
            line: 0,
            col: 0,
            message: format!("cannot read: {e}"),
            source_line: String::new(),
            warning: false,
        }]
    })?;
    // An extending spec is checked as merged (its own errors keep their
    // line; errors in the merge point at line 1).
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
    /// Read, parse and validate a spec file. Warnings are dropped (use
    /// [`check_config`] to see them).
    pub fn load(path: impl AsRef<Path>) -> Result<TargetSpec, SpecError> {
        let path = absolute(path.as_ref());
        let text = std::fs::read_to_string(&path).map_err(|source| SpecError::Read {
            path: path.clone(),
            source,
        })?;
        let text = resolve_extends(&path, &text, 0)?;
        let spec = Self::from_text(&path, &text)?;
        match program_error(&path, &text, &spec) {
            Some(e) => Err(SpecError::Invalid(vec![e])),
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

    /// Resolve placeholders and paths for a launch on `port` whose files
    /// live in `run_dir` (a spec that uses `{run_dir}` needs one).
    pub fn command(&self, port: u16, run_dir: Option<&Path>) -> Result<ResolvedCommand, SpecError> {
        let sub = |s: &str| self.substitute(s, port, run_dir);
        let mut argv = self
            .argv
            .iter()
            .map(|a| sub(a))
            .collect::<Result<Vec<_>, _>>()?;
        if argv.is_empty() {
            return Err(SpecError::Invalid(vec![]));
        }
        let prog = argv.remove(0);
        // A bare name is looked up in PATH by the spawn; a name with a slash
        // is a path, relative to the spec's directory.
        let program = if prog.contains('/') {
            under(&self.dir, &prog)
        } else {
            PathBuf::from(prog)
        };
        let mut env = BTreeMap::new();
        for (k, v) in &self.env {
            env.insert(k.clone(), sub(v)?);
        }
        if let PortPassing::Env(var) = &self.port {
            env.insert(var.clone(), port.to_string());
        }
        let cwd = match &self.cwd {
            Some(c) => under(&self.dir, &sub(c)?),
            None => self.dir.clone(),
        };
        Ok(ResolvedCommand {
            program,
            args: argv,
            env,
            cwd,
        })
    }

    /// The command as it would launch, for looking at its program and
    /// library environment without launching (port 0; `{run_dir}` stays a
    /// literal).
    pub fn inspect_command(&self) -> Result<ResolvedCommand, SpecError> {
        self.command(0, Some(Path::new("{run_dir}")))
    }

    /// Render every `[[files]]` template into `run_dir`.
    pub fn render_files(&self, port: u16, run_dir: &Path) -> Result<(), SpecError> {
        for f in &self.files {
            let io = |e: std::io::Error, what: &str| SpecError::Placeholder {
                path: self.path.clone(),
                placeholder: "run_dir".into(),
                why: format!("{what} {}: {e}", f.template.display()),
            };
            let text = std::fs::read_to_string(&f.template).map_err(|e| io(e, "reading"))?;
            let out = self.substitute(&text, port, Some(run_dir))?;
            // run_dir is private to rig; still, never follow a link or
            // overwrite a file there (see fsutil).
            let dest = run_dir.join(&f.path);
            if let Some(parent) = Path::new(&f.path).parent() {
                crate::fsutil::make_dirs_below(run_dir, parent)
                    .map_err(|e| io(e, "making the directory for"))?;
            }
            crate::fsutil::write_new(&dest, out.as_bytes())
                .map_err(|e| io(e, "writing the rendering of"))?;
        }
        Ok(())
    }

    fn substitute(&self, s: &str, port: u16, run_dir: Option<&Path>) -> Result<String, SpecError> {
        let mut out = String::new();
        let mut last = 0;
        for (off, ph) in placeholders(s) {
            out.push_str(&s[last..off]);
            let value = match ph {
                "port" => port.to_string(),
                "spec_dir" => self.dir.display().to_string(),
                "run_dir" => match run_dir {
                    Some(d) => d.display().to_string(),
                    None => {
                        return Err(SpecError::Placeholder {
                            path: self.path.clone(),
                            placeholder: ph.into(),
                            why: "only a launch has a run directory".into(),
                        })
                    }
                },
                "calib_server" => rig_fixtures::calib_server().display().to_string(),
                ab if fixture_placeholder(ab).is_some() => {
                    fixture_placeholder(ab).unwrap().display().to_string()
                }
                "rig_peer" => rig_peer()
                    .map_err(|why| SpecError::Placeholder {
                        path: self.path.clone(),
                        placeholder: ph.into(),
                        why,
                    })?
                    .display()
                    .to_string(),
                other => {
                    return Err(SpecError::Placeholder {
                        path: self.path.clone(),
                        placeholder: other.into(),
                        why: format!("unknown; known: {}", PLACEHOLDERS.join(", ")),
                    })
                }
            };
            out.push_str(&value);
            last = off + ph.len() + 2;
        }
        out.push_str(&s[last..]);
        Ok(out)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_str(text: &str) -> (Option<TargetSpec>, Vec<ConfigError>) {
        parse(Path::new("/specs/t.toml"), text)
    }

    const GOOD: &str = r#"
name = "peer"
argv = ["{rig_peer}", "--port", "{port}"]
env = { RUST_LOG = "warn" }
ready = { http = "/plain" }
[protocols]
h1 = true
h2c = true
[[endpoints]]
path = "/plain"
status = 200
content_type = "text/plain"
body = { literal = "hello" }
"#;

    #[test]
    fn parses_a_full_spec() {
        let (spec, diags) = parse_str(GOOD);
        assert_eq!(diags, vec![]);
        let s = spec.unwrap();
        assert_eq!(s.name, "peer");
        assert_eq!(s.port, PortPassing::Argv);
        assert_eq!(s.ready, Ready::Http("/plain".into()));
        assert_eq!(s.ready_timeout, Duration::from_secs(10));
        assert!(s.protocols.h1 && s.protocols.h2c && s.protocols.h2_tls.is_none());
        assert_eq!(s.endpoints[0].body, Some(Body::Literal("hello".into())));
        assert_eq!(s.endpoints[0].method, "GET");
        assert_eq!(s.dir, Path::new("/specs"));
    }

    #[test]
    fn port_forms() {
        for (text, want) in [
            ("port = \"argv\"", PortPassing::Argv),
            ("port = { env = \"PORT\" }", PortPassing::Env("PORT".into())),
            ("port = { fixed = 43211 }", PortPassing::Fixed(43211)),
        ] {
            let t = format!("name='x'\nargv=['a','{{port}}']\nready={{tcp=true}}\n{text}\n");
            let (s, d) = parse_str(&t);
            assert_eq!(d, vec![], "{text}");
            assert_eq!(s.unwrap().port, want);
        }
    }

    #[test]
    fn syntax_error_has_line_and_column() {
        let (_, d) = parse_str("name = \"x\"\nargv = [\"a\", \n ready = 3\n");
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].line, 3, "{}", d[0]);
    }

    #[test]
    fn unknown_key_is_located() {
        let (_, d) = parse_str("name='x'\nargv=['a','{port}']\nredy={tcp=true}\n");
        assert_eq!(d.len(), 1);
        assert_eq!((d[0].line, d[0].col), (3, 1), "{}", d[0]);
        assert!(d[0].message.contains("unknown field `redy`"), "{}", d[0]);
    }

    #[test]
    fn semantic_errors_are_explained() {
        let text = "name='x'\nargv=[]\nready={tcp=true}\n[[endpoints]]\npath='/a'\nstatus=700\nbody={sha256='abc'}\n";
        let (_, d) = parse_str(text);
        let msgs: Vec<String> = d.iter().map(|e| e.to_string()).collect();
        assert!(
            msgs.iter().any(|m| m.contains(":2:6: `argv` is empty")),
            "{msgs:#?}"
        );
        assert!(
            msgs.iter().any(|m| m.contains(":6:8: status 700")),
            "{msgs:#?}"
        );
        assert!(
            msgs.iter().any(|m| m.contains("64 hex digits, got 3")),
            "{msgs:#?}"
        );
    }

    #[test]
    fn missing_port_placeholder_is_an_error() {
        let (_, d) = parse_str("name='x'\nargv=['srv','--port','8080']\nready={tcp=true}\n");
        assert_eq!(d.len(), 1);
        assert!(
            d[0].message
                .contains("no argument or [[files]] template contains {port}"),
            "{}",
            d[0]
        );
    }

    #[test]
    fn unknown_placeholder_is_an_error() {
        let (_, d) = parse_str("name='x'\nargv=['srv','{prot}','{port}']\nready={tcp=true}\n");
        assert_eq!(d.len(), 1, "{d:?}");
        assert_eq!((d[0].line, d[0].col), (2, 14), "{}", d[0]);
    }

    #[test]
    fn ready_path_not_an_endpoint_is_a_warning() {
        let (s, d) = parse_str(&GOOD.replace("http = \"/plain\"", "http = \"/health\""));
        assert!(s.is_some());
        assert_eq!(d.len(), 1);
        assert!(d[0].warning && d[0].message.contains("/health"), "{}", d[0]);
    }

    #[test]
    fn shell_string_argv_is_refused_with_a_hint() {
        let (_, d) = parse_str("name='x'\nargv='srv --port {port}'\nready={tcp=true}\n");
        assert_eq!(d.len(), 1);
        assert!(d[0].message.contains("never a shell string"), "{}", d[0]);
    }

    #[test]
    fn command_resolves_placeholders_and_paths() {
        let t = "name='x'\nargv=['./bin/srv','--port','{port}','--root','{spec_dir}']\nport={env='PORT'}\ncwd='work'\nready={tcp=true}\n";
        let (s, d) = parse_str(t);
        assert_eq!(d, vec![]);
        let c = s.unwrap().command(4242, None).unwrap();
        assert_eq!(c.program, Path::new("/specs/./bin/srv"));
        assert_eq!(c.args, ["--port", "4242", "--root", "/specs"]);
        assert_eq!(c.env.get("PORT").map(String::as_str), Some("4242"));
        assert_eq!(c.cwd, Path::new("/specs/work"));
    }

    #[test]
    fn ab_fixture_placeholders_resolve() {
        let t = "name='x'\nargv=['{calib_dyn}','--port','{port}']\nenv={LD_LIBRARY_PATH='{calibwork_b}'}\nready={tcp=true}\n";
        let (s, d) = parse_str(t);
        assert_eq!(d, vec![]);
        let c = s.unwrap().command(4242, None).unwrap();
        assert_eq!(c.program, rig_fixtures::calib_dyn());
        assert_eq!(
            c.env.get("LD_LIBRARY_PATH").map(Path::new),
            Some(rig_fixtures::calibwork_dir('b'))
        );
        for v in ['a', 'b', 'c', 'd', 'e'] {
            assert_eq!(
                fixture_placeholder(&format!("calibwork_{v}")).as_deref(),
                Some(rig_fixtures::calibwork_dir(v))
            );
        }
        assert_eq!(
            fixture_placeholder("calib_dyn_runpath").as_deref(),
            Some(rig_fixtures::calib_dyn_runpath())
        );
        assert_eq!(fixture_placeholder("calib_server"), None);
    }

    #[test]
    fn locate_counts_lines_and_columns() {
        assert_eq!(locate("ab\ncd\n", 4), (2, 2, "cd".into()));
        assert_eq!(locate("ab", 0), (1, 1, "ab".into()));
    }

    #[test]
    fn files_are_rendered_into_the_run_dir_with_the_port() {
        let dir = std::env::temp_dir().join(format!("rig-spec-files-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("run")).unwrap();
        std::fs::write(
            dir.join("srv.conf"),
            "pid {run_dir}/srv.pid;\nserver {\n    listen 127.0.0.1:{port};\n}\n",
        )
        .unwrap();
        let text = "name = 'srv'\nargv = ['srv', '-c', '{run_dir}/conf/srv.conf']\n\
                    ready = { tcp = true }\n[[files]]\ntemplate = 'srv.conf'\npath = 'conf/srv.conf'\n";
        // {port} only in the template is enough for port = "argv".
        let spec = TargetSpec::from_text(&dir.join("srv.toml"), text).unwrap();
        let run = dir.join("run");
        spec.render_files(4242, &run).unwrap();
        assert_eq!(
            std::fs::read_to_string(run.join("conf/srv.conf")).unwrap(),
            format!(
                "pid {}/srv.pid;\nserver {{\n    listen 127.0.0.1:4242;\n}}\n",
                run.display()
            )
        );
        let c = spec.command(4242, Some(&run)).unwrap();
        assert_eq!(
            c.args,
            vec!["-c".to_string(), format!("{}/conf/srv.conf", run.display())]
        );
        assert!(
            spec.command(4242, None).is_err(),
            "no run dir outside a launch"
        );

        // A destination outside {run_dir} is refused, with its line.
        let bad = text.replace("path = 'conf/srv.conf'", "path = '../srv.conf'");
        let err = TargetSpec::from_text(&dir.join("srv.toml"), &bad).unwrap_err();
        assert!(err.to_string().contains("inside {run_dir}"), "{err}");
        // A typo in a template's placeholder fails the render, named.
        std::fs::write(dir.join("srv.conf"), "listen {prot};\n").unwrap();
        let err = spec.render_files(4242, &run).unwrap_err();
        assert!(err.to_string().contains("prot"), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
