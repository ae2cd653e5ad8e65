//! The request handler: method + path in, a response with a fixed body out.
//!
//! This is the hot path rig measures, so every body is a `Bytes` over static
//! memory and every header value is `from_static`: a response costs hyper's
//! own allocations and nothing of ours (no copy, no refcount).

use std::convert::Infallible;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};

pub const PLAIN: &[u8] = b"hello";
pub const JSON: &[u8] = br#"{"message":"hello","id":1}"#;
pub const NOT_FOUND: &[u8] = b"not found";
pub const BYTES_LEN: usize = 65536;

/// Byte `i` is `i % 251`: 251 is prime, so the pattern does not line up with
/// any power-of-two chunk or frame size and a misplaced chunk shows.
/// Built by the compiler, so it sits in read-only memory shared by every
/// response.
static BYTES: [u8; BYTES_LEN] = pattern();

const fn pattern() -> [u8; BYTES_LEN] {
    let mut out = [0u8; BYTES_LEN];
    let mut i = 0;
    while i < BYTES_LEN {
        out[i] = (i % 251) as u8;
        i += 1;
    }
    out
}

pub async fn handle(req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    Ok(respond(req.method(), req.uri().path()))
}

fn respond(method: &Method, path: &str) -> Response<Full<Bytes>> {
    let (status, content_type, body) = match (method, path) {
        (&Method::GET, "/plain") => (StatusCode::OK, "text/plain", PLAIN),
        (&Method::GET, "/json") => (StatusCode::OK, "application/json", JSON),
        (&Method::GET, "/bytes") => (StatusCode::OK, "application/octet-stream", &BYTES[..]),
        _ => (StatusCode::NOT_FOUND, "text/plain", NOT_FOUND),
    };
    let mut response = Response::new(Full::new(Bytes::from_static(body)));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

/// The fixed routes as data, for `--live` mode and `--h3` (each with its own
/// response type).
/// `respond` keeps its own copy of this table on purpose: the default
/// server's per-request costs are gated exactly (`config/gates/peer.toml`),
/// and routing its hot path through this function would change them. It
/// sits below `respond` because the gate's call sites carry line numbers.
pub fn fixed(method: &Method, path: &str) -> (StatusCode, &'static str, &'static [u8]) {
    match (method, path) {
        (&Method::GET, "/plain") => (StatusCode::OK, "text/plain", PLAIN),
        (&Method::GET, "/json") => (StatusCode::OK, "application/json", JSON),
        (&Method::GET, "/bytes") => (StatusCode::OK, "application/octet-stream", &BYTES[..]),
        _ => (StatusCode::NOT_FOUND, "text/plain", NOT_FOUND),
    }
}

/// `/calib`: a calibration route whose handler costs, per request, exactly
/// [`CALIB_GETPPID`] `getppid` calls and [`CALIB_ALLOCS`] heap blocks of
/// [`CALIB_ALLOC_SIZE`] bytes (each freed), at [`calib_work`]'s own line:
/// known by construction, so rig's per-request counts over a protocol can
/// be checked exactly at that site whatever the protocol stack beneath
/// costs. Served by the h3 listener; the default h1/h2 path does not
/// route it, so its gated costs stay as they are.
pub const CALIB_GETPPID: usize = 2;
pub const CALIB_ALLOCS: usize = 3;
pub const CALIB_ALLOC_SIZE: usize = 4093;
pub const CALIB: &[u8] = b"calib";

/// [`fixed`], and `/calib` (which does its work first).
pub fn answer(method: &Method, path: &str) -> (StatusCode, &'static str, &'static [u8]) {
    if method == Method::GET && path == "/calib" {
        calib_work();
        return (StatusCode::OK, "text/plain", CALIB);
    }
    fixed(method, path)
}

/// The known costs of `/calib`. Not inlined, so its allocations have this
/// function as their user site under its own name.
#[inline(never)]
pub fn calib_work() {
    for _ in 0..CALIB_GETPPID {
        std::hint::black_box(std::os::unix::process::parent_id());
    }
    let layout = std::alloc::Layout::from_size_align(CALIB_ALLOC_SIZE, 1).expect("valid layout");
    for _ in 0..CALIB_ALLOCS {
        // SAFETY: the layout has a non-zero size; the block is freed below
        // with the same layout.
        let block = unsafe { std::alloc::alloc(layout) }; // SITE: calib-alloc
        std::hint::black_box(block);
        if !block.is_null() {
            // SAFETY: allocated above with `layout`, freed once.
            unsafe { std::alloc::dealloc(block, layout) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_pattern_is_i_mod_251() {
        assert!(BYTES
            .iter()
            .enumerate()
            .all(|(i, &b)| b as usize == i % 251));
        assert_eq!(BYTES[250], 250);
        assert_eq!(BYTES[251], 0);
        assert_eq!(BYTES[BYTES_LEN - 1], (65535 % 251) as u8);
    }

    #[test]
    fn json_body_is_the_documented_26_bytes() {
        assert_eq!(JSON, b"{\"message\":\"hello\",\"id\":1}");
        assert_eq!(JSON.len(), 26);
    }

    #[test]
    fn the_live_modes_table_is_the_default_servers() {
        for m in [Method::GET, Method::POST] {
            for p in ["/plain", "/json", "/bytes", "/", "/ws"] {
                let r = respond(&m, p);
                let (status, ct, _) = fixed(&m, p);
                assert_eq!(r.status(), status, "{m} {p}");
                assert_eq!(r.headers()[CONTENT_TYPE], ct, "{m} {p}");
            }
        }
    }

    #[test]
    fn only_get_on_known_paths_is_200() {
        assert_eq!(respond(&Method::GET, "/plain").status(), StatusCode::OK);
        assert_eq!(
            respond(&Method::POST, "/plain").status(),
            StatusCode::NOT_FOUND
        );
        assert_eq!(
            respond(&Method::GET, "/plain/").status(),
            StatusCode::NOT_FOUND
        );
        assert_eq!(respond(&Method::GET, "/").status(), StatusCode::NOT_FOUND);
    }
}
