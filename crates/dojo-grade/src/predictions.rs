//! SWE-bench predictions: the `instance_id`, `model_name_or_path`, `model_patch` records that
//! `dojo rollout --export-predictions` writes and `dojo eval` (like the official harness) grades.
//!
//! One record type for both directions. Reading is tolerant, as a grader of other systems'
//! output must be: every line that cannot be used (not UTF-8, not JSON, a missing or unusable
//! field, a duplicate id) is returned with its line number and the reason, and the rest are
//! graded. Writing is JSONL, published atomically.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::report::MalformedLine;

/// One SWE-bench prediction.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Prediction {
    pub instance_id: String,
    pub model_name_or_path: String,
    /// `None` when the line had `null` (the harness grades it as an empty patch).
    pub model_patch: Option<String>,
    /// Where the record was read from (1-based line or item); 0 for one made in memory.
    #[serde(skip)]
    pub line: usize,
}

impl Prediction {
    /// A prediction made in memory (not read from a file).
    pub fn new(instance_id: &str, model: &str, patch: &str) -> Prediction {
        Prediction {
            instance_id: instance_id.to_string(),
            model_name_or_path: model.to_string(),
            model_patch: Some(patch.to_string()),
            line: 0,
        }
    }
}

/// Write `predictions` as JSONL (one record per line), atomically.
pub fn write_predictions(path: &Path, predictions: &[Prediction]) -> std::io::Result<()> {
    let mut buf = Vec::new();
    for p in predictions {
        serde_json::to_writer(&mut buf, p).map_err(std::io::Error::other)?;
        buf.push(b'\n');
    }
    dojo_rundir::write_atomic(path, &buf)
}

/// Why one line of a predictions file could not be read (the caller adds its line number).
#[derive(Debug, thiserror::Error)]
enum BadLine {
    #[error("encoding error: not valid UTF-8 (invalid byte at column {column})")]
    Encoding { column: usize },
    #[error("not JSON: {0}")]
    Json(#[source] serde_json::Error),
}

/// The items of a predictions file with their line (or item) numbers. JSONL is read line by
/// line, so one line that is not UTF-8 costs that line only; a whole-file JSON list or
/// `{id: prediction}` object also works.
fn items(bytes: &[u8]) -> Vec<(usize, Result<Value, BadLine>)> {
    let mut items = Vec::new();
    let whole = std::str::from_utf8(bytes).ok().and_then(|text| {
        let trimmed = text.trim_start();
        (trimmed.starts_with('[') || (trimmed.starts_with('{') && !text.trim().contains('\n')))
            .then(|| serde_json::from_str::<Value>(text).ok())
            .flatten()
    });
    match whole {
        Some(Value::Array(a)) => {
            items.extend(a.into_iter().enumerate().map(|(i, v)| (i + 1, Ok(v))))
        }
        Some(Value::Object(m)) if !m.contains_key("instance_id") => {
            items.extend(m.into_iter().enumerate().map(|(i, (_, v))| (i + 1, Ok(v))))
        }
        Some(v @ Value::Object(_)) => items.push((1, Ok(v))),
        _ => {
            for (i, line) in bytes.split(|b| *b == b'\n').enumerate() {
                let line = match std::str::from_utf8(line) {
                    Ok(l) => l,
                    Err(e) => {
                        items.push((
                            i + 1,
                            Err(BadLine::Encoding {
                                column: e.valid_up_to() + 1,
                            }),
                        ));
                        continue;
                    }
                };
                if line.trim().is_empty() {
                    continue;
                }
                items.push((
                    i + 1,
                    serde_json::from_str::<Value>(line).map_err(BadLine::Json),
                ));
            }
        }
    }
    items
}

/// Read a predictions file (JSONL; a JSON list or `{id: prediction}` object also works).
/// Bad lines are returned separately with their line numbers; the rest are usable.
pub fn read_predictions(
    path: &Path,
) -> Result<(Vec<Prediction>, Vec<MalformedLine>), std::io::Error> {
    let bytes = std::fs::read(path)?;
    let mut preds = Vec::new();
    let mut bad = Vec::new();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for (line, v) in items(&bytes) {
        let mut malformed = |reason: String| bad.push(MalformedLine { line, reason });
        let v = match v {
            Ok(v) => v,
            Err(e) => {
                malformed(e.to_string());
                continue;
            }
        };
        let Some(obj) = v.as_object() else {
            malformed("not a JSON object".into());
            continue;
        };
        let id = match obj.get("instance_id").and_then(Value::as_str) {
            Some(id) => match dojo_task::instance_id_problem(id) {
                None => id.to_string(),
                Some(problem) => {
                    malformed(format!("instance_id {id:?} {problem}"));
                    continue;
                }
            },
            None => {
                malformed("missing string field instance_id".into());
                continue;
            }
        };
        let patch = match obj.get("model_patch") {
            Some(Value::String(s)) => Some(s.clone()),
            Some(Value::Null) => None,
            None => {
                malformed(format!("instance {id}: missing field model_patch"));
                continue;
            }
            Some(_) => {
                malformed(format!(
                    "instance {id}: model_patch is not a string or null"
                ));
                continue;
            }
        };
        if let Some(first) = seen.get(&id) {
            malformed(format!(
                "instance {id}: duplicate prediction (first on line {first}); ignored"
            ));
            continue;
        }
        seen.insert(id.clone(), line);
        let model = obj
            .get("model_name_or_path")
            .and_then(Value::as_str)
            .unwrap_or("unknown")
            .to_string();
        preds.push(Prediction {
            instance_id: id,
            model_name_or_path: model,
            model_patch: patch,
            line,
        });
    }
    Ok((preds, bad))
}

/// What `dojo eval` says on stderr about a predictions `file`: each malformed line, and each
/// prediction for an instance the task file (`tasks_file`, ids `known`) does not have (a wrong
/// file or a wrong id: nothing of it gets graded).
pub fn input_warnings(
    file: &Path,
    preds: &[Prediction],
    malformed: &[MalformedLine],
    known: &std::collections::BTreeSet<String>,
    tasks_file: &Path,
) -> Vec<String> {
    let f = file.display();
    let bad = malformed
        .iter()
        .map(|m| format!("{f}: line {}: {}", m.line, m.reason));
    let unknown = preds
        .iter()
        .filter(|p| !known.contains(&p.instance_id))
        .map(|p| {
            format!(
                "{f}: line {}: instance {} is not in the task file {}",
                p.line,
                p.instance_id,
                tasks_file.display()
            )
        });
    bad.chain(unknown).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_lines_are_reported_and_rest_kept() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("preds.jsonl");
        std::fs::write(
            &p,
            concat!(
                r#"{"instance_id":"a","model_name_or_path":"m","model_patch":"diff"}"#,
                "\n",
                "{broken\n",
                r#"{"instance_id":"b","model_patch":null}"#,
                "\n",
                r#"{"model_patch":"x"}"#,
                "\n",
                r#"{"instance_id":"../x","model_patch":"x"}"#,
                "\n",
                r#"{"instance_id":"a","model_patch":"again"}"#,
                "\n",
                r#"{"instance_id":"c","model_patch":5}"#,
                "\n",
            ),
        )
        .unwrap();
        let (preds, bad) = read_predictions(&p).unwrap();
        assert_eq!(
            preds
                .iter()
                .map(|p| p.instance_id.as_str())
                .collect::<Vec<_>>(),
            ["a", "b"]
        );
        assert_eq!(preds[1].model_patch, None);
        assert_eq!(
            bad.iter().map(|b| b.line).collect::<Vec<_>>(),
            [2, 4, 5, 6, 7]
        );
        assert!(bad[3].reason.contains("duplicate"));
    }

