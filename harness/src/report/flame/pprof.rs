//! pprof profiles (`profile.proto`, gzip): one file per family, one sample
//! type per measure (`alloc_objects`/count, `alloc_space`/bytes,
//! `cpu`/nanoseconds, `off_cpu`/nanoseconds, `copy_space`/bytes,
//! `lock_wait`/nanoseconds, ...), mappings with build-ids, functions with
//! file and line, inlined functions as extra lines of a location. `go tool
//! pprof`, Pyroscope, Parca and Grafana read it.
//!
//! The messages are written by hand with prost's derive (no protoc at build
//! time); field numbers are those of pprof's `proto/profile.proto`.
//! Values of a fixed-count window are per request (`Scale`); when a count
//! per request is not a whole number the sample type's unit says for how
//! many requests it is (`count/10req`) and a comment repeats it.

use std::collections::BTreeMap;
use std::io::Write;

use prost::Message;

use super::{scale_of, title, Loc, LocKind, Profile as Stacks, Scale, Unit};

#[derive(Clone, PartialEq, Message)]
pub struct Profile {
    #[prost(message, repeated, tag = "1")]
    pub sample_type: Vec<ValueType>,
    #[prost(message, repeated, tag = "2")]
    pub sample: Vec<Sample>,
    #[prost(message, repeated, tag = "3")]
    pub mapping: Vec<Mapping>,
    #[prost(message, repeated, tag = "4")]
    pub location: Vec<Location>,
    #[prost(message, repeated, tag = "5")]
    pub function: Vec<Function>,
    #[prost(string, repeated, tag = "6")]
    pub string_table: Vec<String>,
    #[prost(int64, tag = "7")]
    pub drop_frames: i64,
    #[prost(int64, tag = "8")]
    pub keep_frames: i64,
    #[prost(int64, tag = "9")]
    pub time_nanos: i64,
    #[prost(int64, tag = "10")]
    pub duration_nanos: i64,
    #[prost(message, optional, tag = "11")]
    pub period_type: Option<ValueType>,
    #[prost(int64, tag = "12")]
    pub period: i64,
    #[prost(int64, repeated, tag = "13")]
    pub comment: Vec<i64>,
    #[prost(int64, tag = "14")]
    pub default_sample_type: i64,
}

#[derive(Clone, PartialEq, Message)]
pub struct ValueType {
    #[prost(int64, tag = "1")]
    pub r#type: i64,
    #[prost(int64, tag = "2")]
    pub unit: i64,
}

#[derive(Clone, PartialEq, Message)]
pub struct Sample {
    /// Innermost first.
    #[prost(uint64, repeated, tag = "1")]
    pub location_id: Vec<u64>,
    #[prost(int64, repeated, tag = "2")]
    pub value: Vec<i64>,
    #[prost(message, repeated, tag = "3")]
    pub label: Vec<Label>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Label {
    #[prost(int64, tag = "1")]
    pub key: i64,
    #[prost(int64, tag = "2")]
    pub str: i64,
    #[prost(int64, tag = "3")]
    pub num: i64,
    #[prost(int64, tag = "4")]
    pub num_unit: i64,
}

#[derive(Clone, PartialEq, Message)]
pub struct Mapping {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(uint64, tag = "2")]
    pub memory_start: u64,
    #[prost(uint64, tag = "3")]
    pub memory_limit: u64,
    #[prost(uint64, tag = "4")]
    pub file_offset: u64,
    #[prost(int64, tag = "5")]
    pub filename: i64,
    #[prost(int64, tag = "6")]
    pub build_id: i64,
    #[prost(bool, tag = "7")]
    pub has_functions: bool,
    #[prost(bool, tag = "8")]
    pub has_filenames: bool,
    #[prost(bool, tag = "9")]
    pub has_line_numbers: bool,
    #[prost(bool, tag = "10")]
    pub has_inline_frames: bool,
}

