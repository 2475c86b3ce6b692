//! Editing one JSONL task line in place: `dojo validate --write` replaces the FAIL_TO_PASS /
//! PASS_TO_PASS values of a line and leaves every other byte as it was (field order, spacing,
//! escapes), so a task file that tools like Python's `json.dumps` wrote keeps its style and a
//! re-derivation shows up in `git diff` as exactly the lists that changed.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use crate::{Task, TaskError};

/// New FAIL_TO_PASS / PASS_TO_PASS lists, by instance id.
pub type NewLists<'a> = BTreeMap<&'a str, (&'a [String], &'a [String])>;

/// Rewrites the JSONL task file `path`, whose tasks are `tasks`, with the lists of `fill`
/// (`dojo validate --write`: the derived lists of new tasks that validated); every other line
/// is kept byte for byte, in its place, and a filled line keeps every byte but the two values
/// ([`splice_lists`]). Lists a row lacks are written in the file's own style: JSON arrays,
/// unless its other rows store them as JSON strings (as SWE-bench's datasets do). The new file
/// is written beside the old one and renamed over it, so a crash leaves one or the other.
/// Returns how many tasks were filled.
pub fn fill_lists(path: &Path, tasks: &[Task], mut fill: NewLists<'_>) -> Result<usize, TaskError> {
    let io = |source: std::io::Error| TaskError::Io {
        path: path.display().to_string(),
        source,
    };
    if path.extension().is_none_or(|e| e != "jsonl") {
        return Err(TaskError::Parse {
            location: path.display().to_string(),
            reason: "writing the lists needs a .jsonl task file".into(),
        });
    }
    if fill.is_empty() {
        return Ok(0);
    }
    let text = std::fs::read_to_string(path).map_err(io)?;
    let rows: Vec<Option<serde_json::Map<String, Value>>> = text
        .split_inclusive('\n')
        .map(|line| serde_json::from_str(line).ok())
        .collect();
    let (arrays, strings) =
        rows.iter()
            .flatten()
            .fold((0, 0), |(a, s), r| match r.get("FAIL_TO_PASS") {
                Some(Value::Array(_)) => (a + 1, s),
                Some(Value::String(_)) => (a, s + 1),
                _ => (a, s),
            });
    let default_array = arrays >= strings;
    let mut out = String::with_capacity(text.len());
    let mut n = 0;
    for (line, row) in text.split_inclusive('\n').zip(&rows) {
        let id = row
            .as_ref()
            .and_then(|r| r.get("instance_id"))
            .and_then(|x| x.as_str());
        let found = id.and_then(|id| {
            Some((
                fill.remove(id)?,
                tasks.iter().find(|t| t.instance_id == id)?,
            ))
        });
        let Some(((f2p, p2p), t)) = found else {
            out.push_str(line);
            continue;
        };
        let body = line.strip_suffix('\n').unwrap_or(line);
        // A line the splicer does not understand is re-serialised instead (same fields and
        // order, our JSON style).
        let new = match splice_lists(
            body,
            &[("FAIL_TO_PASS", f2p), ("PASS_TO_PASS", p2p)],
            default_array,
        ) {
            Some(s) => s,
            None => serde_json::to_string(&t.row_with_lists(f2p, p2p, default_array))
                .map_err(|e| io(std::io::Error::other(e)))?,
        };
        out.push_str(&new);
        out.push('\n');
        n += 1;
    }
    dojo_rundir::write_atomic(path, out.as_bytes()).map_err(io)?;
    Ok(n)
}

/// Byte spans of one top-level `"key": value` pair.
struct Field {
    key: String,
    value: std::ops::Range<usize>,
}

fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && matches!(b[i], b' ' | b'\t' | b'\r' | b'\n') {
        i += 1;
    }
    i
}

/// End (exclusive) of the JSON string starting at `i` (`b[i] == b'"'`).
fn string_end(b: &[u8], mut i: usize) -> Option<usize> {
    i += 1;
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            b'"' => return Some(i + 1),
            _ => i += 1,
        }
    }
    None
}

