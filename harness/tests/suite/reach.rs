//! Servers as they ship: a binary deleted or replaced on disk after it
//! started (every deploy does this). Names and whole stacks come from the
//! mapped object itself (`/proc/PID/map_files/...`), not from whatever the
//! path names now.

use std::path::PathBuf;

use rig::probe::Family;
use rig_fixtures::stacks::Lang;

use super::stacks::{assert_truth_in, measure, print_one_stack_per_event, Fixture};
use super::{probes_shared, root_or_skip};

/// A private directory for one test, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(test: &str) -> Scratch {
        let d = std::env::temp_dir().join(format!("rig-reach-{}-{test}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Scratch(d)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// What happens to the binary on disk once the fixture runs.
enum OnDisk {
    Deleted,
    /// Another file renamed over it, as a package upgrade or a deploy does.
    Replaced,
}

fn stacks_of_a_binary_changed_on_disk(test: &str, how: OnDisk) {
    if !root_or_skip(test) {
        return;
    }
    let _g = probes_shared();
    let dir = Scratch::new(test);
    let exe = dir.0.join("stackcalib");
    std::fs::copy(Lang::C.binary(), &exe).unwrap();
    let mut fx = Fixture::start(&exe);
    match how {
        OnDisk::Deleted => std::fs::remove_file(&exe).unwrap(),
        OnDisk::Replaced => {
            // A different program at the same path: its tables would be
            // wrong for every address of the running one.
            let new = dir.0.join("stackcalib.new");
            std::fs::copy("/bin/true", &new).unwrap();
            std::fs::rename(&new, &exe).unwrap();
        }
    }
    let in_maps = format!("{} (deleted)", exe.display());
    let maps = std::fs::read_to_string(format!("/proc/{}/maps", fx.pid())).unwrap();
    assert!(maps.contains(&in_maps), "{maps}");
    let families = [Family::Alloc, Family::Copy, Family::Locks, Family::Syscalls];
    let a = measure(&mut fx, &families, 200);
    print_one_stack_per_event(&a, fx.pid());
    assert_truth_in(&a, Lang::C, fx.pid(), &families, 200, &in_maps);
}

#[test]
fn a_binary_deleted_on_disk_after_start_keeps_exact_counts_and_whole_stacks() {
    stacks_of_a_binary_changed_on_disk(
        "a_binary_deleted_on_disk_after_start_keeps_exact_counts_and_whole_stacks",
        OnDisk::Deleted,
    );
}

#[test]
fn a_binary_replaced_on_disk_after_start_keeps_exact_counts_and_whole_stacks() {
    stacks_of_a_binary_changed_on_disk(
        "a_binary_replaced_on_disk_after_start_keeps_exact_counts_and_whole_stacks",
        OnDisk::Replaced,
    );
}
