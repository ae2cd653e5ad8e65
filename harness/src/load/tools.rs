//! External load tools run by `rig attach -- COMMAND`: what rig records of
//! the run ([`CommandRun`]) and the request count it reads from the tool's
//! own output ([`read_count`]) for wrk, h2load, oha and redis-benchmark.
//!
//! Each parser reads the line its tool prints for *successful* requests
//! (the per-request denominator), never a rate: wrk's `N requests in`
//! minus its `Non-2xx or 3xx responses`, h2load's `succeeded`, the 2xx rows
//! of oha's status code distribution (text or `--output-format json`),
//! and the sum of redis-benchmark's `N requests completed` over its tests.
//! An output the parser does not recognise is an error naming what it
//! looked for, never a guess.

use serde::Serialize;

/// A load tool whose output rig can read a request count from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Tool {
    Wrk,
    H2load,
    Oha,
    RedisBenchmark,
}

impl Tool {
    /// The tool a command line runs, by the file name of its program.
    pub fn of(argv: &[String]) -> Option<Tool> {
        let prog = argv.first()?;
        let name = prog.rsplit('/').next().unwrap_or(prog);
        match name {
            "wrk" | "wrk2" => Some(Tool::Wrk),
            "h2load" => Some(Tool::H2load),
            "oha" => Some(Tool::Oha),
            "redis-benchmark" => Some(Tool::RedisBenchmark),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Tool::Wrk => "wrk",
            Tool::H2load => "h2load",
            Tool::Oha => "oha",
            Tool::RedisBenchmark => "redis-benchmark",
        }
    }
}

/// The request count a tool reported, and the lines it came from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ToolCount {
    pub tool: Tool,
    pub requests: u64,
    /// The output lines the count was read from, as printed.
    pub evidence: Vec<String>,
}

/// What rig records of a command it ran as the load of a window.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CommandRun {
    pub argv: Vec<String>,
    /// Exit code, `None` when a signal ended it.
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    /// The count read from its output (when `--per` was not given).
    pub count: Option<ToolCount>,
    /// Why no count was read, when none was.
    pub count_error: Option<String>,
}

impl CommandRun {
    /// `exit status 0`, `killed by signal 2`.
    pub fn status(&self) -> String {
        match (self.exit_code, self.signal) {
            (Some(c), _) => format!("exit status {c}"),
            (None, Some(s)) => format!("killed by signal {s}"),
            (None, None) => "no exit status".into(),
        }
    }
}

/// Read the successful request count from `tool`'s standard output.
pub fn read_count(tool: Tool, output: &str) -> Result<ToolCount, String> {
    let text = strip_ansi(output);
    let (requests, evidence) = match tool {
        Tool::Wrk => wrk(&text)?,
        Tool::H2load => h2load(&text)?,
        Tool::Oha => oha(&text)?,
        Tool::RedisBenchmark => redis_benchmark(&text)?,
    };
    Ok(ToolCount {
        tool,
        requests,
        evidence,
    })
}

/// `  20700 requests in 1.10s, 2.09MB read` and, when some failed,
/// `  Non-2xx or 3xx responses: 21157`.
fn wrk(text: &str) -> Result<(u64, Vec<String>), String> {
    let line = text
        .lines()
        .find(|l| l.contains(" requests in ") && l.trim_start().starts_with(char::is_numeric))
        .ok_or("no `N requests in T` line (did wrk finish?)")?;
    let total = first_number(line).ok_or("unreadable `requests in` line")?;
    let mut evidence = vec![line.trim().to_string()];
    let mut failed = 0;
    if let Some(l) = text
        .lines()
        .find(|l| l.contains("Non-2xx or 3xx responses:"))
    {
        failed = l
            .rsplit(':')
            .next()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .ok_or("unreadable `Non-2xx or 3xx responses` line")?;
        evidence.push(l.trim().to_string());
    }
    Ok((total.saturating_sub(failed), evidence))
}

