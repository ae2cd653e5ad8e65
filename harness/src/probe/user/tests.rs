use super::*;
use crate::elf::usdt::parse_arg;

#[test]
fn specs_parse_as_written_and_bad_ones_say_the_form() {
    assert_eq!(
        UserProbe::usdt("postgresql:query__start").unwrap(),
        UserProbe::Usdt {
            pattern: "postgresql:query__start".into(),
            arg: None,
            by: None
        }
    );
    assert_eq!(
        UserProbe::usdt("postgres:postgresql:buffer__read__done@7").unwrap(),
        UserProbe::Usdt {
            pattern: "postgres:postgresql:buffer__read__done".into(),
            arg: Some(7),
            by: None
        }
    );
    // Counted by a string argument: NUL-terminated, or of a length another
    // argument gives; with a sum or without.
    for (spec, arg, by) in [
        ("python:function__entry#1", None, (1, None)),
        ("hotspot:object__alloc#1/2", None, (1, Some(2))),
        ("hotspot:object__alloc@3#1/2", Some(3), (1, Some(2))),
    ] {
        let p = UserProbe::usdt(spec).unwrap();
        let by = Some(ByArg {
            arg: by.0,
            len: by.1,
        });
        let pattern = spec.split(['@', '#']).next().unwrap().to_string();
        assert_eq!(p, UserProbe::Usdt { pattern, arg, by });
        assert_eq!(p.spec(), format!("--usdt {spec}"));
    }
    for bad in [
        "python:function__entry#",
        "python:function__entry#x",
        "hotspot:o#1/",
        "hotspot:o#1/12",
    ] {
        let e = UserProbe::usdt(bad).unwrap_err();
        assert!(e.contains("string argument to count by"), "{bad}: {e}");
    }
    let e = UserProbe::usdt("query__start").unwrap_err();
    assert!(e.contains("[BINARY:]PROVIDER:NAME"), "{e}");
    let e = UserProbe::usdt("python:gc__start@x").unwrap_err();
    assert!(e.contains("number of the argument"), "{e}");
    assert!(UserProbe::usdt("python:gc__start@12").is_err());
    assert_eq!(
        UserProbe::func("libc.so.6!mem*").unwrap().spec(),
        "--func libc.so.6!mem*"
    );
    assert!(UserProbe::func("libc.so.6!").is_err());
    assert!(UserProbe::func(" ").is_err());
}

#[test]
fn argument_locations_are_what_the_bpf_program_reads() {
    let globals = |name: &str| match name {
        "NBuffers" => Ok(0x5000),
        _ => Err(format!("no {name}")),
    };
    let at = |s: &str| arg_location(&parse_arg(s).unwrap(), 0x1000, globals);
    let r = at("-4@%eax").unwrap();
    assert_eq!(
        (r.kind, r.size, r.is_signed, r.reg_off),
        (user_arg::REG, 4, 1, 80)
    );
    let m = at("8@-16(%rbp)").unwrap();
    assert_eq!(
        (m.kind, m.size, m.is_signed, m.reg_off, m.value),
        (user_arg::MEM, 8, 0, 32, -16)
    );
    let c = at("-4@$5").unwrap();
    assert_eq!((c.kind, c.value), (user_arg::CONST, 5));
    // A global, read at its distance from the marker.
    let g = at("8@NBuffers(%rip)").unwrap();
    assert_eq!((g.kind, g.value), (user_arg::IPREL, 0x4000));
    let g = at("4@52+NBuffers(%rip)").unwrap();
    assert_eq!((g.kind, g.size, g.value), (user_arg::IPREL, 4, 0x4000 + 52));
    assert!(at("8@Missing(%rip)").unwrap_err().contains("no Missing"));
    let bare = at("8@16(%rip)").unwrap_err();
    assert!(bare.contains("names no global"), "{bare}");
}

/// Debian's python (its USDT markers as shipped) as a real process's map: its markers (in
/// libpython or the executable, as Debian builds it) resolve, a spec that
/// matches nothing gets the nearest names, and an argument a marker does
/// not have is refused.
#[test]
fn pythons_markers_resolve_and_bad_specs_are_refused_with_the_reason() {
    let mut child = std::process::Command::new("/usr/bin/python3.11")
        .args(["-c", "import sys; sys.stdin.read()"])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .expect("Debian 12's /usr/bin/python3.11");
    let pid = child.id();
    // Its libraries are mapped once it reads stdin.
    std::thread::sleep(std::time::Duration::from_millis(300));
    let maps = ProcMaps::read(pid).unwrap();
    let probes = [
        UserProbe::usdt("python:function__entry@2").unwrap(),
        UserProbe::usdt("python:gc__*").unwrap(),
        UserProbe::func("Py_Initialize*").unwrap(),
        UserProbe::usdt("python:functon__entyr").unwrap(),
    ];
    let r = resolve(pid, &maps, &probes).unwrap();
    let names: std::collections::BTreeSet<&str> =
        r.sites.iter().map(|s| s.probe.as_str()).collect();
    assert!(names.contains("usdt:python:function__entry"), "{names:?}");
    assert!(names.contains("usdt:python:gc__start"), "{names:?}");
    assert!(names.contains("usdt:python:gc__done"), "{names:?}");
    assert!(names.contains("func:Py_Initialize"), "{names:?}");
    let entry = r
        .sites
        .iter()
        .find(|s| s.probe == "usdt:python:function__entry")
        .unwrap();
    assert!(entry.semaphore.is_some(), "{entry:?}");
    assert_eq!(entry.arg, Some(2));
    assert_ne!(entry.arg_abi.kind, user_arg::NONE);
    assert_eq!(r.unmatched.len(), 1);
    assert_eq!(r.unmatched[0].1[0], "python:function__entry");
    let e = resolve(
        pid,
        &maps,
        &[UserProbe::usdt("python:gc__start@5").unwrap()],
    )
    .unwrap_err();
    assert!(e.to_string().contains("there is no argument 5"), "{e}");
    let e = resolve(pid, &maps, &[UserProbe::func("*").unwrap()]).unwrap_err();
    assert!(e.to_string().contains("more than 1000"), "{e}");
    let _ = child.kill();
    let _ = child.wait();
}

/// `--interp-calls LANGUAGE`: a language rig counts the calls of, written
/// back as given; another is refused naming the ones it knows.
#[test]
fn interp_calls_take_a_language_rig_counts_the_calls_of() {
    let p = UserProbe::interp_calls("python").unwrap();
    assert_eq!(
        p,
        UserProbe::InterpCalls {
            language: "python".into()
        }
    );
    assert_eq!(p.spec(), "--interp-calls python");
    assert!(p.counted_by_user_family());
    let why = UserProbe::interp_calls("ruby").unwrap_err();
    assert!(why.contains("`python`"), "{why}");
    let named = Named {
        interp_calls: &["python".to_string()],
        ..Named::default()
    };
    assert_eq!(UserProbe::of_spec(named).unwrap(), vec![p]);
}
