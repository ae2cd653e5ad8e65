//! Processes with many executable mappings (a server that dlopens its
//! plugins; Python, JVM and large C++ servers map hundreds): stacks stay
//! whole past the 64 mappings an older table held, and a process past the
//! tables' limit is marked, loudly, instead of losing its stacks quietly.

use std::path::PathBuf;
use std::process::Command;

use rig::probe::Family;
use rig::report::Attribution;
use rig_ebpf::abi::UNWIND_MAX_MAPS;

use super::probes_shared;
use super::stacks::{measure, Fixture};

/// A plugin: one function that allocates, named after nothing in particular
/// (each copy of the file is its own mapping with its own table).
const PLUGIN: &str = r#"
#include <stdlib.h>
void *volatile plugin_sink;
__attribute__((noinline)) void plugin_work(void)
{
	void *p = malloc(72); /* the plugin's allocation */
	plugin_sink = p;
	free(p);
	__asm__ volatile("" ::: "memory");
}
"#;

/// The host: dlopens every path of argv, then per line on stdin calls the
/// last plugin's plugin_work() (the lowest mapped, far from libc).
const HOST: &str = r#"
#include <dlfcn.h>
#include <stdio.h>
#include <unistd.h>
int main(int argc, char **argv)
{
	void (*work)(void) = 0;
	for (int i = 1; i < argc; i++) {
		void *h = dlopen(argv[i], RTLD_NOW | RTLD_LOCAL);
		if (!h) {
			fprintf(stderr, "%s\n", dlerror());
			return 1;
		}
		work = (void (*)(void))dlsym(h, "plugin_work");
	}
	char buf[64];
	if (write(1, "READY\n", 6) != 6)
		return 1;
	for (;;) {
		if (read(0, buf, sizeof buf) <= 0)
			return 0;
		work();
		if (write(1, "ok\n", 3) != 3)
			return 1;
	}
}
"#;

/// A temporary directory with the host and `plugins` copies of the plugin
/// (removed on drop).
struct Plugins {
    dir: PathBuf,
    libs: Vec<PathBuf>,
}

impl Plugins {
    fn build(plugins: usize) -> Plugins {
        let dir =
            std::env::temp_dir().join(format!("rig-mappings-{}-{plugins}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let gcc = |args: &[&str], src: &str, name: &str| {
            let file = dir.join(name).with_extension("c");
            std::fs::write(&file, src).unwrap();
            let ok = Command::new("gcc")
                .args(["-O2", "-g", "-fno-builtin", "-fno-optimize-sibling-calls"])
                .args(args)
                .arg("-o")
                .arg(dir.join(name))
                .arg(&file)
                .status()
                .unwrap();
            assert!(ok.success(), "{name} compiles");
        };
        gcc(&["-shared", "-fPIC"], PLUGIN, "plugin.so");
        gcc(&[], HOST, "host");
        // Copies, not links: each is another file, so another mapping.
        let libs = (0..plugins)
            .map(|i| {
                let p = dir.join(format!("libplugin{i}.so"));
                std::fs::copy(dir.join("plugin.so"), &p).unwrap();
                p
            })
            .collect();
        Plugins { dir, libs }
    }

    fn start(&self) -> Fixture {
        Fixture::start_with(&self.dir.join("host"), &self.libs)
    }
}

impl Drop for Plugins {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Executable file-backed mappings of `pid`.
fn exec_mappings(pid: u32) -> usize {
    std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .unwrap()
        .lines()
        .filter(|l| l.split_whitespace().nth(1).is_some_and(|p| p.contains('x')))
        .filter(|l| {
            l.split_whitespace()
                .nth(5)
                .is_some_and(|p| p.starts_with('/'))
        })
        .count()
}

fn plugin_rows(a: &Attribution) -> Vec<&rig::report::AllocRow> {
    a.alloc
        .iter()
        .filter(|r| r.site.function.as_deref() == Some("plugin_work"))
        .collect()
}

#[test]
fn stacks_stay_whole_in_a_process_with_90_dlopened_libraries() {
    root_or_skip!();
    let p = Plugins::build(90);
    let _g = probes_shared();
    let mut fx = p.start();
    assert!(exec_mappings(fx.pid()) > 90, "the host maps its plugins");
    let n = 200;
    let a = measure(&mut fx, &[Family::Alloc], n);
    let rows = plugin_rows(&a);
    assert_eq!(
        rows.iter()
            .map(|r| (r.kind.as_str(), r.calls))
            .collect::<Vec<_>>(),
        vec![("malloc", n), ("free", n)],
        "{:#?}",
        a.alloc
    );
    assert!(a.stacks.limits.is_empty(), "{:?}", a.stacks.limits);
    for r in a.stacks.rows.iter().filter(|r| r.family == Family::Alloc) {
        let s = &a.stacks.stacks[r.stack.as_ref().unwrap()];
        assert!(
            s.incomplete.is_empty(),
            "{:?}: {:#?}",
            s.incomplete,
            s.frames
        );
        let names: Vec<_> = s
            .frames
            .iter()
            .filter_map(|f| f.function.as_deref())
            .collect();
        assert!(
            names.contains(&"plugin_work") && names.contains(&"main"),
            "{names:?}"
        );
    }
}

#[test]
fn a_process_past_the_mapping_limit_is_marked_incomplete_for_stacks() {
    root_or_skip!();
    let p = Plugins::build(UNWIND_MAX_MAPS + 8);
    let _g = probes_shared();
    let mut fx = p.start();
    let n = 100;
    let a = measure(&mut fx, &[Family::Alloc], n);
    // The counts are exact all the same.
    let rows = plugin_rows(&a);
    assert_eq!(
        rows.iter().map(|r| r.calls).sum::<u64>(),
        2 * n,
        "{:#?}",
        a.alloc
    );
    let limit = a
        .stacks
        .limits
        .iter()
        .find(|l| l.contains(&format!("pid {}", fx.pid())))
        .unwrap_or_else(|| panic!("the limit is reported: {:?}", a.stacks.limits));
    assert!(
        limit.contains(&format!("rig's tables hold {UNWIND_MAX_MAPS}")),
        "{limit}"
    );
    // And the terminal says it before anything else about stacks.
    let text = rig::report::table::render(&a, 5);
    assert!(text.contains("warning: stacks INCOMPLETE: pid"), "{text}");
}