/// `requests: 1000 total, 1000 started, 1000 done, 1000 succeeded, 0 failed, ...`
fn h2load(text: &str) -> Result<(u64, Vec<String>), String> {
    let line = text
        .lines()
        .find(|l| l.starts_with("requests: "))
        .ok_or("no `requests: ... succeeded` line (did h2load finish?)")?;
    let succeeded = line
        .split(',')
        .find_map(|part| {
            let part = part.trim();
            part.strip_suffix(" succeeded")
                .and_then(|n| n.trim().parse::<u64>().ok())
        })
        .ok_or("no `N succeeded` in h2load's `requests:` line")?;
    Ok((succeeded, vec![line.trim().to_string()]))
}

/// Text: `Status code distribution:` then `  [200] 20000 responses` rows;
/// JSON (`--output-format json`): `statusCodeDistribution`. 2xx only.
fn oha(text: &str) -> Result<(u64, Vec<String>), String> {
    if text.trim_start().starts_with('{') {
        let v: serde_json::Value =
            serde_json::from_str(text.trim()).map_err(|e| format!("oha JSON output: {e}"))?;
        let dist = v
            .get("statusCodeDistribution")
            .and_then(|d| d.as_object())
            .ok_or("oha JSON output without `statusCodeDistribution`")?;
        let mut n = 0;
        let mut evidence = Vec::new();
        for (code, count) in dist {
            let c = count
                .as_u64()
                .ok_or("non-integer count in statusCodeDistribution")?;
            if code.starts_with('2') {
                n = add(n, c)?;
            }
            evidence.push(format!("statusCodeDistribution {code}: {c}"));
        }
        return Ok((n, evidence));
    }
    let mut lines = text
        .lines()
        .skip_while(|l| l.trim() != "Status code distribution:");
    if lines.next().is_none() {
        return Err("no `Status code distribution:` section (did oha finish? is --output-format text or json?)".into());
    }
    let mut n = 0;
    let mut evidence = Vec::new();
    for l in lines {
        let t = l.trim();
        let Some(rest) = t.strip_prefix('[') else {
            break;
        };
        let (code, count) = rest.split_once("] ").ok_or("unreadable status row")?;
        let c = first_number(count).ok_or("unreadable status row")?;
        if code.starts_with('2') {
            n = add(n, c)?;
        }
        evidence.push(t.to_string());
    }
    Ok((n, evidence))
}

/// Every test's `====== GET ======` block has `  10000 requests completed
/// in 0.10 seconds`; `-q` and `--csv` print no count.
fn redis_benchmark(text: &str) -> Result<(u64, Vec<String>), String> {
    let mut n = 0;
    let mut evidence = Vec::new();
    // Progress lines end in `\r`, so a block's heading may share a line
    // with the last progress report: split on both.
    let mut test: Option<String> = None;
    for l in text.split(['\n', '\r']) {
        if let Some(i) = l.find("====== ") {
            let name = l[i + 7..].trim_end().trim_end_matches('=').trim();
            test = Some(name.to_string());
            continue;
        }
        if l.contains(" requests completed in ") {
            let c = first_number(l).ok_or("unreadable `requests completed` line")?;
            n = add(n, c)?;
            evidence.push(format!("{}: {}", test.as_deref().unwrap_or("?"), l.trim()));
        }
    }
    if evidence.is_empty() {
        return Err(
            "no `N requests completed` line: with -q or --csv redis-benchmark prints no request count"
                .into(),
        );
    }
    Ok((n, evidence))
}

/// A sum of counts the tool printed; one past `u64` is not a count.
fn add(n: u64, c: u64) -> Result<u64, String> {
    n.checked_add(c).ok_or_else(|| {
        format!(
            "the counts add up to more than {}: not a request count",
            u64::MAX
        )
    })
}

fn first_number(s: &str) -> Option<u64> {
    s.split_whitespace().find_map(|w| w.parse::<u64>().ok())
}