/// End (exclusive) of the JSON value starting at `i`.
fn value_end(b: &[u8], i: usize) -> Option<usize> {
    match b.get(i)? {
        b'"' => string_end(b, i),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut j = i;
            while j < b.len() {
                match b[j] {
                    b'"' => {
                        j = string_end(b, j)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(j + 1);
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
            None
        }
        _ => {
            let mut j = i;
            while j < b.len() && !matches!(b[j], b',' | b'}' | b']' | b' ' | b'\t' | b'\r' | b'\n')
            {
                j += 1;
            }
            (j > i).then_some(j)
        }
    }
}

/// The top-level fields of a JSON object line and the position of its closing brace.
fn fields(line: &str) -> Option<(Vec<Field>, usize)> {
    let b = line.as_bytes();
    let mut i = skip_ws(b, 0);
    if b.get(i) != Some(&b'{') {
        return None;
    }
    i = skip_ws(b, i + 1);
    let mut out = Vec::new();
    if b.get(i) == Some(&b'}') {
        return Some((out, i));
    }
    loop {
        if b.get(i) != Some(&b'"') {
            return None;
        }
        let kend = string_end(b, i)?;
        let key: String = serde_json::from_str(&line[i..kend]).ok()?;
        i = skip_ws(b, kend);
        if b.get(i) != Some(&b':') {
            return None;
        }
        let vstart = skip_ws(b, i + 1);
        let vend = value_end(b, vstart)?;
        out.push(Field {
            key,
            value: vstart..vend,
        });
        i = skip_ws(b, vend);
        match b.get(i)? {
            b',' => i = skip_ws(b, i + 1),
            b'}' => return Some((out, i)),
            _ => return None,
        }
    }
}

/// How the line writes JSON: Python's `json.dumps` defaults (`", "`, `": "`, non-ASCII as
/// `\uXXXX`) or compact.
struct Style {
    item_sep: &'static str,
    key_sep: &'static str,
    ascii: bool,
}

impl Style {
    fn of(line: &str, first_value_start: Option<usize>) -> Style {
        let spaced = first_value_start.is_some_and(|v| line[..v].ends_with(": "));
        Style {
            item_sep: if spaced { ", " } else { "," },
            key_sep: if spaced { ": " } else { ":" },
            ascii: line.is_ascii(),
        }
    }

    fn string(&self, s: &str) -> String {
        let json = Value::String(s.to_string()).to_string();
        if !self.ascii || json.is_ascii() {
            return json;
        }
        let mut out = String::with_capacity(json.len() + 16);
        for c in json.chars() {
            if c.is_ascii() {
                out.push(c);
            } else {
                let mut units = [0u16; 2];
                for u in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{u:04x}"));
                }
            }
        }
        out
    }

    fn list(&self, items: &[String]) -> String {
        let inner: Vec<String> = items.iter().map(|s| self.string(s)).collect();
        format!("[{}]", inner.join(self.item_sep))
    }
}

/// `line` (one JSON object) with the given list fields set, each stored as a JSON array when
/// the line already has an array there (or, when it lacks the field or has `null`, when
/// `default_array`), else as a JSON string holding the list. Every other byte of the line is
/// kept; a missing field is appended before the closing brace. `None` when the line is not a
/// JSON object this scanner understands (the caller then re-serialises the row).
pub fn splice_lists(
    line: &str,
    lists: &[(&str, &[String])],
    default_array: bool,
) -> Option<String> {
    let (found, close) = fields(line)?;
    let style = Style::of(line, found.first().map(|f| f.value.start));
    let mut edits: Vec<(std::ops::Range<usize>, String)> = Vec::new();
    let mut appended = String::new();
    for (key, items) in lists {
        let field = found.iter().find(|f| f.key == *key);
        let as_array = match field.map(|f| line.as_bytes()[f.value.start]) {
            Some(b'[') => true,
            Some(b'"') => false,
            _ => default_array,
        };
        let list = style.list(items);
        let value = if as_array { list } else { style.string(&list) };
        match field {
            Some(f) => edits.push((f.value.clone(), value)),
            None => {
                let sep = if found.is_empty() && appended.is_empty() {
                    ""
                } else {
                    style.item_sep
                };
                appended.push_str(&format!(
                    "{sep}{}{}{value}",
                    style.string(key),
                    style.key_sep
                ));
            }
        }
    }
    if !appended.is_empty() {
        // Right after the last value (before any whitespace preceding the brace).
        let at = found.last().map_or(close, |f| f.value.end);
        edits.push((at..at, appended));
    }
    edits.sort_by_key(|(r, _)| std::cmp::Reverse(r.start));
    let mut out = line.to_string();
    for (range, text) in edits {
        out.replace_range(range, &text);
    }
    // The result must still be the same object with the new values.
    let check: serde_json::Map<String, Value> = serde_json::from_str(&out).ok()?;
    lists
        .iter()
        .all(|(k, items)| {
            let v = match &check.get(*k) {
                Some(Value::String(s)) => serde_json::from_str::<Vec<String>>(s).ok(),
                Some(v) => serde_json::from_value::<Vec<String>>((*v).clone()).ok(),
                None => None,
            };
            v.as_deref() == Some(*items)
        })
        .then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(xs: &[&str]) -> Vec<String> {
        xs.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn fill_lists_rewrites_only_the_filled_rows_lists() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        let a = r#"{"instance_id": "o__r-1", "repo": "o/r", "base_commit": "x", "patch": "diff --git a/x b/x\n", "FAIL_TO_PASS": "[]", "PASS_TO_PASS": "[]"}"#;
        let b = r#"{"instance_id":"o__r-2","repo":"o/r","base_commit":"x","patch":"diff --git a/x b/x\n"}"#;
        std::fs::write(&path, format!("{a}\n{b}\n")).unwrap();
        let tasks = crate::load_tasks(&path).unwrap();
        let (f2p, p2p) = (v(&["t::a"]), v(&["t::b"]));
        let mut fill = NewLists::new();
        fill.insert("o__r-2", (&f2p[..], &p2p[..]));
        assert_eq!(fill_lists(&path, &tasks, fill).unwrap(), 1);
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], a, "an unfilled row is kept byte for byte");
        // The file stores its lists as JSON strings: the new row's lists follow it.
        let row: Value = serde_json::from_str(lines[1]).unwrap();
        assert_eq!(row["FAIL_TO_PASS"], "[\"t::a\"]");
        assert_eq!(row["PASS_TO_PASS"], "[\"t::b\"]");
        let json = dir.path().join("t.json");
        std::fs::write(&json, "[]").unwrap();
        assert!(fill_lists(&json, &tasks, NewLists::new()).is_err());
    }

    #[test]
    fn python_style_line_keeps_every_other_byte() {
        let line = r#"{"instance_id": "a__b-1", "patch": "x\u00e9\n", "FAIL_TO_PASS": [], "PASS_TO_PASS": ["old"], "n": 1}"#;
        let (f, p) = (v(&["t[é]", "u"]), v(&["p"]));
        let out = splice_lists(line, &[("FAIL_TO_PASS", &f), ("PASS_TO_PASS", &p)], true).unwrap();
        assert_eq!(
            out,
            r#"{"instance_id": "a__b-1", "patch": "x\u00e9\n", "FAIL_TO_PASS": ["t[\u00e9]", "u"], "PASS_TO_PASS": ["p"], "n": 1}"#
        );
    }

    #[test]
    fn strings_stay_strings_and_missing_fields_are_appended() {
        let line = r#"{"instance_id":"a","FAIL_TO_PASS":"[]","x":{"y":[1,"]"]}}"#;
        let (f, p) = (v(&["t"]), v(&["p \"q\""]));
        let out = splice_lists(line, &[("FAIL_TO_PASS", &f), ("PASS_TO_PASS", &p)], true).unwrap();
        assert_eq!(
            out,
            r#"{"instance_id":"a","FAIL_TO_PASS":"[\"t\"]","x":{"y":[1,"]"]},"PASS_TO_PASS":["p \"q\""]}"#
        );
        let out = splice_lists(r#"{ }"#, &[("FAIL_TO_PASS", &f)], false).unwrap();
        assert_eq!(out, r#"{ "FAIL_TO_PASS":"[\"t\"]"}"#);
        let out = splice_lists(r#"{"FAIL_TO_PASS": null}"#, &[("FAIL_TO_PASS", &f)], true);
        assert_eq!(out.unwrap(), r#"{"FAIL_TO_PASS": ["t"]}"#);
    }

    #[test]
    fn not_an_object_is_refused() {
        let f = v(&["t"]);
        for bad in [
            "",
            "[]",
            "{\"a\" 1}",
            "{\"a\": \"unterminated}",
            "{\"a\": 1",
        ] {
            assert!(
                splice_lists(bad, &[("FAIL_TO_PASS", &f)], true).is_none(),
                "{bad}"
            );
        }
    }
}
