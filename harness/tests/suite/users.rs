//! The target's user: a target drops to the user its spec or `--user`
//! names, under every command that starts one (callgrind's too), and an
//! unknown user is refused.

use super::audit::{tagged, TAG_VAR};
use super::scratch::{rig, Scratch};
use super::{probes_shared, repo};
use rig::exit;
use rig::launch::spec::TargetSpec;
use rig::launch::start::LaunchOptions;
use serde_json::Value;
use std::time::Duration;

/// `user = "nobody"` in the spec: the target runs as that user (after rig
/// set up its cgroup as root), owns its run directory, and the launch
/// records its uid/gid; `--user` does the same for `rig run` and the
/// manifest records it; a target left as root gets a one-line warning.
#[test]
fn a_target_drops_to_the_user_its_spec_or_user_flag_names() {
    root_or_skip!();
    let s = Scratch::new("user");
    s.write("c.in", "listen {port}\n");
    let spec = TargetSpec::from_text(
        &s.0.join("t.toml"),
        "name = 'asuser'\nargv = ['{calib_server}', '--port', '{port}']\nport = 'argv'\n\
         ready = { stdout = 'READY' }\nuser = 'nobody'\ngroup = 'nogroup'\n\
         [[files]]\ntemplate = 'c.in'\npath = 'c.conf'\n",
    )
    .unwrap();
    let l = rig::launch::launch(&spec, &LaunchOptions::default()).unwrap();
    let status = std::fs::read_to_string(format!("/proc/{}/status", l.pid)).unwrap();
    let uid_line = status
        .lines()
        .find(|x| x.starts_with("Uid:"))
        .unwrap()
        .to_string();
    let runs_as = l.runs_as;
    drop(l);
    assert!(
        uid_line.split_whitespace().skip(1).all(|u| u == "65534"),
        "{uid_line}"
    );
    assert_eq!(runs_as.map(|r| (r.uid, r.gid)), Some((65534, 65534)));

    // A spec naming a user that does not exist is refused with its line.
    let e = TargetSpec::from_text(
        &s.0.join("t2.toml"),
        "name = 'x'\nargv = ['{calib_server}', '{port}']\nport = 'argv'\nready = { tcp = true }\n\
         user = 'no-such-user-rig'\n",
    )
    .unwrap_err();
    assert!(e.to_string().contains("t2.toml:5:"), "{e}");

    let calib = repo().join("config/targets/calib.toml");
    let m = s.write("m.toml", "[defaults]\nwarmup_ms = 50\nduration_ms = 200\n[[suite]]\nname = \"a\"\nkind = \"http\"\nprotocols = [\"h1\"]\npaths = [\"/calib\"]\ntopologies = [\"1\"]\n");
    for (user, uid) in [(Some("nobody"), 65534), (None, 0)] {
        let out = s.0.join(format!("out-{uid}"));
        let mut args = vec![
            "run",
            "--target",
            calib.to_str().unwrap(),
            "--matrix",
            m.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--passes",
            "clean",
        ];
        if let Some(u) = user {
            args.extend(["--user", u]);
        }
        let (code, stdout, err) = rig(&args);
        assert_eq!(code, exit::OK, "{stdout}\n{err}");
        let manifest: Value =
            serde_json::from_slice(&std::fs::read(out.join("manifest.json")).unwrap()).unwrap();
        assert_eq!(
            manifest["targets"][0]["uid"], uid,
            "{:#}",
            manifest["targets"][0]
        );
        assert_eq!(err.contains("runs as root"), uid == 0, "{err}");
    }
    let (code, _, err) = rig(&[
        "run",
        "--target",
        calib.to_str().unwrap(),
        "--matrix",
        m.to_str().unwrap(),
        "--out",
        s.0.join("o").to_str().unwrap(),
        "--user",
        "no-such-user-rig",
    ]);
    assert_eq!(code, exit::USAGE, "{err}");
}

/// The real uid and gid of `user` (its primary group), from the passwd
/// database.
fn ids_of(user: &str) -> (u32, u32) {
    let name = std::ffi::CString::new(user).unwrap();
    // SAFETY: a valid C string; the result is read before any other call.
    let pw = unsafe { libc::getpwnam(name.as_ptr()) };
    assert!(!pw.is_null(), "{user} is a user of this host");
    // SAFETY: non-null, from getpwnam just above.
    unsafe { ((*pw).pw_uid, (*pw).pw_gid) }
}

