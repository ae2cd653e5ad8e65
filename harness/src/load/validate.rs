//! Validation of one response against `Expect`. Checked in order: status,
//! content type, body; the first failure is the error kind.

use sha2::{Digest, Sha256};

use super::{Expect, ExpectBody};

pub(crate) const CONTENT_TYPE: &str = "content-type";
pub(crate) const BODY_MISMATCH: &str = "body mismatch";

pub(crate) fn check(
    expect: &Expect,
    status: u16,
    content_type: Option<&[u8]>,
    body: &[u8],
) -> Result<(), String> {
    if status != expect.status {
        return Err(format!("status {status}"));
    }
    if let Some(want) = &expect.content_type {
        if !content_type_matches(want.as_bytes(), content_type) {
            return Err(CONTENT_TYPE.into());
        }
    }
    let ok = match &expect.body {
        ExpectBody::Exact(b) => body == &b[..],
        ExpectBody::Sha256(h) => Sha256::digest(body).as_slice() == h,
        ExpectBody::Any => true,
    };
    if !ok {
        return Err(BODY_MISMATCH.into());
    }
    Ok(())
}

/// The most bytes a compressed response body is decoded to.
const MAX_DECODED: u64 = 64 << 20;

/// A body sent with `Content-Encoding: encoding` (rig asks for none, and
/// a request without `Accept-Encoding` accepts any), decoded so it can be
/// compared with the expected body: gzip, x-gzip and deflate (zlib, or raw
/// as some servers send it); `identity` as it is. Another coding is an
/// error kind naming it.
pub(crate) fn decode_body(encoding: &[u8], body: &[u8]) -> Result<Vec<u8>, String> {
    use std::io::Read;
    let enc = String::from_utf8_lossy(encoding.trim_ascii()).to_ascii_lowercase();
    let mut out = Vec::new();
    let read =
        |r: &mut dyn Read, out: &mut Vec<u8>| r.take(MAX_DECODED + 1).read_to_end(out).map(|_| ());
    let r = match enc.as_str() {
        "identity" => return Ok(body.to_vec()),
        "gzip" | "x-gzip" => read(&mut flate2::read::MultiGzDecoder::new(body), &mut out),
        "deflate" => read(&mut flate2::read::ZlibDecoder::new(body), &mut out).or_else(|_| {
            out.clear();
            read(&mut flate2::read::DeflateDecoder::new(body), &mut out)
        }),
        other => {
            return Err(format!(
                "content-encoding {other} (rig decodes gzip and deflate)"
            ))
        }
    };
    match r {
        Ok(()) if out.len() as u64 > MAX_DECODED => Err(format!(
            "content-encoding {enc}: decodes to more than {} MiB",
            MAX_DECODED >> 20
        )),
        Ok(()) => Ok(out),
        Err(e) => Err(format!("content-encoding {enc}: not decodable ({e})")),
    }
}

fn content_type_matches(want: &[u8], got: Option<&[u8]>) -> bool {
    let Some(got) = got else { return false };
    let got = got.trim_ascii();
    if want.contains(&b';') {
        return got.eq_ignore_ascii_case(want);
    }
    let media = match got.iter().position(|&b| b == b';') {
        Some(i) => got[..i].trim_ascii_end(),
        None => got,
    };
    media.eq_ignore_ascii_case(want)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expect(ct: Option<&str>, body: ExpectBody) -> Expect {
        Expect {
            status: 200,
            content_type: ct.map(str::to_string),
            body,
        }
    }

    #[test]
    fn checks_status_then_content_type_then_body() {
        let e = expect(Some("text/plain"), ExpectBody::Exact("ok".into()));
        assert_eq!(check(&e, 200, Some(b"text/plain"), b"ok"), Ok(()));
        assert_eq!(check(&e, 500, None, b"no").unwrap_err(), "status 500");
        assert_eq!(check(&e, 200, None, b"ok").unwrap_err(), "content-type");
        assert_eq!(
            check(&e, 200, Some(b"text/html"), b"ok").unwrap_err(),
            "content-type"
        );
        assert_eq!(
            check(&e, 200, Some(b"text/plain"), b"okk").unwrap_err(),
            "body mismatch"
        );
    }

    #[test]
    fn gzip_and_deflate_bodies_decode_and_other_codings_are_named() {
        use std::io::Write;
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(b"trial\n").unwrap();
        let gz = gz.finish().unwrap();
        assert_eq!(decode_body(b"gzip", &gz).unwrap(), b"trial\n");
        assert_eq!(decode_body(b" X-Gzip ", &gz).unwrap(), b"trial\n");
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
        z.write_all(b"trial\n").unwrap();
        assert_eq!(
            decode_body(b"deflate", &z.finish().unwrap()).unwrap(),
            b"trial\n"
        );
        let mut raw = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::fast());
        raw.write_all(b"trial\n").unwrap();
        assert_eq!(
            decode_body(b"deflate", &raw.finish().unwrap()).unwrap(),
            b"trial\n"
        );
        assert!(decode_body(b"br", b"x")
            .unwrap_err()
            .contains("content-encoding br"));
        assert!(decode_body(b"gzip", b"not gzip")
            .unwrap_err()
            .contains("not decodable"));
    }

    #[test]
    fn media_type_alone_ignores_parameters() {
        assert!(content_type_matches(
            b"text/plain",
            Some(b"Text/Plain; charset=utf-8")
        ));
        assert!(!content_type_matches(
            b"text/plain; charset=utf-8",
            Some(b"text/plain")
        ));
        assert!(content_type_matches(
            b"text/plain; charset=utf-8",
            Some(b" text/plain; charset=UTF-8")
        ));
        assert!(!content_type_matches(b"text/plain", Some(b"text/plainx")));
    }

    #[test]
    fn sha256_and_any_bodies() {
        let h: [u8; 32] = Sha256::digest(b"hello").into();
        let e = expect(None, ExpectBody::Sha256(h));
        assert_eq!(check(&e, 200, None, b"hello"), Ok(()));
        assert_eq!(check(&e, 200, None, b"hellO").unwrap_err(), "body mismatch");
        assert_eq!(
            check(&expect(None, ExpectBody::Any), 200, None, b"x"),
            Ok(())
        );
    }
}