/// Drop terminal colour sequences (`ESC [ ... letter`).
fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for d in chars.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
            continue;
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn captured(name: &str) -> String {
        let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../fixtures/load-tools")
            .join(name);
        std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    }

    fn count(tool: Tool, file: &str) -> u64 {
        read_count(tool, &captured(file)).unwrap().requests
    }

    #[test]
    fn knows_each_tool_by_its_program_name() {
        let argv = |s: &str| s.split(' ').map(String::from).collect::<Vec<_>>();
        assert_eq!(
            Tool::of(&argv("/usr/bin/wrk -c2 http://x")),
            Some(Tool::Wrk)
        );
        assert_eq!(Tool::of(&argv("h2load -n 1")), Some(Tool::H2load));
        assert_eq!(Tool::of(&argv("oha -n 1")), Some(Tool::Oha));
        assert_eq!(
            Tool::of(&argv("redis-benchmark -n 1")),
            Some(Tool::RedisBenchmark)
        );
        assert_eq!(Tool::of(&argv("curl http://x")), None);
    }

    #[test]
    fn reads_wrk_requests_less_its_non_2xx_responses() {
        assert_eq!(count(Tool::Wrk, "wrk-1t2c.txt"), 20700);
        assert_eq!(count(Tool::Wrk, "wrk-latency.txt"), 62147);
        let c = read_count(Tool::Wrk, &captured("wrk-non2xx.txt")).unwrap();
        assert_eq!(c.requests, 0);
        assert_eq!(
            c.evidence,
            [
                "21157 requests in 1.00s, 2.36MB read",
                "Non-2xx or 3xx responses: 21157"
            ]
        );
    }

    #[test]
    fn reads_h2load_succeeded_requests() {
        assert_eq!(count(Tool::H2load, "h2load-h2c.txt"), 1000);
        assert_eq!(count(Tool::H2load, "h2load-h1.txt"), 500);
        assert_eq!(count(Tool::H2load, "h2load-404.txt"), 0);
    }

    #[test]
    fn sums_redis_benchmark_requests_over_its_tests() {
        let c = read_count(Tool::RedisBenchmark, &captured("redis-benchmark-get.txt")).unwrap();
        assert_eq!(c.requests, 10000);
        assert_eq!(
            c.evidence,
            ["GET: 10000 requests completed in 0.10 seconds"]
        );
        assert_eq!(
            count(
                Tool::RedisBenchmark,
                "redis-benchmark-get-set-pipelined.txt"
            ),
            4000
        );
        let c = read_count(Tool::RedisBenchmark, &captured("redis-benchmark-ping.txt")).unwrap();
        assert_eq!(c.requests, 2000);
        assert_eq!(c.evidence.len(), 2, "{:?}", c.evidence);
        let e =
            read_count(Tool::RedisBenchmark, &captured("redis-benchmark-quiet.txt")).unwrap_err();
        assert!(e.contains("-q or --csv"), "{e}");
    }

    #[test]
    fn reads_oha_2xx_responses_from_text_and_json() {
        assert_eq!(count(Tool::Oha, "oha-text.txt"), 2000);
        assert_eq!(count(Tool::Oha, "oha-json.txt"), 2000);
        assert_eq!(count(Tool::Oha, "oha-404.txt"), 0);
    }

    #[test]
    fn refuses_output_it_does_not_recognise() {
        for t in TOOLS {
            assert!(read_count(t, "Segmentation fault\n").is_err(), "{t:?}");
        }
    }

    #[test]
    fn refuses_counts_that_add_up_past_u64() {
        let max = u64::MAX;
        let redis = format!(
            "====== GET ======\n  {max} requests completed in 0.10 seconds\n\
             ====== SET ======\n  1 requests completed in 0.10 seconds\n"
        );
        let e = read_count(Tool::RedisBenchmark, &redis).unwrap_err();
        assert!(e.contains("more than"), "{e}");
        let oha = format!("{{\"statusCodeDistribution\": {{\"200\": {max}, \"204\": 1}}}}");
        assert!(read_count(Tool::Oha, &oha).is_err());
        let text =
            format!("Status code distribution:\n  [200] {max} responses\n  [201] 1 responses\n");
        assert!(read_count(Tool::Oha, &text).is_err());
    }

    // -----------------------------------------------------------------------
    // Properties: a load tool's output is untrusted text. Any text, and
    // captured outputs mutated, give a count or an error, never a panic.

    const TOOLS: [Tool; 4] = [Tool::Wrk, Tool::H2load, Tool::Oha, Tool::RedisBenchmark];

    use crate::testkit::fuzz;

    /// Every captured output in fixtures/load-tools (whichever are there).
    fn all_captured() -> Vec<String> {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/load-tools");
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".txt"))
            .collect();
        names.sort();
        names.iter().map(|n| captured(n)).collect()
    }

    fn every_tool_reads(text: &str) {
        for t in TOOLS {
            let _ = read_count(t, text);
        }
    }

    #[test]
    fn load_tool_outputs_of_arbitrary_text_never_panic() {
        use proptest::prelude::*;
        fuzz(
            "load_tool_outputs_of_arbitrary_text",
            "\\PC{0,400}",
            |text: String| every_tool_reads(&text),
        );
        // Lines made of the words the parsers look for, and numbers at
        // the edges of u64.
        let word = prop_oneof![
            Just("requests: ".to_string()),
            Just(" succeeded, ".to_string()),
            Just(" requests in ".to_string()),
            Just("Non-2xx or 3xx responses: ".to_string()),
            Just("Status code distribution:\n".to_string()),
            Just("  [200] ".to_string()),
            Just("[2".to_string()),
            Just("] ".to_string()),
            Just(" responses\n".to_string()),
            Just("====== ".to_string()),
            Just(" requests completed in ".to_string()),
            Just("{\"statusCodeDistribution\": {\"200\": ".to_string()),
            Just("}}".to_string()),
            Just("\u{1b}[".to_string()),
            Just("\r".to_string()),
            Just("\n".to_string()),
            Just(", ".to_string()),
            any::<u64>().prop_map(|n| n.to_string()),
            Just(u64::MAX.to_string()),
            Just("18446744073709551616".to_string()),
            "[ -~]{0,8}",
        ];
        fuzz(
            "load_tool_outputs_of_tool_words",
            prop::collection::vec(word, 0..40),
            |words: Vec<String>| every_tool_reads(&words.concat()),
        );
    }

    #[test]
    fn load_tool_outputs_of_mutated_captures_never_panic() {
        use proptest::prelude::*;
        let files = all_captured();
        assert!(
            !files.is_empty(),
            "fixtures/load-tools has captured outputs"
        );
        let edits = prop::collection::vec((any::<usize>(), any::<u8>(), 0u8..4), 1..16);
        fuzz(
            "load_tool_outputs_of_mutated_captures",
            (any::<usize>(), edits, any::<u64>()),
            |(file, edits, big)| {
                let mut b = files[file % files.len()].as_bytes().to_vec();
                for (at, byte, op) in edits {
                    let i = at % b.len().max(1);
                    match op {
                        0 => b[i] = byte,
                        1 => {
                            b.remove(i);
                        }
                        2 => b.insert(i, byte),
                        // A number the tool printed replaced by any u64.
                        _ => {
                            let start = (0..b.len())
                                .map(|k| (i + k) % b.len())
                                .find(|&k| b[k].is_ascii_digit());
                            if let Some(s) = start {
                                let e = (s..b.len())
                                    .find(|&k| !b[k].is_ascii_digit())
                                    .unwrap_or(b.len());
                                b.splice(s..e, big.to_string().into_bytes());
                            }
                        }
                    }
                    if b.is_empty() {
                        b.push(b'x');
                    }
                }
                every_tool_reads(&String::from_utf8_lossy(&b));
            },
        );
    }
}
