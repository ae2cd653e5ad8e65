//! The rows each leg prints, and the medians per tool at the end.

pub struct Row {
    pub proto: String,
    pub tool: &'static str,
    pub round: usize,
    pub rps: f64,
    pub us: f64,
    pub errors: u64,
}

impl Row {
    pub fn print(&self) {
        println!(
            "{:<6} {:<8} {:>5} {:>12.0} {:>14.2} {:>10}",
            self.proto, self.tool, self.round, self.rps, self.us, self.errors
        );
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.retain(|x| !x.is_nan());
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Per protocol and tool: median req/s and client µs/request over the
/// rounds, the ratio of the medians (tool ÷ rig) and the per-round ratios
/// (tool µs/req ÷ rig µs/req of the same round).
pub fn summary(rows: &[Row]) {
    println!();
    println!(
        "{:<6} {:<8} {:>12} {:>14} {:>10}  per-round µs ratio vs rig",
        "proto", "tool", "median req/s", "median µs/req", "÷ rig"
    );
    let mut protos: Vec<&str> = Vec::new();
    for r in rows {
        if !protos.contains(&r.proto.as_str()) {
            protos.push(&r.proto);
        }
    }
    for proto in protos {
        let of = |tool: &str| -> Vec<&Row> {
            rows.iter()
                .filter(|r| r.proto == proto && r.tool == tool)
                .collect()
        };
        let rig = of("rig");
        let rig_us = median(rig.iter().map(|r| r.us).collect());
        for tool in ["rig", "wrk", "h2load", "oha"] {
            let t = of(tool);
            if t.is_empty() {
                continue;
            }
            let us = median(t.iter().map(|r| r.us).collect());
            let rps = median(t.iter().map(|r| r.rps).collect());
            let per_round: Vec<String> = t
                .iter()
                .map(|r| {
                    let base = rig.iter().find(|g| g.round == r.round).map(|g| g.us);
                    match base {
                        Some(b) => format!("{:.2}", r.us / b),
                        None => "-".into(),
                    }
                })
                .collect();
            println!(
                "{:<6} {:<8} {:>12.0} {:>14.2} {:>10.2}  {}",
                proto,
                tool,
                rps,
                us,
                us / rig_us,
                per_round.join(" ")
            );
        }
    }
}
