//! The JVM (HotSpot's `libjvm.so`, as OpenJDK ships it): Java code's
//! objects, copies and locks are the JVM's own, not the C library's, so
//! the families that count those say so by name, with the JVM's own
//! markers that would count them.

use super::{Mapped, Module, Runtime};

/// HotSpot's `libjvm.so` (any JVM that exports the JNI invocation API).
pub struct Jvm;

impl Runtime for Jvm {
    fn name(&self) -> &'static str {
        "jvm"
    }

    fn holds(&self, m: &Module<'_>) -> bool {
        m.facts.lookup_symbol("JNI_CreateJavaVM").is_some()
    }

    fn unseen(&self, _m: &Module<'_>, _at: &Mapped<'_>, family: &str) -> Option<String> {
        let why = match family {
            "alloc" => {
                "the Java heap: objects Java code makes (`new`, arrays, strings) are placed \
                 by the JVM in its own garbage-collected heap, not by malloc, and are not \
                 counted (only the JVM's own mallocs are); started with \
                 -XX:+DTraceAllocProbes, the JVM fires its hotspot:object__alloc marker for \
                 each one, and `--usdt 'hotspot:object__alloc#1/2'` counts them by class"
            }
            "copy" => {
                "Java's array and string copies run in the JIT's own arraycopy stubs and \
                 intrinsics, not in calls to the C library's memcpy, and are not counted"
            }
            "locks" => {
                "Java's monitors (`synchronized`) and java.util.concurrent locks are the \
                 JVM's own, not the C library's mutexes: an uncontended one is an atomic \
                 instruction in Java code and is not counted; started with \
                 -XX:+DTraceMonitorProbes, the JVM fires hotspot:monitor__contended__enter \
                 for each contended monitor enter, which `--usdt` counts"
            }
            _ => return None,
        };
        Some(why.to_string())
    }
}
