//! The URL of `rig attach --drive`: `http://` or `https://`, loopback only,
//! an explicit port. It becomes a [`LoadSpec`] with the protocol the user
//! chose, so a driven window speaks whatever `rig run` speaks.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;

use super::{Endpoint, Expect, ExpectBody, LoadError, LoadSpec, Protocol};

/// A parsed loopback URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Url {
    pub url: String,
    pub tls: bool,
    pub addr: SocketAddr,
    /// The host as written (no port): the default TLS server name.
    pub host: String,
    pub path: String,
}

impl Url {
    pub fn parse(url: &str) -> Result<Url, LoadError> {
        let bad = |why: &str| LoadError::BadUrl {
            url: url.to_string(),
            why: why.to_string(),
        };
        let (tls, rest) = match (url.strip_prefix("http://"), url.strip_prefix("https://")) {
            (Some(r), _) => (false, r),
            (_, Some(r)) => (true, r),
            _ => return Err(bad("give an http:// or https:// URL")),
        };
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        let Some((host, _)) = authority.rsplit_once(':') else {
            return Err(bad("give the port explicitly, e.g. http://127.0.0.1:8080/"));
        };
        let addr = authority
            .to_socket_addrs()
            .map_err(|e| bad(&format!("cannot resolve {authority}: {e}")))?
            .next()
            .ok_or_else(|| bad("resolves to no address"))?;
        if !addr.ip().is_loopback() {
            return Err(LoadError::NotLoopback {
                url: url.to_string(),
                addr,
            });
        }
        Ok(Url {
            url: url.to_string(),
            tls,
            addr,
            host: host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_string(),
            path: path.to_string(),
        })
    }
}

/// What the user chose for a driven window.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DriveChoice {
    /// `h1`, `h2c`, `h2` or `h3`; `None`: `h1` for http://, `h2` for https://.
    pub protocol: Option<String>,
    /// HTTP/1.1: a new TCP connection for every request.
    pub new_connection: bool,
    pub ca: Option<PathBuf>,
    pub server_name: Option<String>,
    pub insecure: bool,
    pub connections: usize,
    /// HTTP/2: concurrent streams per connection.
    pub streams: usize,
    /// `--request-timeout`; `None`: [`crate::load::REQUEST_TIMEOUT`].
    pub request_timeout: Option<std::time::Duration>,
}

/// The load spec of a driven window: every response must be `200`, any body.
// One branch per flag combination the user can get wrong, each with the
// fix in its message; kept together so the rules read as one table.
pub fn drive_spec(u: &Url, c: &DriveChoice) -> Result<LoadSpec, LoadError> {
    let spec_err = |why: String| LoadError::Spec(why);
    let proto = c
        .protocol
        .clone()
        .unwrap_or_else(|| if u.tls { "h2" } else { "h1" }.to_string());
    let tls_flags = c.ca.is_some() || c.server_name.is_some() || c.insecure;
    if !u.tls && tls_flags {
        return Err(spec_err(format!(
            "--ca, --server-name and --insecure are for TLS; {} is http://, use https://",
            u.url
        )));
    }
    if c.new_connection && proto != "h1" {
        return Err(spec_err(
            "--new-connection is for HTTP/1.1 (--protocol h1); HTTP/2 multiplexes one connection"
                .into(),
        ));
    }
    if !["h2", "h2c", "h3"].contains(&proto.as_str()) && c.streams != 1 {
        return Err(spec_err(format!(
            "--streams {}: HTTP/1.1 has one request in flight per connection; use --connections",
            c.streams
        )));
    }
    let tls = |kind: &str| -> Result<Protocol, LoadError> {
        if c.ca.is_none() && !c.insecure {
            return Err(spec_err(format!(
                "{}: give --ca FILE (the CA that signed the server's certificate), \
                 or --insecure to accept any certificate",
                u.url
            )));
        }
        let ca_pem = c.ca.clone().unwrap_or_default();
        let server_name = c.server_name.clone().unwrap_or_else(|| u.host.clone());
        let insecure = c.insecure;
        Ok(match kind {
            "h2" => Protocol::H2Tls {
                ca_pem,
                server_name,
                insecure,
            },
            "h3" => Protocol::H3 {
                ca_pem,
                server_name,
                insecure,
            },
            _ => Protocol::H1Tls {
                ca_pem,
                server_name,
                insecure,
            },
        })
    };
    let protocol = match (proto.as_str(), u.tls) {
        ("h1", false) => Protocol::H1 {
            keepalive: !c.new_connection,
        },
        ("h1", true) if c.new_connection => {
            return Err(spec_err(
                "--new-connection over TLS is not supported; drop it or use http://".into(),
            ))
        }
        ("h1", true) => tls("h1")?,
        ("h2c", false) => Protocol::H2c,
        ("h2", true) => tls("h2")?,
        ("h3", true) => tls("h3")?,
        ("h3", false) => return Err(spec_err("--protocol h3 is HTTP/3 over QUIC, which is always encrypted; use an https:// URL (rig sends it to the UDP port of that number)".into())),
        ("h2c", true) => return Err(spec_err("--protocol h2c is cleartext; use an http:// URL, or --protocol h2 for TLS".into())),
        ("h2", false) => return Err(spec_err("--protocol h2 is HTTP/2 over TLS; use an https:// URL, or --protocol h2c for cleartext".into())),
        (p, _) => return Err(spec_err(format!("--protocol {p}: give h1, h2c, h2 or h3"))),
    };
    Ok(LoadSpec {
        addr: u.addr,
        protocol,
        endpoint: Endpoint {
            path: u.path.clone(),
            expect: Expect {
                status: 200,
                content_type: None,
                body: ExpectBody::Any,
            },
        },
        connections: c.connections,
        streams: c.streams,
        client_cpus: None,
        // One generator thread: between requests nothing of rig's runs
        // but one event loop, which keeps the window's quiesce simple.
        threads: Some(1),
        // A driven window is closed loop: no send times to spin toward.
        spin: None,
        request_timeout: c.request_timeout.unwrap_or(super::REQUEST_TIMEOUT),
        deadline: None,
    })
}

