//! Editing one JSONL task line in place: `dojo validate --write` replaces the FAIL_TO_PASS /
//! PASS_TO_PASS values of a line and leaves every other byte as it was (field order, spacing,
//! escapes), so a task file that tools like Python's `json.dumps` wrote keeps its style and a
//! re-derivation shows up in `git diff` as exactly the lists that changed.

use serde_json::Value;

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
