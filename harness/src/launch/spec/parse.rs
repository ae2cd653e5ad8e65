//! Validation of a target spec's text: every problem found, each located at
//! `file:line:col` with the offending line, errors and warnings together.

use std::ops::Range;
use std::path::Path;
use std::time::Duration;

use toml::Spanned;

use super::raw::*;
use super::*;

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
pub(super) fn locate(text: &str, offset: usize) -> (usize, usize, String) {
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

fn is_hex64(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|c| c.is_ascii_hexdigit())
}

/// Parse and check a spec's text. `path` is the file (used for locations and
/// as the base of relative paths). Errors and warnings come back together.
pub(super) fn parse(path: &Path, text: &str) -> (Option<TargetSpec>, Vec<ConfigError>) {
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
    let port = port_passing(&mut d, &raw);
    let argv = command_line(&mut d, &raw, &dir, &port);
    let (ready, ready_timeout) = readiness(&mut d, &raw);
    let (protocols, tls_variant) = listeners(&mut d, &raw, &dir);
    let live_variant = variant(&mut d, "live_variant", raw.live_variant.as_ref(), &dir);
    let files = file_templates(&mut d, &raw, &dir);
    let endpoints = endpoints(&mut d, &raw, &dir);
    if let Ready::Http(p) = &ready {
        if !endpoints.is_empty() && !endpoints.iter().any(|e| &e.path == p) {
            d.warn(
                raw.ready.span(),
                format!("ready path {p} is not among [[endpoints]]; readiness accepts any status < 500, so a 404 also counts"),
            );
        }
    }
    run_as(&mut d, &raw);
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
        live_variant,
        files,
        wrappers: raw.wrappers.clone(),
        usdt: raw.usdt.clone(),
        func: raw.func.clone(),
        func_time: raw.func_time,
        alloc_func: raw.alloc_func.clone(),
        free_func: raw.free_func.clone(),
        interp_calls: raw.interp_calls.clone(),
        user: raw.user.as_ref().map(|u| u.get_ref().clone()),
        group: raw.group.as_ref().map(|g| g.get_ref().clone()),
        path: path.to_path_buf(),
        dir,
    };
    (Some(spec), d.out)
}

/// `port`: how the target learns the port rig picked.
fn port_passing(d: &mut Diag, raw: &RawSpec) -> PortPassing {
    match raw.port.as_ref().map(|p| (p.get_ref(), p.span())) {
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
    }
}

/// `argv` (with its placeholders, and those of `env` and `cwd`): the program
/// must be named, and a target told its port through argv must get it.
fn command_line(d: &mut Diag, raw: &RawSpec, dir: &Path, port: &PortPassing) -> Vec<String> {
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
        check_placeholders(d, a);
    }
    for v in raw.env.values() {
        check_placeholders(d, v);
    }
    if let Some(c) = &raw.cwd {
        check_placeholders(d, c);
    }
    // A config-file server learns its port from a rendered template.
    let template_mentions_port = raw.files.iter().any(|f| {
        std::fs::read_to_string(under(dir, f.template.get_ref()))
            .is_ok_and(|t| placeholders(&t).iter().any(|(_, p)| *p == "port"))
    });
    if *port == PortPassing::Argv && !mentions_port && !template_mentions_port && !argv.is_empty() {
        d.error(
            argv_span,
            "port = \"argv\" but no argument or [[files]] template contains {port}: the target would \
             never learn the port rig picked; add e.g. \"--port\", \"{port}\" (or use port = { env = \"PORT\" })",
        );
    }
    if let PortPassing::Env(var) = port {
        if raw.env.contains_key(var) {
            let span = raw.port.as_ref().map(|p| p.span()).unwrap_or(0..0);
            d.error(
                span,
                format!("`env` sets {var} itself, but port = {{ env = \"{var}\" }} makes rig set it; remove one"),
            );
        }
    }

    argv
}

/// `ready` and `ready_timeout_ms`.
fn readiness(d: &mut Diag, raw: &RawSpec) -> (Ready, Duration) {
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

    (ready, ready_timeout)
}