#[derive(Clone, PartialEq, Message)]
pub struct Location {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(uint64, tag = "2")]
    pub mapping_id: u64,
    #[prost(uint64, tag = "3")]
    pub address: u64,
    /// Innermost (most deeply inlined) first; the last is the physical
    /// function.
    #[prost(message, repeated, tag = "4")]
    pub line: Vec<Line>,
    #[prost(bool, tag = "5")]
    pub is_folded: bool,
}

#[derive(Clone, PartialEq, Message)]
pub struct Line {
    #[prost(uint64, tag = "1")]
    pub function_id: u64,
    #[prost(int64, tag = "2")]
    pub line: i64,
    #[prost(int64, tag = "3")]
    pub column: i64,
}

#[derive(Clone, PartialEq, Message)]
pub struct Function {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(int64, tag = "2")]
    pub name: i64,
    #[prost(int64, tag = "3")]
    pub system_name: i64,
    #[prost(int64, tag = "4")]
    pub filename: i64,
    #[prost(int64, tag = "5")]
    pub start_line: i64,
}

/// Builds the tables: strings, mappings, functions and locations, each
/// stored once.
#[derive(Default)]
struct Tables {
    p: Profile,
    strings: BTreeMap<String, i64>,
    /// (module, load base) → mapping index.
    mappings: BTreeMap<(String, u64), usize>,
    functions: BTreeMap<(String, String), u64>,
    locations: BTreeMap<Loc, u64>,
}

impl Tables {
    fn new() -> Tables {
        let mut t = Tables::default();
        t.s("");
        t
    }

    fn s(&mut self, v: &str) -> i64 {
        if let Some(i) = self.strings.get(v) {
            return *i;
        }
        let i = self.p.string_table.len() as i64;
        self.p.string_table.push(v.to_string());
        self.strings.insert(v.to_string(), i);
        i
    }

    fn function(&mut self, name: &str, file: Option<&str>) -> u64 {
        let key = (name.to_string(), file.unwrap_or("").to_string());
        if let Some(id) = self.functions.get(&key) {
            return *id;
        }
        let id = self.p.function.len() as u64 + 1;
        let (n, f) = (self.s(name), self.s(file.unwrap_or("")));
        self.p.function.push(Function {
            id,
            name: n,
            system_name: n,
            filename: f,
            start_line: 0,
        });
        self.functions.insert(key, id);
        id
    }

    /// The mapping a user frame's address lies in: one per module and load
    /// base (`addr - module_offset`), grown to cover every address seen.
    fn mapping(&mut self, loc: &Loc) -> u64 {
        let (Some(module), LocKind::User) = (&loc.module, loc.kind) else {
            return 0;
        };
        if module.starts_with('[') || loc.addr < loc.module_offset {
            return 0;
        }
        let base = loc.addr - loc.module_offset;
        let key = (module.clone(), base);
        let i = match self.mappings.get(&key) {
            Some(i) => *i,
            None => {
                let (f, b) = (
                    self.s(module),
                    self.s(loc.build_id.as_deref().unwrap_or("")),
                );
                self.p.mapping.push(Mapping {
                    id: self.p.mapping.len() as u64 + 1,
                    memory_start: base,
                    memory_limit: loc.addr + 1,
                    file_offset: 0,
                    filename: f,
                    build_id: b,
                    has_functions: true,
                    has_filenames: true,
                    has_line_numbers: true,
                    has_inline_frames: true,
                });
                self.mappings.insert(key, self.p.mapping.len() - 1);
                self.p.mapping.len() - 1
            }
        };
        let m = &mut self.p.mapping[i];
        m.memory_limit = m.memory_limit.max(loc.addr + 1);
        m.id
    }

