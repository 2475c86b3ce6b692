//! The problem statement of a synthesized task, written from the observable symptom only: what
//! the failing check does, the error it reports, and the last frames of the traceback (function
//! and module names). It never names a test file or test, and never quotes the mutated line or
//! gives a line number, so it points at the behaviour, not at the fix.
//!
//! The material is the pytest log of the mutant's full-suite run (the `FAILURES` / `ERRORS`
//! sections `-rA` prints). Memory addresses are normalised, so the same mutant gives the same
//! text on every run.

use dojo_rundir::clip::{self, Keep, Unit};

/// What the log says about one failing test.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Symptom {
    /// The statement of the test that failed (the `>` line of its first frame).
    pub failing_code: Option<String>,
    /// The error lines (`E   ...`), without the marker.
    pub error: Vec<String>,
    /// The exception type (`IndexError`, `AssertionError`).
    pub exception: Option<String>,
    /// Frames below the test, innermost last: (function, module path).
    pub frames: Vec<(String, String)>,
}

/// The block of `test_id` in the FAILURES/ERRORS sections of a pytest log.
fn block<'a>(log: &'a str, test_id: &str) -> Option<Vec<&'a str>> {
    let mut parts = test_id.split("::");
    parts.next()?;
    let name: Vec<&str> = parts.collect();
    let name = name.join(".");
    let lines: Vec<&str> = log.lines().collect();
    let is_header = |l: &str| {
        let t = l.trim();
        t.len() > 6 && t.starts_with("___") && t.ends_with("___")
    };
    let start = lines.iter().position(|l| {
        is_header(l) && {
            let inner = l.trim().trim_matches('_').trim();
            inner == name || inner.strip_prefix("ERROR at setup of ") == Some(name.as_str())
        }
    })?;
    let body: Vec<&str> = lines[start + 1..]
        .iter()
        .take_while(|l| !is_header(l) && !l.starts_with("====="))
        .copied()
        .collect();
    Some(body)
}

fn normalize(s: &str) -> String {
    // `<object at 0x7f3a...>`: addresses differ from run to run.
    let mut out = String::with_capacity(s.len());
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'0' && i + 1 < b.len() && b[i + 1] == b'x' {
            let mut j = i + 2;
            while j < b.len() && b[j].is_ascii_hexdigit() {
                j += 1;
            }
            if j - (i + 2) >= 6 {
                out.push_str("0x...");
                i = j;
                continue;
            }
        }
        let c = s[i..].chars().next().unwrap_or(' ');
        out.push(c);
        i += c.len_utf8();
    }
    out
}

/// Is `path` one of the project's test files (or a test file by [`dojo_patch::is_test_file`])?
fn is_test_path(path: &str, test_files: &[String]) -> bool {
    test_files.iter().any(|t| t == path) || dojo_patch::is_test_file(path)
}

/// Test file paths and their dotted module names (`tests.test_x`) in `text` become `<test>`:
/// exception qualnames and reprs name the test module.
fn redact(text: &str, test_files: &[String]) -> String {
    let mut out = text.to_string();
    for f in test_files {
        let dotted = f.trim_end_matches(".py").replace('/', ".");
        for needle in [f.as_str(), dotted.as_str()] {
            if !needle.is_empty() {
                out = out.replace(needle, "<test>");
            }
        }
    }
    out
}

