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