    /// A line that is not UTF-8 is that line's encoding error; the lines around it still count.
    #[test]
    fn non_utf8_line_is_an_encoding_error_of_that_line() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("preds.jsonl");
        let mut bytes = br#"{"instance_id":"a","model_patch":"x"}"#.to_vec();
        bytes.extend_from_slice(b"\n{\"instance_id\":\"b\",\"model_patch\":\"caf\xe9\"}\n");
        bytes.extend_from_slice(br#"{"instance_id":"c","model_patch":"y"}"#);
        std::fs::write(&p, bytes).unwrap();
        let (preds, bad) = read_predictions(&p).unwrap();
        let ids: Vec<_> = preds.iter().map(|p| p.instance_id.as_str()).collect();
        assert_eq!(ids, ["a", "c"]);
        assert_eq!(bad.len(), 1, "{bad:?}");
        assert_eq!(bad[0].line, 2);
        assert!(
            bad[0].reason.contains("encoding error"),
            "{}",
            bad[0].reason
        );
    }

    #[test]
    fn write_then_read_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("predictions.jsonl");
        let preds = vec![
            Prediction::new("a", "m", "diff --git a/x b/x\n"),
            Prediction {
                model_patch: None,
                ..Prediction::new("b", "m", "")
            },
        ];
        write_predictions(&p, &preds).unwrap();
        let (back, bad) = read_predictions(&p).unwrap();
        assert!(bad.is_empty(), "{bad:?}");
        let lines: Vec<_> = back.iter().map(|p| p.line).collect();
        assert_eq!(lines, [1, 2]);
        let strip = |v: Vec<Prediction>| -> Vec<Prediction> {
            v.into_iter().map(|p| Prediction { line: 0, ..p }).collect()
        };
        assert_eq!(strip(back), preds);
    }

    #[test]
    fn warnings_name_bad_lines_and_unknown_ids() {
        let p = |id: &str, line| Prediction {
            instance_id: id.into(),
            model_name_or_path: "m".into(),
            model_patch: None,
            line,
        };
        let bad = [MalformedLine {
            line: 2,
            reason: "not JSON".into(),
        }];
        let known = ["a".to_string()].into();
        assert_eq!(
            input_warnings(
                Path::new("p.jsonl"),
                &[p("a", 1), p("z", 3)],
                &bad,
                &known,
                Path::new("t.jsonl")
            ),
            [
                "p.jsonl: line 2: not JSON",
                "p.jsonl: line 3: instance z is not in the task file t.jsonl"
            ]
        );
    }
}
