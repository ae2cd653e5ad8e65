//! Which commits of a step's interval touched the function the step is at.
//!
//! In: a work tree, the interval's commits and the names the function had
//! there. Out: the commits whose diff (`git show -U0`, against the first
//! parent) changes a line of the function in a source file, before or
//! after the commit. The function's lines run from its definition (the
//! name followed by `(`, not indented, or after `fn`, `func`, `def`, and
//! not ending in `;`) to the closing line at the definition's indentation.
//! A file renamed by a commit is followed (`--find-renames`): its hunks
//! are against the old path, so a rename alone touches nothing.
//! A hunk's `@@ … @@ name` context is not enough: git names there the last
//! definition above the hunk, so the comment above the next function, or
//! a function added after it, would count.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ops::RangeInclusive;
use std::path::Path;

use serde::Serialize;

use crate::gitfacts;

/// What [`StepReport`](super::StepReport) says about the commits of a
/// step at a per-site counter.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Touched {
    /// The function as the series names it.
    pub function: String,
    /// The commits that touched it, `short subject` (as the step's
    /// `commits`), oldest first.
    pub commits: Vec<String>,
    /// The commits that did not, but changed a line naming it (a caller,
    /// a table of function pointers).
    pub naming: Vec<String>,
    /// The sentence the table and the page print.
    pub message: String,
}

/// A commit of an interval: its full id and its `short subject` line.
pub struct Commit {
    pub id: String,
    pub line: String,
}

/// Extensions of the files read as source code.
const SOURCE: &[&str] = &[
    "c", "h", "cc", "cp", "cpp", "cxx", "c++", "hh", "hpp", "hxx", "inl", "rs", "go", "zig", "m",
    "mm", "java", "kt", "py", "js", "ts",
];

/// Intervals longer than this are not read: each commit costs a `git
/// show` and two file reads per source file it changes.
pub const MAX_COMMITS: usize = 200;

/// What each commit did to each function asked about, so that the other
/// sites of one function (its `malloc calls`, `free calls`, `malloc
/// bytes`...) and the other cases read a commit once.
#[derive(Default)]
pub struct Seen(RefCell<HashMap<(String, Vec<String>), Contact>>);

/// Which of `commits` touched function `f` (known also as `names`), in the
/// repository of `work_tree`.
pub fn touched(
    work_tree: &Path,
    commits: &[Commit],
    f: &str,
    names: &[String],
    seen: &Seen,
) -> Touched {
    let mut idents: Vec<&str> = names.iter().filter_map(|n| source_name(n)).collect();
    idents.dedup();
    if commits.len() > MAX_COMMITS {
        return Touched {
            function: f.to_string(),
            commits: Vec::new(),
            naming: Vec::new(),
            message: format!(
                "{} commits in the interval, more than {MAX_COMMITS}: not read for {f}",
                commits.len()
            ),
        };
    }
    let contact: Vec<Contact> = commits
        .iter()
        .map(|c| {
            if idents.is_empty() {
                return Contact::None;
            }
            let key = (c.id.clone(), idents.iter().map(|s| s.to_string()).collect());
            if let Some(k) = seen.0.borrow().get(&key) {
                return *k;
            }
            let k = contact(work_tree, &c.id, &idents);
            seen.0.borrow_mut().insert(key, k);
            k
        })
        .collect();
    let with = |k: Contact| -> Vec<&Commit> {
        commits
            .iter()
            .zip(&contact)
            .filter(|(_, c)| **c == k)
            .map(|(c, _)| c)
            .collect()
    };
    let (hit, naming) = (with(Contact::Touches), with(Contact::Names));
    let short = |c: &Commit| c.line.split(' ').next().unwrap_or_default().to_string();
    let shorts = |v: &[&Commit]| v.iter().map(|c| short(c)).collect::<Vec<_>>().join(", ");
    let message = match hit.as_slice() {
        [] if naming.is_empty() => format!(
            "no commit in the interval touched {f} (the change is elsewhere: its callers, \
             callees, flags or libraries)"
        ),
        [] => format!(
            "no commit in the interval touched {f} (the change is elsewhere: its callers, \
             callees, flags or libraries); {} changed a line naming it",
            shorts(&naming)
        ),
        [one] if commits.len() == 1 => format!("{} touched {f}", short(one)),
        [one] => format!("only {} touched {f}", short(one)),
        many => format!("{} touched {f}", shorts(many)),
    };
    Touched {
        function: f.to_string(),
        commits: hit.iter().map(|c| c.line.clone()).collect(),
        naming: naming.iter().map(|c| c.line.clone()).collect(),
        message,
    }
}