/// `rig gate --user nobody`: every launch of the gate runs as nobody
/// (cases.jsonl records the uid and gid it ran with; no run-as-root
/// warning), the gate passes. `--user` naming no user is refused by `rig
/// gate` and `rig instructions` before anything starts: exit 2, no output
/// directory, nothing measured.
#[test]
fn gate_and_instructions_drop_the_target_to_the_user_flag_and_refuse_an_unknown_one() {
    root_or_skip!();
    let _g = probes_shared();
    let s = Scratch::new("gate-user");
    let calib = repo().join("config/targets/calib.toml");
    let m = s.write("m.toml", "[defaults]\nwarmup_ms = 50\nduration_ms = 200\ncounted_requests = 200\n[[suite]]\nname = \"a\"\nkind = \"http\"\nprotocols = [\"h1\"]\npaths = [\"/calib\"]\ntopologies = [\"1\"]\n");
    let b = s.write(
        "b.toml",
        &format!(
            "target = \"{}\"\nmatrix = \"{}\"\nsuite = \"a\"\nrepeats = 2\nrequests = 200\n\
             probes = \"syscalls\"\n",
            calib.display(),
            m.display()
        ),
    );
    let (uid, gid) = ids_of("nobody");
    let out = s.0.join("out");
    let (code, stdout, err) = rig(&[
        "gate",
        "--baseline",
        b.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--user",
        "nobody",
    ]);
    assert_eq!(code, exit::OK, "{stdout}\n{err}");
    assert!(!err.contains("runs as root"), "{err}");
    let cases: Vec<Value> = std::fs::read_to_string(out.join("cases.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(cases.len(), 2, "one counted run per repeat");
    for c in &cases {
        let launch = &c["counted"]["launch"];
        assert_eq!(
            (launch["uid"].as_u64(), launch["gid"].as_u64()),
            (Some(u64::from(uid)), Some(u64::from(gid))),
            "{launch:#}"
        );
    }

    let refused = s.0.join("refused");
    let (code, stdout, err) = rig(&[
        "gate",
        "--baseline",
        b.to_str().unwrap(),
        "--out",
        refused.to_str().unwrap(),
        "--user",
        "no-such-user-xyz",
    ]);
    assert_eq!(code, exit::USAGE, "{stdout}\n{err}");
    assert!(err.contains("--user"), "{err}");
    assert!(!refused.exists(), "refused before the output directory");
    let (code, stdout, err) = rig(&[
        "instructions",
        "--target",
        calib.to_str().unwrap(),
        "--path",
        "/calib",
        "--backend",
        "callgrind",
        "--user",
        "no-such-user-xyz",
    ]);
    assert_eq!(code, exit::USAGE, "{stdout}\n{err}");
    assert!(err.contains("--user"), "{err}");
    assert_eq!(stdout, "", "refused before the backend is chosen");
}

/// `rig instructions --backend callgrind --user nobody`: the target under
/// valgrind runs as nobody (seen in /proc while it runs) and the window
/// still counts: valgrind writes its profile into the target's own run
/// directory, which the target's user owns.
#[test]
fn instructions_under_callgrind_runs_the_target_as_the_user_flag_names() {
    root_or_skip!();
    let s = Scratch::new("instr-user");
    let tag = format!("instr-user-{}", std::process::id());
    let spec = s.write(
        "t.toml",
        &format!(
            "extends = \"{}\"\nenv = {{ {TAG_VAR} = \"{tag}\" }}\n",
            repo().join("config/targets/calib.toml").display()
        ),
    );
    let (uid, _) = ids_of("nobody");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watch = {
        let (stop, tag) = (std::sync::Arc::clone(&stop), tag.clone());
        std::thread::spawn(move || {
            let mut uids = std::collections::BTreeSet::new();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                for p in tagged(&tag) {
                    let status =
                        std::fs::read_to_string(format!("/proc/{p}/status")).unwrap_or_default();
                    if let Some(l) = status.lines().find(|l| l.starts_with("Uid:")) {
                        uids.insert(l.split_whitespace().skip(1).collect::<Vec<_>>().join(" "));
                    }
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            uids
        })
    };
    let (code, stdout, err) = rig(&[
        "instructions",
        "--target",
        spec.to_str().unwrap(),
        "--path",
        "/calib",
        "--backend",
        "callgrind",
        "--requests",
        "200",
        "--user",
        "nobody",
    ]);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let uids = watch.join().unwrap();
    assert_eq!(code, exit::OK, "{stdout}\n{err}");
    let want = format!("{uid} {uid} {uid} {uid}");
    assert_eq!(
        uids.into_iter().collect::<Vec<_>>(),
        vec![want],
        "real, effective, saved and fs uid of the target"
    );
}