    fn location(&mut self, loc: &Loc) -> u64 {
        if let Some(id) = self.locations.get(loc) {
            return *id;
        }
        let mapping_id = self.mapping(loc);
        let mut lines = Vec::new();
        for l in loc.lines.iter().rev() {
            let name = match loc.kind {
                LocKind::Kernel => format!("{} [kernel]", l.function),
                _ => l.function.clone(),
            };
            lines.push(Line {
                function_id: self.function(&name, l.file.as_deref()),
                line: l.line.map_or(0, i64::from),
                column: 0,
            });
        }
        let id = self.p.location.len() as u64 + 1;
        self.p.location.push(Location {
            id,
            mapping_id,
            address: if mapping_id == 0 { 0 } else { loc.addr },
            line: lines,
            is_folded: false,
        });
        self.locations.insert(loc.clone(), id);
        id
    }
}

/// The scale of every measure of `p` (per request where exact).
pub fn scales(p: &Stacks) -> Vec<Scale> {
    (0..p.measures().len()).map(|i| scale_of(&[p], i)).collect()
}

/// The profile message of `p`, every measure a sample type, values as
/// `scales` show them.
pub fn build(p: &Stacks, scales: &[Scale]) -> Profile {
    let mut t = Tables::new();
    for (m, sc) in p.measures().iter().zip(scales) {
        let unit = match sc.per {
            1 => m.unit.pprof().to_string(),
            per => format!("{}/{per}req", m.unit.pprof()),
        };
        let vt = ValueType {
            r#type: t.s(m.sample_type),
            unit: t.s(&unit),
        };
        t.p.sample_type.push(vt);
    }
    t.p.default_sample_type = t.p.sample_type.first().map_or(0, |v| v.r#type);
    for (i, sc) in scales.iter().enumerate() {
        let c = t.s(&format!("rig flame: {}", title(p, i, sc)));
        t.p.comment.push(c);
    }
    if p.family == crate::probe::Family::Cpu && p.period_ns > 0 {
        t.p.period_type = Some(ValueType {
            r#type: t.s("cpu"),
            unit: t.s(Unit::Nanoseconds.pprof()),
        });
        t.p.period = p.period_ns as i64;
    }
    t.p.duration_nanos = p.elapsed_ns as i64;
    // pprof names a profile after its first mapping: the executable's
    // (a module that is not a shared object), not libc's.
    for loc in p.samples.iter().flat_map(|s| &s.locs) {
        let exe = loc.module.as_deref().is_some_and(|m| {
            let b = crate::process::maps::basename(m);
            !b.contains(".so") && !m.starts_with('[')
        });
        if exe {
            t.mapping(loc);
        }
    }
    let (event, pid) = (t.s("event"), t.s("pid"));
    // Stacks that differ only by pid or call-site offset stay separate
    // samples: pprof sums them per function.
    for s in &p.samples {
        let value: Vec<i64> = s
            .values
            .iter()
            .zip(scales)
            .map(|(v, sc)| sc.value(*v) as i64)
            .collect();
        if value.iter().all(|v| *v == 0) {
            continue;
        }
        let location_id = s.locs.iter().map(|l| t.location(l)).collect();
        let ev = t.s(&s.event);
        t.p.sample.push(Sample {
            location_id,
            value,
            label: vec![
                Label {
                    key: event,
                    str: ev,
                    num: 0,
                    num_unit: 0,
                },
                Label {
                    key: pid,
                    str: 0,
                    num: s.pid as i64,
                    num_unit: 0,
                },
            ],
        });
    }
    t.p
}

/// `build` with the default scales, encoded and gzipped.
pub fn encode(p: &Stacks) -> std::io::Result<Vec<u8>> {
    gzip(&build(p, &scales(p)))
}

pub fn gzip(p: &Profile) -> std::io::Result<Vec<u8>> {
    let mut z = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    z.write_all(&p.encode_to_vec())?;
    z.finish()
}

/// The message of a gzipped (or plain) profile.proto.
pub fn decode(bytes: &[u8]) -> Result<Profile, std::io::Error> {
    let raw = if bytes.starts_with(&[0x1f, 0x8b]) {
        let mut out = Vec::new();
        std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(bytes), &mut out)?;
        out
    } else {
        bytes.to_vec()
    };
    Profile::decode(raw.as_slice())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

#[cfg(test)]
mod tests {
    use super::super::tests::{alloc_profile, N};
    use super::*;

    fn s(p: &Profile, i: i64) -> &str {
        &p.string_table[i as usize]
    }

    /// (function, file, line) of each line of a location, innermost first.
    fn lines_of(p: &Profile, loc: u64) -> Vec<(String, String, i64)> {
        let l = &p.location[loc as usize - 1];
        l.line
            .iter()
            .map(|ln| {
                let f = &p.function[ln.function_id as usize - 1];
                (
                    s(p, f.name).to_string(),
                    s(p, f.filename).to_string(),
                    ln.line,
                )
            })
            .collect()
    }

    #[test]
    fn encodes_sample_types_values_per_request_functions_lines_and_mappings() {
        let bytes = encode(&alloc_profile()).unwrap();
        assert_eq!(&bytes[..2], &[0x1f, 0x8b], "gzip");
        let p = decode(&bytes).unwrap();
        assert_eq!(s(&p, 0), "");
        let types: Vec<(&str, &str)> = p
            .sample_type
            .iter()
            .map(|t| (s(&p, t.r#type), s(&p, t.unit)))
            .collect();
        assert_eq!(
            types,
            vec![("alloc_objects", "count"), ("alloc_space", "bytes")]
        );
        assert_eq!(s(&p, p.default_sample_type), "alloc_objects");
        assert_eq!(
            s(&p, p.comment[0]),
            "rig flame: case-x: 500 requests, allocations per request"
        );
        let values: Vec<&[i64]> = p.sample.iter().map(|x| x.value.as_slice()).collect();
        assert_eq!(values, vec![&[3, 72][..], &[1, 100][..]]);
        // Leaf first; the inlined helper is the first line of parse's
        // location, the physical function (with its own line) the last.
        let second = &p.sample[1];
        assert_eq!(
            lines_of(&p, second.location_id[1]),
            vec![
                ("inlined_helper".into(), "/src/app.h".into(), 5),
                ("parse".into(), "/src/app.c".into(), 30),
            ]
        );
        let leaf: Vec<String> = p
            .sample
            .iter()
            .map(|x| lines_of(&p, x.location_id[0])[0].0.clone())
            .collect();
        assert_eq!(leaf, vec!["malloc", "operator new(unsigned long)"]);
        // One mapping per module and load base, covering every address,
        // with its build-id; each location's address lies in its mapping.
        let files: Vec<&str> = p.mapping.iter().map(|m| s(&p, m.filename)).collect();
        // The executable first: pprof names the profile after it.
        assert_eq!(
            files,
            vec!["/srv/app", "/lib/libc.so.6", "/lib/libstdc++.so.6"]
        );
        for l in &p.location {
            let m = &p.mapping[l.mapping_id as usize - 1];
            assert!(
                m.memory_start <= l.address && l.address < m.memory_limit,
                "{l:?} {m:?}"
            );
            assert_eq!(s(&p, m.build_id), "ab12cd");
        }
        let labels: Vec<(&str, &str)> = p
            .sample
            .iter()
            .map(|x| (s(&p, x.label[0].key), s(&p, x.label[0].str)))
            .collect();
        assert_eq!(labels, vec![("event", "malloc"), ("event", "operator new")]);
        assert_eq!(p.sample[0].label[1].num, 7, "pid");
        assert_eq!(p.duration_nanos, 1_000_000);
    }

    #[test]
    fn a_value_that_is_not_whole_per_request_says_its_request_count_in_the_unit() {
        let mut st = alloc_profile();
        st.samples[0].values = vec![N / 2, 12 * N];
        let p = decode(&encode(&st).unwrap()).unwrap();
        assert_eq!(s(&p, p.sample_type[0].unit), "count/10req");
        assert_eq!(s(&p, p.sample_type[1].unit), "bytes");
        assert_eq!(p.sample[0].value, vec![5, 12]);
        assert_eq!(p.sample[1].value, vec![10, 100]);
    }
}