/// What one commit did to a function.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Contact {
    /// Changed a line of it.
    Touches,
    /// Changed a line elsewhere that names it.
    Names,
    None,
}

/// The identifier a symbol's name has in source code: `ns::Type::f(int)`
/// → `f`, `main.(*T).Serve` → `Serve`, GCC's clones `f.part.0`, `f.cold`
/// → `f`, Rust's `{{closure}}` and Go's `funcN` closures → their function.
pub fn source_name(symbol: &str) -> Option<&str> {
    // C++'s parameters go; Go's receiver, `.(*T).`, stays.
    let s = match symbol.find('(') {
        Some(i) if !symbol[..i].ends_with('.') => &symbol[..i],
        _ => symbol,
    };
    let s = s
        .rsplit("::")
        .find(|p| !p.is_empty() && !p.starts_with("{{"))?;
    let s = s.split('<').next()?;
    let gcc = [
        "cold",
        "part",
        "isra",
        "constprop",
        "lto_priv",
        "localalias",
    ];
    // A clone's suffix, a digit or a Go closure (`func1`) is no name.
    let suffix = |p: &str| {
        let digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
        p.is_empty() || gcc.contains(&p) || digits(p) || p.strip_prefix("func").is_some_and(digits)
    };
    let part = s.split('.').rev().find(|p| !suffix(p))?;
    let ident = part.trim_matches(|c| matches!(c, '(' | ')' | '*'));
    let ok = ident
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'$')
        && !ident.starts_with(|c: char| c.is_ascii_digit());
    (ok && !ident.is_empty()).then_some(ident)
}

fn contact(work_tree: &Path, id: &str, idents: &[&str]) -> Contact {
    let Some(diff) = gitfacts::git_output(
        work_tree,
        &[
            "show",
            "-U0",
            "--format=",
            "--no-color",
            "--no-ext-diff",
            // A renamed file is diffed against its old path: a rename
            // alone changes no line of a function, and an edit made with
            // the rename is a hunk of the function as in any other commit
            // (without it, git deletes the old file and adds the new one,
            // and every function in it would be touched).
            "--find-renames",
            "--diff-merges=first-parent",
            id,
        ],
    ) else {
        return Contact::None;
    };
    let text = |rev: &str, path: &str| {
        gitfacts::git_output(work_tree, &["show", &format!("{rev}:{path}")]).unwrap_or_default()
    };
    let is_source = |p: &Option<String>| {
        p.as_deref()
            .and_then(|p| Path::new(p).extension())
            .and_then(|e| e.to_str())
            .is_some_and(|e| SOURCE.contains(&e))
    };
    let files: Vec<FileDiff> = parse_diff(&diff)
        .into_iter()
        .filter(|fd| is_source(&fd.old_path) || is_source(&fd.new_path))
        .collect();
    let touches = files.iter().any(|fd| {
        let old = fd
            .old_path
            .as_deref()
            .map_or(String::new(), |p| text(&format!("{id}^"), p));
        let new = fd
            .new_path
            .as_deref()
            .map_or(String::new(), |p| text(id, p));
        idents.iter().any(|f| {
            let (before, after) = (function_lines(&old, f), function_lines(&new, f));
            fd.hunks.iter().any(|h| {
                before.iter().any(|r| overlaps(r, h.old))
                    || after.iter().any(|r| overlaps(r, h.new))
            })
        })
    });
    let names = || {
        files.iter().any(|fd| {
            fd.changed
                .iter()
                .any(|l| idents.iter().any(|f| names_word(l, f)))
        })
    };
    if touches {
        Contact::Touches
    } else if names() {
        Contact::Names
    } else {
        Contact::None
    }
}

/// One hunk of a `-U0` diff: `(start, count)` in the old and the new file,
/// as its `@@ -a,b +c,d @@` line says (a count of 0: nothing on that side,
/// the change sits after line `start`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hunk {
    pub old: (u32, u32),
    pub new: (u32, u32),
}

