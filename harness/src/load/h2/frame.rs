//! HTTP/2 frames as bytes (RFC 9113 §4, §6): the 9-byte frame header, the
//! few frames the client writes, and the request's header block, encoded
//! once per client (RFC 7541, static table and literals only, so that it
//! never depends on the dynamic table).

pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
pub const HEAD: usize = 9;
/// SETTINGS_MAX_FRAME_SIZE's default; the client never raises it, so no
/// frame it receives may be longer.
pub const MAX_FRAME: usize = 16_384;

pub const DATA: u8 = 0x0;
pub const HEADERS: u8 = 0x1;
pub const RST_STREAM: u8 = 0x3;
pub const SETTINGS: u8 = 0x4;
pub const PUSH_PROMISE: u8 = 0x5;
pub const PING: u8 = 0x6;
pub const GOAWAY: u8 = 0x7;
pub const WINDOW_UPDATE: u8 = 0x8;
pub const CONTINUATION: u8 = 0x9;

pub const END_STREAM: u8 = 0x1;
pub const ACK: u8 = 0x1;
pub const END_HEADERS: u8 = 0x4;
pub const PADDED: u8 = 0x8;
pub const PRIORITY: u8 = 0x20;

pub const SETTINGS_ENABLE_PUSH: u16 = 0x2;
pub const SETTINGS_MAX_CONCURRENT_STREAMS: u16 = 0x3;
pub const SETTINGS_INITIAL_WINDOW_SIZE: u16 = 0x4;

pub const NO_ERROR: u32 = 0x0;
pub const REFUSED_STREAM: u32 = 0x7;
pub const CANCEL: u32 = 0x8;

/// The header of one frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Head {
    pub len: usize,
    pub kind: u8,
    pub flags: u8,
    pub stream: u32,
}

impl Head {
    /// `b` holds at least `HEAD` bytes.
    pub fn parse(b: &[u8]) -> Head {
        Head {
            len: (b[0] as usize) << 16 | (b[1] as usize) << 8 | b[2] as usize,
            kind: b[3],
            flags: b[4],
            stream: u32::from_be_bytes([b[5], b[6], b[7], b[8]]) & 0x7fff_ffff,
        }
    }
}

pub fn push_head(out: &mut Vec<u8>, len: usize, kind: u8, flags: u8, stream: u32) {
    let l = (len as u32).to_be_bytes();
    out.extend_from_slice(&[l[1], l[2], l[3], kind, flags]);
    out.extend_from_slice(&stream.to_be_bytes());
}

/// The client's SETTINGS: no push, `stream_window` for every stream.
pub fn settings(out: &mut Vec<u8>, stream_window: u32) {
    push_head(out, 12, SETTINGS, 0, 0);
    out.extend_from_slice(&SETTINGS_ENABLE_PUSH.to_be_bytes());
    out.extend_from_slice(&0u32.to_be_bytes());
    out.extend_from_slice(&SETTINGS_INITIAL_WINDOW_SIZE.to_be_bytes());
    out.extend_from_slice(&stream_window.to_be_bytes());
}

pub fn settings_ack(out: &mut Vec<u8>) {
    push_head(out, 0, SETTINGS, ACK, 0);
}

pub fn ping_ack(out: &mut Vec<u8>, opaque: &[u8]) {
    push_head(out, 8, PING, ACK, 0);
    out.extend_from_slice(opaque);
}

pub fn window_update(out: &mut Vec<u8>, stream: u32, increment: u32) {
    push_head(out, 4, WINDOW_UPDATE, 0, stream);
    out.extend_from_slice(&increment.to_be_bytes());
}

pub fn rst_stream(out: &mut Vec<u8>, stream: u32, code: u32) {
    push_head(out, 4, RST_STREAM, 0, stream);
    out.extend_from_slice(&code.to_be_bytes());
}

pub fn goaway(out: &mut Vec<u8>, last_stream: u32, code: u32) {
    push_head(out, 8, GOAWAY, 0, 0);
    out.extend_from_slice(&last_stream.to_be_bytes());
    out.extend_from_slice(&code.to_be_bytes());
}

/// A HEADERS frame carrying the whole request: `block` with END_HEADERS
/// and END_STREAM (a GET has no body).
pub fn request(out: &mut Vec<u8>, stream: u32, block: &[u8]) {
    push_head(out, block.len(), HEADERS, END_HEADERS | END_STREAM, stream);
    out.extend_from_slice(block);
}

/// The payload of a DATA or HEADERS frame less its padding (and, for
/// HEADERS with PRIORITY, the priority fields). `None`: malformed.
pub fn unpad<'b>(h: &Head, b: &'b [u8]) -> Option<&'b [u8]> {
    let mut b = b;
    if h.flags & PADDED != 0 {
        let (&pad, rest) = b.split_first()?;
        b = rest.get(..rest.len().checked_sub(pad as usize)?)?;
    }
    if h.kind == HEADERS && h.flags & PRIORITY != 0 {
        b = b.get(5..)?;
    }
    Some(b)
}

/// The request's header block: `:method GET`, `:scheme`, `:path`,
/// `:authority`. Indexed fields from the static table where the value is
/// there, otherwise literals without indexing with an indexed name and no
/// Huffman coding, so the same bytes are valid on every stream whatever the
/// peer's dynamic table holds.
pub fn request_block(https: bool, authority: &str, path: &str) -> Vec<u8> {
    let mut b = vec![0x82, if https { 0x87 } else { 0x86 }];
    if path == "/" {
        b.push(0x84);
    } else {
        literal(&mut b, 4, path.as_bytes());
    }
    literal(&mut b, 1, authority.as_bytes());
    b
}

/// Literal header field without indexing, name at static `index` (RFC 7541
/// §6.2.2), value as a raw string (§5.2).
fn literal(out: &mut Vec<u8>, index: u8, value: &[u8]) {
    integer(out, 0x00, 4, index as usize);
    integer(out, 0x00, 7, value.len());
    out.extend_from_slice(value);
}

/// An integer with an `prefix`-bit prefix (RFC 7541 §5.1); `high` holds
/// the first byte's bits above the prefix.
fn integer(out: &mut Vec<u8>, high: u8, prefix: u32, mut v: usize) {
    let max = (1usize << prefix) - 1;
    if v < max {
        out.push(high | v as u8);
        return;
    }
    out.push(high | max as u8);
    v -= max;
    while v >= 128 {
        out.push((v % 128 + 128) as u8);
        v /= 128;
    }
    out.push(v as u8);
}

/// An error code's name, as RFC 9113 §7 spells it.
pub fn reason(code: u32) -> String {
    let name = match code {
        0x0 => "NO_ERROR",
        0x1 => "PROTOCOL_ERROR",
        0x2 => "INTERNAL_ERROR",
        0x3 => "FLOW_CONTROL_ERROR",
        0x4 => "SETTINGS_TIMEOUT",
        0x5 => "STREAM_CLOSED",
        0x6 => "FRAME_SIZE_ERROR",
        0x7 => "REFUSED_STREAM",
        0x8 => "CANCEL",
        0x9 => "COMPRESSION_ERROR",
        0xa => "CONNECT_ERROR",
        0xb => "ENHANCE_YOUR_CALM",
        0xc => "INADEQUATE_SECURITY",
        0xd => "HTTP_1_1_REQUIRED",
        _ => return format!("0x{code:x}"),
    };
    name.to_string()
}
