//! The application allocators a user declares (`--alloc-func
//! [MODULE!]NAME[@N]`, `--free-func [MODULE!]NAME`), found in this
//! process's modules and probed by the alloc family as a layer beside the
//! heap's (`runtime::pools` says what that layer is).

use super::*;
use crate::probe::allocators::Layer;
use crate::probe::user::{self as spec, UserProbe};
use crate::runtime::alloc::AllocFamily;
use rig_ebpf::abi::alloc_kind;

impl Attacher<'_> {
    /// One layer per module holding a declared function. A declaration
    /// that names no function of the process is refused in the process rig
    /// was pointed at (a misspelling, with the nearest names) and noted in
    /// another process of its tree (a helper running other code).
    pub(super) fn declared_layers(
        &mut self,
        maps: &ProcMaps,
        root: bool,
    ) -> Result<Vec<Layer>, ProbeError> {
        let mut layers: Vec<Layer> = Vec::new();
        let declared: Vec<UserProbe> = self
            .user
            .probes
            .iter()
            .filter(|p| !p.counted_by_user_family())
            .cloned()
            .collect();
        for p in &declared {
            let UserProbe::Alloc {
                name,
                size_arg,
                free,
            } = p
            else {
                continue;
            };
            let (module_pattern, function) = match name.split_once('!') {
                Some((m, f)) => (Some(m), f),
                None => (None, name.as_str()),
            };
            let program = if *free {
                "rig_alloc_free"
            } else {
                crate::runtime::pools::size_program(*size_arg).unwrap_or("rig_alloc_unsized")
            };
            let kind = if *free {
                alloc_kind::POOL_FREE
            } else {
                alloc_kind::POOL_ALLOC
            };
            let mut found = false;
            for o in maps.objects().into_iter().filter(|o| o.executable) {
                if module_pattern.is_some_and(|m| !spec::names::in_module(m, &o.path)) {
                    continue;
                }
                let open = maps.readable_path(&o.path);
                let (Ok(facts), Ok(mkind)) = (
                    crate::elf::ElfFacts::shared(&open),
                    crate::runtime::ModuleKind::of_file(&o.path, &open),
                ) else {
                    continue;
                };
                if facts.lookup_function(function).is_none() {
                    continue;
                }
                found = true;
                let entry = (function.to_string(), program, kind, true);
                match layers.iter_mut().find(|l| l.module == o.path) {
                    Some(l) => {
                        l.entries.push(entry);
                        l.how.push_str(&format!(", {}", p.spec()));
                    }
                    None => layers.push(Layer {
                        family: AllocFamily::Application,
                        module: o.path.clone(),
                        how: format!(
                            "declared by {}: an application allocator, counted as its own layer \
                             beside the heap's totals",
                            p.spec()
                        ),
                        entries: vec![entry],
                        kind: mkind,
                        statically: false,
                    }),
                }
            }
            if !found {
                if root {
                    return Err(spec::no_match(self.pid, p, spec::spellings_near(maps, p)).into());
                }
                self.note(
                    Family::Alloc,
                    p.spec(),
                    format!("matches nothing in pid {}", self.pid),
                );
            }
        }
        Ok(layers)
    }
}