/// One file of a diff; a path is `None` on the side where it does not
/// exist (`/dev/null`).
#[derive(Debug, PartialEq, Eq)]
pub struct FileDiff {
    pub old_path: Option<String>,
    pub new_path: Option<String>,
    pub hunks: Vec<Hunk>,
    /// The lines removed and added, without their `-` or `+`.
    pub changed: Vec<String>,
}

/// The files and hunks of `git show -U0 --format=` output.
pub fn parse_diff(text: &str) -> Vec<FileDiff> {
    let mut out: Vec<FileDiff> = Vec::new();
    let path = |s: &str, prefix: &str| -> Option<String> {
        (s != "/dev/null").then(|| s.strip_prefix(prefix).unwrap_or(s).to_string())
    };
    for line in text.lines() {
        if line.starts_with("diff --git ") {
            out.push(FileDiff {
                old_path: None,
                new_path: None,
                hunks: Vec::new(),
                changed: Vec::new(),
            });
        } else if let Some(f) = out
            .last_mut()
            .filter(|f| !f.hunks.is_empty() && (line.starts_with('+') || line.starts_with('-')))
        {
            // Inside the hunks `---` is a removed line, not a header.
            f.changed.push(line[1..].to_string());
        } else if let (Some(f), Some(p)) = (out.last_mut(), line.strip_prefix("--- ")) {
            f.old_path = path(p.trim_end(), "a/");
        } else if let (Some(f), Some(p)) = (out.last_mut(), line.strip_prefix("+++ ")) {
            f.new_path = path(p.trim_end(), "b/");
        } else if let (Some(f), Some(h)) = (out.last_mut(), line.strip_prefix("@@ -")) {
            let mut parts = h.split(' ');
            let range = |s: Option<&str>| -> Option<(u32, u32)> {
                let s = s?;
                Some(match s.split_once(',') {
                    Some((a, b)) => (a.parse().ok()?, b.parse().ok()?),
                    None => (s.parse().ok()?, 1),
                })
            };
            let old = range(parts.next());
            let new = range(parts.next().and_then(|p| p.strip_prefix('+')));
            if let (Some(old), Some(new)) = (old, new) {
                f.hunks.push(Hunk { old, new });
            }
        }
    }
    out
}

/// Does a hunk side `(start, count)` change a line of `r`? A count of 0
/// inserts (or, on the other side, deletes) after line `start`: inside the
/// function when that line is in it and is not its last.
fn overlaps(r: &RangeInclusive<u32>, (start, count): (u32, u32)) -> bool {
    if count == 0 {
        *r.start() <= start && start < *r.end()
    } else {
        start <= *r.end() && start + count > *r.start()
    }
}

fn indent(line: &str) -> usize {
    line.len() - line.trim_start().len()
}

/// Is `name` in `line` as an identifier of its own?
fn names_word(line: &str, name: &str) -> bool {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '$';
    line.match_indices(name).any(|(i, _)| {
        !line[..i].chars().next_back().is_some_and(ident)
            && !line[i + name.len()..].chars().next().is_some_and(ident)
    })
}

/// Is `name` in `line` as an identifier followed by `(` or `<`?
fn names_call_form(line: &str, name: &str) -> bool {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '$';
    line.match_indices(name).any(|(i, _)| {
        let before = line[..i].chars().next_back();
        let after = line[i + name.len()..].trim_start().chars().next();
        !before.is_some_and(ident) && matches!(after, Some('(' | '<'))
    })
}

