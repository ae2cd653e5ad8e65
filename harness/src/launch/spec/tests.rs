use super::parse::{locate, parse};
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

#[test]
fn errors_of_an_extending_spec_point_at_the_file_that_sets_the_key() {
    let d = crate::fsutil::private_dir("rig-spec-test-").unwrap();
    std::fs::write(d.join("base.toml"), GOOD).unwrap();
    // Line 3 of the extending file sets a bad port form.
    std::fs::write(
        d.join("arm.toml"),
        "extends = \"base.toml\"\nenv = { X = \"1\" }\nport = { fixed = 0 }\n",
    )
    .unwrap();
    let errors = check_config(d.join("arm.toml")).unwrap_err();
    assert_eq!(errors.len(), 1, "{errors:?}");
    let e = &errors[0];
    assert_eq!((e.line, e.col), (3, 1), "{e}");
    assert_eq!(e.source_line, "port = { fixed = 0 }");
    let SpecError::Invalid(loaded) = TargetSpec::load(d.join("arm.toml")).unwrap_err() else {
        panic!("not a validation error");
    };
    assert_eq!(
        (loaded[0].line, loaded[0].source_line.as_str()),
        (3, "port = { fixed = 0 }")
    );

    // A problem the extending file does not write is said to come from the base.
    std::fs::write(d.join("base.toml"), GOOD.replace("{port}", "9")).unwrap();
    std::fs::write(
        d.join("arm.toml"),
        "extends = \"base.toml\"\nenv = { X = \"1\" }\n",
    )
    .unwrap();
    let errors = check_config(d.join("arm.toml")).unwrap_err();
    assert!(
        errors
            .iter()
            .all(|e| e.line == 1 && e.message.contains("the spec this one extends")),
        "{errors:?}"
    );
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn live_endpoints_are_read_and_checked() {
    let text = GOOD.replace(
        "h2c = true",
        "h2c = true\ntcp_echo = true\nws = \"/ws\"\nsse = { path = \"/sse?interval_ms=200\", interval_ms = 200 }",
    );
    let (spec, diags) = parse_str(&text);
    assert_eq!(diags, vec![]);
    let p = spec.unwrap().protocols;
    assert!(p.tcp_echo);
    assert_eq!(p.ws.as_deref(), Some("/ws"));
    assert_eq!(
        p.sse,
        Some(SseSpec {
            path: "/sse?interval_ms=200".into(),
            interval_ms: 200
        })
    );
    let bad = GOOD.replace(
        "h2c = true",
        "h2c = true\nws = \"ws\"\nsse = { path = \"/sse\", interval_ms = 0 }",
    );
    let (_, diags) = parse_str(&bad);
    let msgs: Vec<&str> = diags.iter().map(|d| d.message.as_str()).collect();
    assert_eq!(
        msgs,
        [
            "ws = \"ws\": a path starts with /",
            "sse.interval_ms = 0: give the heartbeat interval the server is configured with"
        ]
    );
    let missing = format!("live_variant = \"nope.toml\"\n{GOOD}");
    let (_, diags) = parse_str(&missing);
    assert!(
        diags[0]
            .message
            .starts_with("live_variant: /specs/nope.toml does not exist"),
        "{diags:?}"
    );
}