/// One line saying what a driven window speaks, and whether the server's
/// certificate was verified.
pub fn describe(spec: &LoadSpec) -> String {
    let c = spec.connections;
    let plural = |n: usize| if n == 1 { "" } else { "s" };
    let conns = format!("{c} connection{}", plural(c));
    let streams = format!("{} stream{}", spec.streams, plural(spec.streams));
    let trust = |ca: &PathBuf, name: &str, insecure: bool| match insecure {
        true => format!("server name {name}; certificate NOT verified (--insecure)"),
        false => format!("server name {name}, verified against {}", ca.display()),
    };
    match &spec.protocol {
        Protocol::H1 { keepalive: true } => format!("HTTP/1.1 keep-alive, {conns}"),
        Protocol::H1 { keepalive: false } => {
            format!("HTTP/1.1, a new connection per request, {c} at a time")
        }
        Protocol::H2c => format!("h2c, {conns} × {streams}"),
        Protocol::H2Tls {
            ca_pem,
            server_name,
            insecure,
        } => format!(
            "h2 over TLS ({}), {conns} × {streams}",
            trust(ca_pem, server_name, *insecure)
        ),
        Protocol::H1Tls {
            ca_pem,
            server_name,
            insecure,
        } => format!(
            "HTTP/1.1 keep-alive over TLS ({}), {conns}",
            trust(ca_pem, server_name, *insecure)
        ),
        Protocol::H3 {
            ca_pem,
            server_name,
            insecure,
        } => format!(
            "HTTP/3 over QUIC, UDP port {} ({}), {conns} × {streams}",
            spec.addr.port(),
            trust(ca_pem, server_name, *insecure)
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn choice() -> DriveChoice {
        DriveChoice {
            connections: 2,
            streams: 1,
            ..DriveChoice::default()
        }
    }

    #[test]
    fn parses_http_and_https_loopback_urls() {
        let u = Url::parse("https://localhost:8443/plain?x=1").unwrap();
        assert!(u.tls);
        assert_eq!(
            (u.host.as_str(), u.path.as_str()),
            ("localhost", "/plain?x=1")
        );
        assert!(u.addr.ip().is_loopback());
        let u = Url::parse("http://127.0.0.1:80").unwrap();
        assert_eq!((u.tls, u.path.as_str()), (false, "/"));
        assert!(matches!(
            Url::parse("http://10.0.0.1:80/"),
            Err(LoadError::NotLoopback { .. })
        ));
        assert!(Url::parse("ftp://127.0.0.1:1/").is_err());
        assert!(Url::parse("http://127.0.0.1/").is_err());
    }

    #[test]
    fn picks_the_protocol_from_the_scheme_and_the_flags() {
        let http = Url::parse("http://127.0.0.1:1/x").unwrap();
        let https = Url::parse("https://127.0.0.1:1/x").unwrap();
        let p = |u: &Url, c: DriveChoice| drive_spec(u, &c).map(|s| s.protocol);
        assert_eq!(
            p(&http, choice()).unwrap(),
            Protocol::H1 { keepalive: true }
        );
        let nc = DriveChoice {
            new_connection: true,
            ..choice()
        };
        assert_eq!(p(&http, nc).unwrap(), Protocol::H1 { keepalive: false });
        let h2c = DriveChoice {
            protocol: Some("h2c".into()),
            ..choice()
        };
        assert_eq!(p(&http, h2c).unwrap(), Protocol::H2c);
        let insecure = DriveChoice {
            insecure: true,
            server_name: Some("localhost".into()),
            ..choice()
        };
        assert_eq!(
            p(&https, insecure.clone()).unwrap(),
            Protocol::H2Tls {
                ca_pem: PathBuf::new(),
                server_name: "localhost".into(),
                insecure: true
            }
        );
        let h1tls = DriveChoice {
            protocol: Some("h1".into()),
            ca: Some("/ca.pem".into()),
            ..choice()
        };
        assert_eq!(
            p(&https, h1tls).unwrap(),
            Protocol::H1Tls {
                ca_pem: "/ca.pem".into(),
                server_name: "127.0.0.1".into(),
                insecure: false
            }
        );
        // TLS without a CA or --insecure, TLS flags on http://, h2c over
        // https://, streams on HTTP/1.1: each refused with its fix.
        let e = p(&https, choice()).unwrap_err().to_string();
        assert!(e.contains("give --ca FILE"), "{e}");
        let e = p(&http, insecure).unwrap_err().to_string();
        assert!(e.contains("use https://"), "{e}");
        let e = p(
            &https,
            DriveChoice {
                protocol: Some("h2c".into()),
                insecure: true,
                ..choice()
            },
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("cleartext"), "{e}");
        let e = p(
            &http,
            DriveChoice {
                streams: 4,
                ..choice()
            },
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("--streams 4"), "{e}");
    }

    #[test]
    fn says_when_the_certificate_is_not_verified() {
        let https = Url::parse("https://127.0.0.1:1/x").unwrap();
        let s = drive_spec(
            &https,
            &DriveChoice {
                insecure: true,
                server_name: Some("localhost".into()),
                ..choice()
            },
        )
        .unwrap();
        assert_eq!(
            describe(&s),
            "h2 over TLS (server name localhost; certificate NOT verified (--insecure)), \
             2 connections × 1 stream"
        );
    }
}