/// The symptom of `test_id` in `log`.
pub fn symptom(log: &str, test_id: &str, test_files: &[String]) -> Option<Symptom> {
    let body = block(log, test_id)?;
    let mut s = Symptom::default();
    let mut in_first_frame = true;
    for l in &body {
        if let Some(code) = l.strip_prefix('>') {
            if in_first_frame && s.failing_code.is_none() {
                s.failing_code = Some(redact(&normalize(code.trim()), test_files));
            }
        } else if let Some(e) = l.strip_prefix("E ") {
            if s.error.len() < 12 {
                s.error.push(redact(&normalize(e.trim_start()), test_files));
            }
        } else if let Some(((path, _line), what)) = frame_line(l) {
            in_first_frame = false;
            if let Some(f) = what.strip_prefix("in ") {
                // Project frames only: not the tests, not the standard library.
                if !is_test_path(path, test_files) && !path.starts_with('/') {
                    s.frames.push((f.trim().to_string(), path.to_string()));
                }
            } else if !what.trim().is_empty() {
                // The last line of a block: `path:line: ExceptionType`.
                s.exception = Some(redact(what.trim(), test_files));
            }
        } else if l.starts_with("_ _ _") {
            in_first_frame = false;
        }
    }
    if s.exception.is_none()
        && let Some(first) = s.error.first()
        && let Some((t, _)) = first.split_once(':')
        && !t.contains(' ')
    {
        s.exception = Some(t.to_string());
    }
    (s.failing_code.is_some() || !s.error.is_empty()).then_some(s)
}

/// `path/to/file.py:123: rest` → ((path, 123), rest).
fn frame_line(l: &str) -> Option<((&str, usize), &str)> {
    let (path, rest) = l.split_once(".py:")?;
    if path.contains(' ') || path.is_empty() {
        return None;
    }
    let (num, what) = rest.split_once(':')?;
    let n: usize = num.parse().ok()?;
    let path = &l[..path.len() + 3];
    Some(((path, n), what.strip_prefix(' ').unwrap_or(what)))
}

/// The summary line's message for `test_id` (`FAILED id - message`), the fallback symptom.
fn summary_message(log: &str, test_id: &str) -> Option<String> {
    log.lines().find_map(|l| {
        let rest = l
            .strip_prefix("FAILED ")
            .or_else(|| l.strip_prefix("ERROR "))?;
        let (id, msg) = rest.split_once(" - ")?;
        (id == test_id).then(|| normalize(msg.trim()))
    })
}

/// The problem statement for a mutant whose failing tests are `f2p` (in their order) and whose
/// full-suite log is `log`; `package` names the project (`toolz 1.2.0`).
pub fn problem_statement(
    package: &str,
    log: &str,
    f2p: &[String],
    test_files: &[String],
) -> (String, Vec<Symptom>) {
    let symptoms: Vec<Symptom> = f2p
        .iter()
        .filter_map(|t| symptom(log, t, test_files))
        .take(2)
        .collect();
    let mut out = String::new();
    let Some(first) = symptoms.first() else {
        let msg = f2p.iter().find_map(|t| summary_message(log, t));
        out.push_str(&format!("{package}: a documented behaviour is broken\n\n"));
        match msg {
            Some(m) => out.push_str(&format!(
                "A check of the library's behaviour now fails with:\n\n```\n{m}\n```\n"
            )),
            None => out.push_str("A check of the library's behaviour now fails.\n"),
        }
        return (out, symptoms);
    };
    let title = match (&first.exception, &first.failing_code) {
        (Some(e), Some(code)) if e != "AssertionError" && !e.contains("assert") => {
            format!("`{e}` raised by `{}`", shorten(code, 70))
        }
        (_, Some(code)) => format!("Wrong result: `{}` fails", shorten(code, 70)),
        (Some(e), None) => format!("`{e}` in {package}"),
        (None, None) => format!("{package}: unexpected behaviour"),
    };
    out.push_str(&title);
    out.push_str("\n\n");
    for (i, s) in symptoms.iter().enumerate() {
        if i > 0 {
            out.push_str("\nA second case fails as well:\n\n");
        }
        if let Some(code) = &s.failing_code {
            out.push_str(&format!(
                "With {package}, this check fails:\n\n```python\n{code}\n```\n\n"
            ));
        }
        if !s.error.is_empty() {
            out.push_str(&format!(
                "It reports:\n\n```\n{}\n```\n",
                s.error.join("\n")
            ));
        }
        if !s.frames.is_empty() {
            let last: Vec<String> = s
                .frames
                .iter()
                .rev()
                .take(3)
                .map(|(f, p)| format!("`{f}` ({p})"))
                .collect();
            out.push_str(&format!(
                "\nThe error comes from {}.\n",
                last.join(", called from ")
            ));
        }
    }
    if f2p.len() > symptoms.len() {
        out.push_str(&format!(
            "\n{} related check(s) fail in the same way.\n",
            f2p.len()
        ));
    }
    out.push_str("\nThe expected behaviour is the documented one; this used to work.\n");
    (out, symptoms)
}

