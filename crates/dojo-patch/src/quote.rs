//! Git's C-style path quoting (`quote_c_style` / `unquote_c_style` in git's `quote.c`).
//!
//! Git writes a path between double quotes, with backslash escapes, whenever it holds a byte
//! that is not printable ASCII, a `"` or a `\` (and, with the default `core.quotePath`, any
//! byte ≥ 0x80 as three octal digits): `"b/conf\164est.py"` is `b/conftest.py`. Every reader
//! of a diff's paths must undo this, or a patch can name one file to the reader and write
//! another through `git apply`.

/// `s` as one word of a POSIX shell command line: between single quotes, each `'` written as
/// `'\''`. Paths and test ids that go into the scripts dojo runs in sandboxes (eval scripts,
/// checkouts, test commands) pass through here, so no name can end the word early.
pub fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// `s` as one shell word that stays readable: bare when it holds only letters, digits and
/// `/._-:` (paths and most test ids), else [`shell_quote`]d. For commands people read back
/// (a synthesized task's test command).
pub fn shell_word(s: &str) -> String {
    if !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._-:".contains(&b))
    {
        s.to_string()
    } else {
        shell_quote(s)
    }
}

/// Undo git's quoting of the quoted name at the start of `s` (which starts with `"`). Returns
/// the name's bytes and the text after the closing quote; `None` when `s` is not a complete,
/// well-formed quoted name (git then reads the name as unquoted).
pub fn unquote_c(s: &str) -> Option<(Vec<u8>, &str)> {
    let b = s.as_bytes();
    if b.first() != Some(&b'"') {
        return None;
    }
    let mut out = Vec::new();
    let mut i = 1;
    while i < b.len() {
        match b[i] {
            b'"' => return Some((out, &s[i + 1..])),
            b'\\' => {
                let c = *b.get(i + 1)?;
                i += 2;
                let byte = match c {
                    b'a' => 0x07,
                    b'b' => 0x08,
                    b'f' => 0x0c,
                    b'n' => b'\n',
                    b'r' => b'\r',
                    b't' => b'\t',
                    b'v' => 0x0b,
                    b'\\' | b'"' => c,
                    b'0'..=b'3' => {
                        let d1 = *b.get(i)?;
                        let d2 = *b.get(i + 1)?;
                        if !(b'0'..=b'7').contains(&d1) || !(b'0'..=b'7').contains(&d2) {
                            return None;
                        }
                        i += 2;
                        ((c - b'0') << 6) | ((d1 - b'0') << 3) | (d2 - b'0')
                    }
                    _ => return None,
                };
                out.push(byte);
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    None
}

/// Bytes of a path as text: UTF-8 as it is, anything else with U+FFFD (such a name cannot equal
/// any of the names the rules here look for, which are ASCII).
pub(crate) fn lossy(bytes: Vec<u8>) -> String {
    match String::from_utf8(bytes) {
        Ok(s) => s,
        Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
    }
}

/// How git writes `path` in a diff header: as it is when nothing needs quoting, else quoted
/// (`core.quotePath` on: bytes ≥ 0x80 as octal). The inverse of [`unquote_c`], for tests and
/// for writers of diffs.
pub fn quote_c(path: &str) -> String {
    let needs = path
        .bytes()
        .any(|c| !(0x20..0x7f).contains(&c) || c == b'"' || c == b'\\');
    if !needs {
        return path.to_string();
    }
    let mut s = String::from("\"");
    for c in path.bytes() {
        match c {
            0x07 => s.push_str("\\a"),
            0x08 => s.push_str("\\b"),
            0x0c => s.push_str("\\f"),
            b'\n' => s.push_str("\\n"),
            b'\r' => s.push_str("\\r"),
            b'\t' => s.push_str("\\t"),
            0x0b => s.push_str("\\v"),
            b'\\' => s.push_str("\\\\"),
            b'"' => s.push_str("\\\""),
            c if !(0x20..0x7f).contains(&c) => s.push_str(&format!("\\{c:03o}")),
            c => s.push(c as char),
        }
    }
    s.push('"');
    s
}

#[cfg(test)]
mod tests {
    #[test]
    fn shell_words_stay_bare_when_safe() {
        assert_eq!(
            super::shell_word("tests/test_a.py::T::t_1"),
            "tests/test_a.py::T::t_1"
        );
        assert_eq!(super::shell_word("a b"), "'a b'");
        assert_eq!(super::shell_word("it's"), r"'it'\''s'");
        assert_eq!(super::shell_word(""), "''");
    }

    use super::*;

    #[test]
    fn escapes_and_octal() {
        let (name, rest) = unquote_c(r#""b/conf\164est.py" tail"#).unwrap();
        assert_eq!(name, b"b/conftest.py");
        assert_eq!(rest, " tail");
        let (name, _) = unquote_c(r#""a/\303\251t\303\251 \"q\"\\\t.py""#).unwrap();
        assert_eq!(lossy(name), "a/été \"q\"\\\t.py");
        assert!(unquote_c(r#""unterminated"#).is_none());
        assert!(unquote_c(r#""bad \q escape""#).is_none());
        assert!(unquote_c(r#""short \16""#).is_none());
    }

    proptest::proptest! {
        #[test]
        fn quote_round_trips(path in "\\PC{0,20}|[a-z\"\\\\\t\n é]{0,20}") {
            let q = quote_c(&path);
            if q.starts_with('"') {
                let (bytes, rest) = unquote_c(&q).unwrap();
                proptest::prop_assert_eq!(lossy(bytes), path);
                proptest::prop_assert_eq!(rest, "");
            } else {
                proptest::prop_assert_eq!(q, path);
            }
        }
    }
}