/// `h2_tls` or `h3` (`key`): the CA (which must exist) and server name.
fn tls_spec(d: &mut Diag, key: &str, spanned: &Spanned<RawTls>, dir: &Path) -> TlsSpec {
    let t = spanned.get_ref();
    let ca = t.ca.as_ref().map(|c| {
        let ca = under(dir, c.get_ref());
        if !ca.is_file() {
            d.error(
                c.span(),
                format!("{key}.ca: {} does not exist (relative paths are relative to the spec's directory {})", ca.display(), dir.display()),
            );
        }
        ca
    });
    if ca.is_none() && !t.insecure {
        d.error(
            spanned.span(),
            format!(
                "{key}: give `ca = \"FILE\"` (the CA that signed the server's certificate), \
                 or `insecure = true` to accept any certificate"
            ),
        );
    }
    TlsSpec {
        ca,
        server_name: t.server_name.clone(),
        insecure: t.insecure,
    }
}

/// `[protocols]` (with the TLS CA) and `tls_variant`.
fn listeners(d: &mut Diag, raw: &RawSpec, dir: &Path) -> (Protocols, Option<PathBuf>) {
    let h2_tls = raw
        .protocols
        .h2_tls
        .as_ref()
        .map(|t| tls_spec(d, "h2_tls", t, dir));
    let h3 = raw.protocols.h3.as_ref().map(|t| tls_spec(d, "h3", t, dir));
    let ws = raw.protocols.ws.as_ref().map(|w| {
        if !w.get_ref().starts_with('/') {
            d.error(
                w.span(),
                format!("ws = \"{}\": a path starts with /", w.get_ref()),
            );
        }
        w.get_ref().clone()
    });
    let sse = raw.protocols.sse.as_ref().map(|s| {
        let r = s.get_ref();
        if !r.path.starts_with('/') {
            d.error(
                s.span(),
                format!("sse.path = \"{}\": a path starts with /", r.path),
            );
        }
        if r.interval_ms == 0 {
            d.error(
                s.span(),
                "sse.interval_ms = 0: give the heartbeat interval the server is configured with",
            );
        }
        SseSpec {
            path: r.path.clone(),
            interval_ms: r.interval_ms,
        }
    });
    let protocols = Protocols {
        h1: raw.protocols.h1,
        h2c: raw.protocols.h2c,
        h2_tls,
        h3,
        tcp_echo: raw.protocols.tcp_echo,
        ws,
        sse,
    };
    let tls_variant = variant(d, "tls_variant", raw.tls_variant.as_ref(), dir);
    (protocols, tls_variant)
}

/// A variant spec's path (`tls_variant`, `live_variant`), which must exist.
fn variant(
    d: &mut Diag,
    key: &str,
    value: Option<&Spanned<String>>,
    dir: &Path,
) -> Option<PathBuf> {
    value.map(|t| {
        let p = under(dir, t.get_ref());
        if !p.is_file() {
            d.error(
                t.span(),
                format!("{key}: {} does not exist (relative paths are relative to the spec's directory {})", p.display(), dir.display()),
            );
        }
        p
    })
}

/// `[[files]]`: templates that exist, rendered to relative paths inside
/// the run directory.
fn file_templates(d: &mut Diag, raw: &RawSpec, dir: &Path) -> Vec<FileTemplate> {
    let mut files = Vec::new();
    for f in &raw.files {
        let template = under(dir, f.template.get_ref());
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

    files
}

/// `[[endpoints]]`: paths, statuses and expected bodies.
fn endpoints(d: &mut Diag, raw: &RawSpec, dir: &Path) -> Vec<Endpoint> {
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
                let p = under(dir, f);
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
    endpoints
}

/// `user` and `group`: the account must exist now, not at launch.
fn run_as(d: &mut Diag, raw: &RawSpec) {
    if let Some(u) = &raw.user {
        if let Err(why) = crate::launch::user::resolve(
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
}

/// [`program_problem`] of a spec read from a file, located at its argv[0].
pub(super) fn program_error(path: &Path, text: &str, spec: &TargetSpec) -> Option<ConfigError> {
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
