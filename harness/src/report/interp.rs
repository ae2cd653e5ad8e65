//! Interpreted frames in a stack: the frames an interpreter (CPython) kept
//! for the thread when the event fired, which the kernel side read beside
//! the native walk (`struct ustack` in stack.h), put where the native
//! calls that ran them are.
//!
//! In: a stack's native frames (named), its interpreted frames (code
//! object addresses) and the names the window read for them. Out: one
//! stack, innermost first, and why any native call of the interpreter
//! kept its own name.

use std::collections::BTreeMap;

use rig_ebpf::abi::{iframe, stack_flag, UStack};

use crate::probe::Window;
use crate::runtime::{Interp, InterpName};
use crate::symbolize::{Naming, Site};

/// What [`splice`] did to a stack.
#[derive(Default)]
pub struct Spliced {
    /// Index of the innermost interpreted frame.
    pub first: Option<usize>,
    /// The module whose evaluation function ran them (the interpreter).
    pub module: Option<String>,
    /// Why calls of the evaluation function are left as they are (the
    /// thread's frames could not be read).
    pub why: Vec<String>,
}

impl Spliced {
    /// The user site of the stack, given the native rule's `native`: the
    /// innermost interpreted frame, unless the native site is further in
    /// and outside the interpreter (a C extension's function).
    pub fn user_site(&self, frames: &[Site], native: Option<usize>) -> usize {
        match (self.first, native) {
            (Some(i), Some(n)) if n < i && frames[n].module != self.module => n,
            (Some(i), _) => i,
            (None, n) => n.unwrap_or(0),
        }
    }
}

/// Puts `s`'s interpreted frames in place of the calls of the interpreter's
/// evaluation function in `frames`: each call runs the frames from the
/// innermost one not yet placed up to the first one the interpreter
/// entered from C (bit 0 of its word).
pub fn splice(w: &Window, tgid: u32, s: &UStack, frames: &mut Vec<Site>) -> Spliced {
    match w.interp.get(&tgid) {
        Some((interp, names)) => splice_with(interp, names, s, frames),
        None => Spliced::default(),
    }
}

fn splice_with(
    interp: &Interp,
    names: &BTreeMap<u64, InterpName>,
    s: &UStack,
    frames: &mut Vec<Site>,
) -> Spliced {
    let words = s.iframes();
    let mut out = Vec::with_capacity(frames.len() + words.len());
    let (mut next, mut left) = (0, 0);
    let mut done = Spliced::default();
    for f in frames.drain(..) {
        if f.function.as_deref() != Some(interp.evaluator) {
            out.push(f);
        } else if next < words.len() {
            done.first.get_or_insert(out.len());
            done.module
                .get_or_insert(f.module.clone().unwrap_or_default());
            while next < words.len() {
                let word = words[next];
                next += 1;
                let name = names.get(&iframe::named(word));
                out.push(site(interp, name, iframe::code(word)));
                if iframe::entered(word) {
                    break;
                }
            }
        } else {
            left += 1;
            out.push(f);
        }
    }
    // A native walk cut short (its reason is the stack's) never reached
    // the evaluator calls that ran the outer frames: they follow the cut,
    // outermost last, rather than vanish.
    let cut = stack_flag::TRUNCATED
        | stack_flag::NO_TABLE
        | stack_flag::NO_ROW
        | stack_flag::BAD_RULE
        | stack_flag::READ_FAIL
        | stack_flag::NO_PROC
        | stack_flag::NO_REGS
        | stack_flag::LOST_RETURN;
    let native_cut = s.flags & cut != 0;
    if native_cut && next < words.len() {
        done.first.get_or_insert(out.len());
        for &word in &words[next..] {
            let name = names.get(&iframe::named(word));
            out.push(site(interp, name, iframe::code(word)));
        }
    }
    *frames = out;
    if left > 0 {
        for (bit, what) in [
            (
                stack_flag::INTERP_TRUNCATED,
                "more interpreted frames than rig keeps (32)",
            ),
            (
                stack_flag::INTERP_READ_FAIL,
                "the interpreter's frames were unreadable",
            ),
            (
                stack_flag::INTERP_NO_THREAD,
                "no thread state of the interpreter was this thread's",
            ),
        ] {
            if s.flags & bit != 0 {
                done.why.push(format!("{}: {what}", interp.language));
            }
        }
    }
    done
}

/// The interpreted function whose frame word is `word` in process `tgid`
/// of the window: the function a call counted by `--interp-calls`
/// entered.
pub(super) fn entered(w: &Window, tgid: u32, word: u64) -> Site {
    match w.interp.get(&tgid) {
        Some((interp, names)) => site(interp, names.get(&word), iframe::code(word)),
        None => {
            let code = iframe::code(word);
            let mut s = site(
                &Interp {
                    layout: Default::default(),
                    evaluator: "",
                    language: "interpreted",
                },
                None,
                code,
            );
            s.function = Some(format!(
                "[interpreted code at {code:#x}, its process gone before the window's end]"
            ));
            s
        }
    }
}