/// At most `max` characters of a quoted line, `…` where it was cut.
fn shorten(s: &str, max: usize) -> String {
    clip::cut(s, max, Unit::Chars, Keep::Head).ellipsis()
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOG: &str = r#"============================= test session starts ==============================
collected 3 items

tests/test_core.py F.F                                                   [100%]

=================================== FAILURES ===================================
___________________________ TestGet.test_nested ________________________________

self = <tests.test_core.TestGet object at 0x7f3a2b1c9d10>

    def test_nested(self):
        d = {"a": [1, 2]}
>       assert get_in(["a", 5], d, default=0) == 0

tests/test_core.py:12: 
_ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ 
pkg/core.py:40: in get_in
    return reduce(operator.getitem, keys, coll)
_ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ 

>   return lst[i]
E   IndexError: list index out of range

pkg/util.py:7: IndexError
_________________________________ test_plain ___________________________________

    def test_plain():
>       assert add(2, 2) == 4
E       assert 0 == 4
E        +  where 0 = add(2, 2)

tests/test_core.py:20: AssertionError
=========================== short test summary info ============================
FAILED tests/test_core.py::TestGet::test_nested - IndexError: list index out of range
PASSED tests/test_core.py::test_ok
FAILED tests/test_core.py::test_plain - assert 0 == 4
========================= 2 failed, 1 passed in 0.05s ==========================
"#;

    #[test]
    fn symptom_of_an_exception_deep_in_the_library() {
        let tf = vec!["tests/test_core.py".to_string()];
        let s = symptom(LOG, "tests/test_core.py::TestGet::test_nested", &tf).unwrap();
        assert_eq!(
            s.failing_code.as_deref(),
            Some(r#"assert get_in(["a", 5], d, default=0) == 0"#)
        );
        assert_eq!(s.error, ["IndexError: list index out of range"]);
        assert_eq!(s.exception.as_deref(), Some("IndexError"));
        assert_eq!(
            s.frames,
            [("get_in".to_string(), "pkg/core.py".to_string())]
        );
    }

    #[test]
    fn statement_names_no_test_file_and_no_line() {
        let tf = vec!["tests/test_core.py".to_string()];
        let f2p = vec![
            "tests/test_core.py::TestGet::test_nested".to_string(),
            "tests/test_core.py::test_plain".to_string(),
        ];
        let (text, syms) = problem_statement("pkg 1.0", LOG, &f2p, &tf);
        assert_eq!(syms.len(), 2);
        assert!(
            text.starts_with("`IndexError` raised by `assert get_in("),
            "{text}"
        );
        assert!(text.contains("assert 0 == 4"), "{text}");
        assert!(text.contains("`get_in` (pkg/core.py)"), "{text}");
        for leak in [
            "test_core",
            "test_nested",
            "test_plain",
            ":40",
            ":7",
            "0x7f",
        ] {
            assert!(!text.contains(leak), "{leak} leaked:\n{text}");
        }
        // Deterministic.
        assert_eq!(problem_statement("pkg 1.0", LOG, &f2p, &tf).0, text);
    }

    #[test]
    fn test_module_names_are_redacted() {
        let tf = vec!["tests/test_core.py".to_string()];
        assert_eq!(
            redact("tests.test_core.TestGet.<locals>.Boom", &tf),
            "<test>.TestGet.<locals>.Boom"
        );
    }

    #[test]
    fn fallback_to_the_summary_line() {
        let log = "FAILED tests/t.py::test_x - ValueError: bad\n";
        let (text, syms) = problem_statement("p 1", log, &["tests/t.py::test_x".into()], &[]);
        assert!(syms.is_empty());
        assert!(
            text.contains("ValueError: bad") && !text.contains("test_x"),
            "{text}"
        );
    }
}
