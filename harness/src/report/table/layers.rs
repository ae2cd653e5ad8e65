//! The alloc family's layers beside the heap's: an application's pools
//! (`--alloc-func`), a managed runtime's objects and collections counted
//! from its markers (the JVM's `java` layer).

use std::fmt::Write as _;

use super::{per, Attribution};

/// One line per layer beside the heap's, never in its totals.
pub(super) fn beside_the_heap(out: &mut String, a: &Attribution, n: Option<u64>, unit: &str) {
    for l in a.alloc_layers.iter().filter(|l| l.beside_the_heap) {
        let t = &l.totals;
        let gc = match t.gc_cycles {
            0 => String::new(),
            c => format!(", {} GC cycles{unit}", per(c, n)),
        };
        // A layer of collections alone: its runtime's objects are not
        // counted (its marker for them is off), which a loss says.
        if t.allocations == 0 && t.frees == 0 && t.gc_cycles > 0 {
            let _ = writeln!(
                out,
                "{} allocator: {} GC cycles{unit} (its objects are not counted here)",
                l.allocator,
                per(t.gc_cycles, n)
            );
            continue;
        }
        let not_sized = if t.not_sized > 0 {
            format!(
                " ({} of them unsized: rig reads no size for them, their bytes are not in \
                 the {} bytes)",
                per(t.not_sized, n),
                per(t.bytes, n)
            )
        } else {
            String::new()
        };
        let _ = writeln!(
            out,
            "{} allocator: {} allocs{unit}{not_sized}, {} bytes{unit}, {} frees{unit}{gc}: its \
             own layer, beside the heap's totals above (a pool growing by malloc is counted there)",
            l.allocator,
            per(t.allocations, n),
            per(t.bytes, n),
            per(t.frees, n),
        );
    }
}