/// An interpreted frame as a site: its function, file and first line, in
/// its language.
fn site(interp: &Interp, name: Option<&InterpName>, code: u64) -> Site {
    let (function, file, line) = match name {
        Some(InterpName::Function {
            function,
            file,
            line,
        }) => (function.clone(), Some(file.clone()), Some(*line)),
        Some(InterpName::Gone(why)) => (why.clone(), None, None),
        None => (
            format!("[{} code at {code:#x}, unnamed]", interp.language),
            None,
            None,
        ),
    };
    Site {
        addr: code,
        module: Some(interp.language.to_string()),
        module_offset: 0,
        build_id: None,
        function: Some(function),
        function_offset: 0,
        file,
        line,
        inlined: Vec::new(),
        naming: Naming::Interpreted,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn native(function: &str, module: &str) -> Site {
        Site {
            addr: 0,
            module: Some(module.to_string()),
            module_offset: 0,
            build_id: None,
            function: Some(function.to_string()),
            function_offset: 0,
            file: None,
            line: None,
            inlined: Vec::new(),
            naming: Naming::Symbol,
        }
    }

    fn interp() -> Interp {
        Interp {
            layout: Default::default(),
            evaluator: "eval",
            language: "python",
        }
    }

    fn named(functions: &[(u64, &str)]) -> BTreeMap<u64, InterpName> {
        functions
            .iter()
            .map(|&(code, f)| {
                let name = InterpName::Function {
                    function: f.to_string(),
                    file: "/srv/app.py".to_string(),
                    line: code as u32,
                };
                (code, name)
            })
            .collect()
    }

    fn stack(words: &[u64], flags: u32) -> UStack {
        let mut s = UStack {
            flags,
            ilen: words.len() as u32,
            ..Default::default()
        };
        s.iframe[..words.len()].copy_from_slice(words);
        s
    }

    fn functions(frames: &[Site]) -> Vec<String> {
        frames.iter().map(|f| f.label()).collect()
    }

    /// Each call of the evaluation function runs the frames up to the one
    /// entered from C (bit 0): `leaf` and `mid` in the inner call, `outer`
    /// in the outer one; the user site is the innermost Python frame, past
    /// the interpreter's own C.
    #[test]
    fn interpreted_frames_take_the_place_of_the_evaluator_calls_that_ran_them() {
        let mut frames = vec![
            native("malloc", "libc.so.6"),
            native("PyUnicode_New", "python3"),
            native("eval", "python3"),
            native("call_c", "python3"),
            native("eval", "python3"),
            native("main", "python3"),
        ];
        let s = stack(&[0x10, 0x20 | 1, 0x30 | 1], 0);
        let names = named(&[(0x10, "leaf"), (0x20, "mid"), (0x30, "outer")]);
        let done = splice_with(&interp(), &names, &s, &mut frames);
        assert_eq!(
            functions(&frames),
            [
                "malloc",
                "PyUnicode_New",
                "leaf (app.py:16) [python]",
                "mid (app.py:32) [python]",
                "call_c",
                "outer (app.py:48) [python]",
                "main"
            ]
        );
        assert_eq!(done.first, Some(2));
        assert!(done.why.is_empty());
        // The native rule would pick PyUnicode_New (index 1): the
        // interpreter's own, so the Python function is the site...
        assert_eq!(done.user_site(&frames, Some(1)), 2);
        // ...but a C extension's function further in stays the site.
        frames[1].module = Some("_json.so".to_string());
        assert_eq!(done.user_site(&frames, Some(1)), 1);
    }

    /// A native walk cut short before the evaluator (a module without
    /// unwind rows): the Python frames follow the cut, and are the site.
    #[test]
    fn interpreted_frames_follow_a_native_walk_cut_short() {
        let mut frames = vec![native("malloc", "libc.so.6"), native("ext_fn", "ext.so")];
        let s = stack(&[0x10 | 1], rig_ebpf::abi::stack_flag::NO_ROW);
        let names = named(&[(0x10, "handler")]);
        let done = splice_with(&interp(), &names, &s, &mut frames);
        assert_eq!(
            functions(&frames),
            ["malloc", "ext_fn", "handler (app.py:16) [python]"]
        );
        assert_eq!(done.first, Some(2));
    }

    /// An evaluator call with no frame left keeps its native name, and the
    /// stack says why (here: the thread state was not found); a code
    /// object gone by the window's end is named as gone, never dropped.
    #[test]
    fn evaluator_calls_without_frames_are_kept_and_said() {
        let mut frames = vec![native("eval", "python3"), native("eval", "python3")];
        let s = stack(&[0x40 | 1], rig_ebpf::abi::stack_flag::INTERP_NO_THREAD);
        let mut names = BTreeMap::new();
        names.insert(
            0x40,
            InterpName::Gone("[Python code at 0x40, freed]".to_string()),
        );
        let done = splice_with(&interp(), &names, &s, &mut frames);
        assert_eq!(
            functions(&frames),
            ["[Python code at 0x40, freed] [python]", "eval"]
        );
        assert_eq!(
            done.why,
            ["python: no thread state of the interpreter was this thread's"]
        );
    }

    /// Two Python functions are two sites though both are of the module
    /// `python` at offset 0 (the native rule, module and offset, would make
    /// every Python function one site); one function at one line is one.
    #[test]
    fn interpreted_sites_are_the_same_by_code_object_and_line() {
        let names = named(&[(0x1000, "make_item"), (0x2000, "work")]);
        let a = site(&interp(), names.get(&0x1000), 0x1000);
        let b = site(&interp(), names.get(&0x2000), 0x2000);
        assert!(!crate::report::same_site(&a, &b));
        assert!(crate::report::same_site(&a, &a.clone()));
        let mut native = native("make_item", "python");
        native.addr = 0x1000;
        assert!(!crate::report::same_site(&a, &native));
    }
}