/// The 1-based line ranges of the definitions of `name` in `source`.
pub fn function_lines(source: &str, name: &str) -> Vec<RangeInclusive<u32>> {
    let lines: Vec<&str> = source.lines().collect();
    let mut out = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        let t = l.trim();
        if !names_call_form(l, name) || t.ends_with(';') {
            continue;
        }
        let keyword = ["fn ", "func ", "def "]
            .iter()
            .any(|k| t.starts_with(k) || t.contains(&format!(" {k}")));
        let top = indent(l) == 0 && t.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_');
        if !(keyword || top) {
            continue;
        }
        let at = indent(l);
        let mut end = lines.len();
        for (j, m) in lines.iter().enumerate().skip(i + 1) {
            let u = m.trim();
            if u.is_empty() || indent(m) > at || u.starts_with(['{', ')', '#']) {
                continue;
            }
            // The closing line is the function's; any other line at its
            // indentation is the next thing (Python, or no body at all).
            end = if u.starts_with('}') { j + 1 } else { j };
            break;
        }
        out.push(i as u32 + 1..=end.max(i + 1) as u32);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const C: &str = "\
/* 3 x malloc */
CALIB_FN void calib_alloc_small(void)
{
    void *p[3];
    p[0] = malloc(1);
    free(p[0]);
}

/* calloc */
CALIB_FN void calib_alloc_calloc(void)
{
    calib_alloc_small();
}
";

    #[test]
    fn a_function_runs_from_its_definition_to_its_closing_brace() {
        assert_eq!(function_lines(C, "calib_alloc_small"), vec![2..=7]);
        assert_eq!(function_lines(C, "calib_alloc_calloc"), vec![10..=13]);
        let rs = "impl A {\n    pub fn f(&self) -> u32 {\n        g(1)\n    }\n    fn h() {}\n}\n";
        assert_eq!(function_lines(rs, "f"), vec![2..=4]);
        assert_eq!(function_lines(rs, "g"), vec![]);
        let go = "func (s *S) Serve(w W) {\n\tw.Write()\n}\n";
        assert_eq!(function_lines(go, "Serve"), vec![1..=3]);
    }

    #[test]
    fn only_hunks_inside_the_function_touch_it() {
        let r = 2..=7;
        assert!(overlaps(&r, (4, 1)));
        assert!(overlaps(&r, (5, 0)), "an insertion after line 5");
        assert!(
            !overlaps(&r, (7, 0)),
            "an insertion after the closing brace"
        );
        assert!(!overlaps(&r, (9, 2)), "the comment above the next function");
        assert!(
            overlaps(&r, (1, 2)),
            "a hunk that reaches into the definition"
        );
    }

    #[test]
    fn a_diff_gives_its_files_and_hunk_ranges() {
        let d = "diff --git a/s.c b/s.c\nindex 1..2 100644\n--- a/s.c\n+++ b/s.c\n\
                 @@ -4 +4 @@ CALIB_FN void calib_alloc_small(void)\n-x\n+y\n\
                 @@ -9,0 +10,2 @@ CALIB_FN void calib_alloc_small(void)\n+a\n+b\n\
                 diff --git a/new.c b/new.c\nnew file mode 100644\n--- /dev/null\n+++ b/new.c\n\
                 @@ -0,0 +1 @@\n+int x;\n";
        let f = parse_diff(d);
        assert_eq!(f.len(), 2);
        assert_eq!(f[0].old_path.as_deref(), Some("s.c"));
        assert_eq!(
            f[0].hunks,
            vec![
                Hunk {
                    old: (4, 1),
                    new: (4, 1)
                },
                Hunk {
                    old: (9, 0),
                    new: (10, 2)
                }
            ]
        );
        assert_eq!(f[0].changed, vec!["x", "y", "a", "b"]);
        assert_eq!(f[1].old_path, None);
        assert_eq!(f[1].new_path.as_deref(), Some("new.c"));
    }

    #[test]
    fn a_symbol_is_looked_up_by_its_source_identifier() {
        assert_eq!(source_name("calib_alloc_small"), Some("calib_alloc_small"));
        assert_eq!(
            source_name("calib_alloc_small.part.0"),
            Some("calib_alloc_small")
        );
        assert_eq!(source_name("ns::Conn::read(int)"), Some("read"));
        assert_eq!(source_name("peer::serve::{{closure}}"), Some("serve"));
        assert_eq!(source_name("main.(*Server).Serve"), Some("Serve"));
        assert_eq!(source_name("main.handler.func1"), Some("handler"));
        assert_eq!(source_name("<unknown>"), None);
    }

    #[test]
    fn the_commit_that_edits_the_function_is_named_and_its_neighbours_are_not() {
        let d = tempfile::tempdir().unwrap();
        let git = |args: &[&str]| crate::testkit::git(d.path(), args);
        let src = d.path().join("s.c");
        git(&["init", "-q"]);
        std::fs::write(&src, C).unwrap();
        git(&["add", "s.c"]);
        git(&["commit", "-qm", "import"]);
        let mut commits = Vec::new();
        for (from, to, msg) in [
            (
                "/* calloc */",
                "/* calloc, zeroed */",
                "a comment above the next function",
            ),
            (
                "    free(p[0]);\n",
                "    p[1] = malloc(1);\n    free(p[0]);\n",
                "one more malloc",
            ),
            (
                "calib_alloc_small();\n}",
                "calib_alloc_small();\n    calib_alloc_small();\n}",
                "call it twice",
            ),
        ] {
            let t = std::fs::read_to_string(&src).unwrap();
            assert!(t.contains(from), "{from}");
            std::fs::write(&src, t.replace(from, to)).unwrap();
            git(&["commit", "-qam", msg]);
            commits.push(Commit {
                id: git(&["rev-parse", "HEAD"]),
                line: git(&["log", "-1", "--format=%h %s"]),
            });
        }
        let names = vec!["calib_alloc_small".to_string()];
        let seen = Seen::default();
        let t = touched(d.path(), &commits, "calib_alloc_small", &names, &seen);
        assert_eq!(t.commits, vec![commits[1].line.clone()]);
        let short = commits[1].line.split(' ').next().unwrap();
        assert_eq!(t.message, format!("only {short} touched calib_alloc_small"));
        assert_eq!(t.naming, vec![commits[2].line.clone()], "{t:?}");
        // Calling it twice is a change of its caller, which names it.
        let t = touched(d.path(), &commits[2..], "calib_alloc_small", &names, &seen);
        assert!(t.commits.is_empty());
        assert_eq!(t.naming, vec![commits[2].line.clone()]);
        let short = commits[2].line.split(' ').next().unwrap();
        assert_eq!(
            t.message,
            format!(
                "no commit in the interval touched calib_alloc_small (the change is elsewhere: \
                 its callers, callees, flags or libraries); {short} changed a line naming it"
            )
        );
    }

    #[test]
    fn a_renamed_source_file_is_followed_and_the_rename_alone_touches_nothing() {
        let d = tempfile::tempdir().unwrap();
        let git = |args: &[&str]| crate::testkit::git(d.path(), args);
        git(&["init", "-q"]);
        std::fs::write(d.path().join("s.c"), C).unwrap();
        git(&["add", "s.c"]);
        git(&["commit", "-qm", "import"]);
        std::fs::create_dir(d.path().join("src")).unwrap();
        let edit = |file: &str, from: &str, to: &str| {
            let p = d.path().join(file);
            let t = std::fs::read_to_string(&p).unwrap();
            assert!(t.contains(from), "{from}");
            std::fs::write(&p, t.replace(from, to)).unwrap();
        };
        let mut commits = Vec::new();
        let mut done = |msg: &str| {
            git(&["add", "-A"]);
            git(&["commit", "-qm", msg]);
            commits.push(Commit {
                id: git(&["rev-parse", "HEAD"]),
                line: git(&["log", "-1", "--format=%h %s"]),
            });
        };
        git(&["mv", "s.c", "src/server.c"]);
        done("move s.c to src/server.c");
        edit("src/server.c", "p[0] = malloc(1);", "p[0] = malloc(2);");
        done("malloc(2)");
        git(&["mv", "src/server.c", "src/calib.c"]);
        edit(
            "src/calib.c",
            "    free(p[0]);\n",
            "    free(p[0]);\n    p[1] = 0;\n",
        );
        done("rename to src/calib.c, and p[1] = 0");
        git(&["mv", "src/calib.c", "calib.c"]);
        edit("calib.c", "/* calloc */", "/* calloc, zeroed */");
        done("rename to calib.c, and a comment above the next function");
        let names = vec!["calib_alloc_small".to_string()];
        let t = touched(
            d.path(),
            &commits,
            "calib_alloc_small",
            &names,
            &Seen::default(),
        );
        assert_eq!(
            t.commits,
            vec![commits[1].line.clone(), commits[2].line.clone()],
            "{t:?}"
        );
        // The commit after a rename names none of the old file's lines.
        assert_eq!(t.naming, Vec::<String>::new(), "{t:?}");
    }
}
