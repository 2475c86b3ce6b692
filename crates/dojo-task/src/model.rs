//! The task model: one SWE-bench instance (or a SWE-Gym / SWE-smith / SWE-rebench variant, or a
//! bundled task built from an sdist), checked field by field as it is read.

use std::collections::BTreeMap;
use std::fmt;

use dojo_rundir::json::type_name;
use serde_json::{Map, Value};

use crate::TaskError;
use crate::harness::{EvalType, LogParser};

/// Where a row came from, for error messages: `tasks.jsonl line 7` / `dev.parquet row 12`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    pub file: String,
    /// `line N` (JSONL), `item N` (JSON array) or `row N` (Parquet); 1-based.
    pub unit: &'static str,
    pub index: usize,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} {}", self.file, self.unit, self.index)
    }
}

/// How the repository tree of a task is obtained when it is not a git checkout.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SdistSource {
    pub url: String,
    pub sha256: String,
    pub filename: String,
    /// Unified diff applied to the unpacked sdist before the pristine commit (introduces the bug).
    #[serde(default)]
    pub bug_patch: String,
}

/// The `source` extension of a task line (only `kind = "sdist"` exists so far).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskSource {
    Sdist(SdistSource),
}

/// Per-task environment overrides (`env` object, or SWE-rebench's `install_config`).
/// Every key is optional and overrides the repository's environment spec.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnvOverride {
    pub python: Option<String>,
    pub requirements: Option<Vec<String>>,
    pub install: Option<Vec<String>>,
    pub editable: Option<bool>,
    pub test_cmd: Option<String>,
    pub log_parser: Option<LogParser>,
    pub timeout_s: Option<u64>,
    pub test_directives: Option<String>,
    pub eval_type: Option<EvalType>,
    pub env: Option<BTreeMap<String, String>>,
}

/// One task instance. Field names follow the SWE-bench schema; the lists are decoded whether the
/// file stores them as JSON strings (SWE-bench) or arrays (SWE-smith, SWE-rebench).
#[derive(Debug, Clone)]
pub struct Task {
    pub instance_id: String,
    pub repo: String,
    pub base_commit: String,
    /// The gold patch.
    pub patch: String,
    pub test_patch: String,
    pub problem_statement: String,
    pub hints_text: String,
    pub created_at: String,
    pub version: String,
    pub environment_setup_commit: String,
    /// `None` when the file does not carry the list yet (a new task before `dojo validate --write`).
    pub fail_to_pass: Option<Vec<String>>,
    pub pass_to_pass: Option<Vec<String>>,
    /// SWE-rebench extras (empty when absent).
    pub fail_to_fail: Vec<String>,
    pub pass_to_fail: Vec<String>,
    pub eval_script: Option<String>,
    pub log_parser: Option<LogParser>,
    pub eval_type: Option<EvalType>,
    /// `image` (SWE-bench) or `image_name` (SWE-smith).
    pub image: Option<String>,
    pub source: Option<TaskSource>,
    pub env: Option<EnvOverride>,
    /// The row exactly as read, so rewriting a file (`validate --write`) keeps every field,
    /// known or not, in its original form.
    pub raw: Map<String, Value>,
}

/// Fields every task must carry (the rest default to empty).
pub const REQUIRED_FIELDS: &[&str] = &["instance_id", "repo", "patch"];
/// Fields a runnable, gradable task needs in addition (reported by `dojo tasks check`).
pub const GRADING_FIELDS: &[&str] = &["test_patch", "FAIL_TO_PASS", "PASS_TO_PASS"];

struct Ctx<'a> {
    loc: &'a Location,
    id: Option<String>,
}

impl Ctx<'_> {
    fn err_from(
        &self,
        field: &str,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> TaskError {
        TaskError::InvalidField {
            location: self.loc.to_string(),
            instance_id: self.id.clone().unwrap_or_else(|| "?".into()),
            field: field.to_string(),
            source: source.into(),
        }
    }

    fn err(&self, field: &str, reason: impl Into<String>) -> TaskError {
        TaskError::Invalid {
            location: self.loc.to_string(),
            instance_id: self.id.clone().unwrap_or_else(|| "?".into()),
            field: field.to_string(),
            reason: reason.into(),
        }
    }

    /// [`TaskError::InvalidValue`]: `field` is not `what` it should be, as `source` found.
    fn err_value(
        &self,
        field: &str,
        what: &'static str,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> TaskError {
        TaskError::InvalidValue {
            location: self.loc.to_string(),
            instance_id: self.id.clone().unwrap_or_else(|| "?".into()),
            field: field.to_string(),
            what,
            source: Box::new(source),
        }
    }
}

fn opt_str(ctx: &Ctx, row: &Map<String, Value>, field: &str) -> Result<Option<String>, TaskError> {
    match row.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        // Some exports store versions as numbers (`0.8`); keep the text as written.
        Some(Value::Number(n)) if field == "version" => Ok(Some(n.to_string())),
        Some(v) => Err(ctx.err(field, format!("expected a string, found {}", type_name(v)))),
    }
}

fn req_str(ctx: &Ctx, row: &Map<String, Value>, field: &str) -> Result<String, TaskError> {
    match opt_str(ctx, row, field)? {
        Some(s) if !s.trim().is_empty() => Ok(s),
        Some(_) => Err(ctx.err(field, "is empty")),
        None => Err(ctx.err(field, "is missing")),
    }
}

/// Why `id` cannot be an instance id, if it cannot. Every stage names files and directories
/// after instance ids (`dojo eval`'s `OUT/<id>/`, sandboxes, caches), so an id must be one
/// plain path component: no separator, no `..`, no NUL, not hidden.
pub fn instance_id_problem(id: &str) -> Option<&'static str> {
    if id.is_empty() {
        Some("is empty")
    } else if id.contains('/') || id.contains('\\') {
        Some("contains a path separator ('/' or '\\'); an instance id names a directory")
    } else if id.contains("..") {
        Some("contains '..'; an instance id names a directory")
    } else if id.contains('\0') {
        Some("contains a NUL byte")
    } else if id.starts_with('.') {
        Some("starts with '.'; an instance id names a directory, and would be hidden")
    } else {
        None
    }
}

/// A list of test ids: a JSON array of strings, or a string holding one (SWE-bench's encoding).
fn test_list(
    ctx: &Ctx,
    row: &Map<String, Value>,
    field: &str,
) -> Result<Option<Vec<String>>, TaskError> {
    let v = match row.get(field) {
        None | Some(Value::Null) => return Ok(None),
        Some(v) => v,
    };
    let decoded;
    let arr = match v {
        Value::Array(a) => a,
        Value::String(s) => {
            decoded = serde_json::from_str::<Value>(s)
                .map_err(|e| ctx.err_value(field, "string is not a JSON list of test ids", e))?;
            match &decoded {
                Value::Array(a) => a,
                other => {
                    return Err(ctx.err(
                        field,
                        format!(
                            "string decodes to {}, expected a list of test ids",
                            type_name(other)
                        ),
                    ));
                }
            }
        }
        other => {
            return Err(ctx.err(
                field,
                format!(
                    "expected a list of test ids (array or JSON string), found {}",
                    type_name(other)
                ),
            ));
        }
    };
    let mut out = Vec::with_capacity(arr.len());
    for (i, item) in arr.iter().enumerate() {
        match item {
            Value::String(s) => out.push(s.clone()),
            other => {
                return Err(ctx.err(
                    field,
                    format!("item {i} is {}, expected a string", type_name(other)),
                ));
            }
        }
    }
    Ok(Some(out))
}

fn parse_source(ctx: &Ctx, row: &Map<String, Value>) -> Result<Option<TaskSource>, TaskError> {
    let v = match row.get("source") {
        None | Some(Value::Null) => return Ok(None),
        Some(v) => v,
    };
    let obj = v.as_object().ok_or_else(|| {
        ctx.err(
            "source",
            format!("expected an object, found {}", type_name(v)),
        )
    })?;
    let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("");
    match kind {
        "sdist" => {
            let mut rest = obj.clone();
            rest.remove("kind");
            let s: SdistSource = serde_json::from_value(Value::Object(rest))
                .map_err(|e| ctx.err_from("source", e))?;
            if s.sha256.len() != 64 || !s.sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(ctx.err(
                    "source.sha256",
                    format!("{:?} is not a hex sha256", s.sha256),
                ));
            }
            if !(s.url.starts_with("https://")
                || s.url.starts_with("http://")
                || s.url.starts_with("file://"))
            {
                return Err(ctx.err(
                    "source.url",
                    format!("{:?} is not an http(s) or file URL", s.url),
                ));
            }
            if s.filename.is_empty() || s.filename.contains('/') {
                return Err(ctx.err(
                    "source.filename",
                    format!("{:?} is not a plain file name", s.filename),
                ));
            }
            Ok(Some(TaskSource::Sdist(s)))
        }
        other => Err(ctx.err(
            "source.kind",
            format!("unknown source kind {other:?} (known: \"sdist\")"),
        )),
    }
}

/// SWE-rebench `install_config` → the keys we understand; the rest stays in `raw`.
fn rebench_override(ctx: &Ctx, row: &Map<String, Value>) -> Result<Option<EnvOverride>, TaskError> {
    let Some(Value::Object(cfg)) = row.get("install_config") else {
        return Ok(None);
    };
    let s = |k: &str| cfg.get(k).and_then(Value::as_str).map(str::to_string);
    let list = |k: &str| -> Result<Option<Vec<String>>, TaskError> {
        match cfg.get(k) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(one)) => Ok(Some(vec![one.clone()])),
            Some(Value::Array(a)) => a
                .iter()
                .map(|x| {
                    x.as_str()
                        .map(str::to_string)
                        .ok_or_else(|| ctx.err(&format!("install_config.{k}"), "expected strings"))
                })
                .collect::<Result<Vec<_>, _>>()
                .map(Some),
            Some(v) => Err(ctx.err(
                &format!("install_config.{k}"),
                format!("unexpected {}", type_name(v)),
            )),
        }
    };
    Ok(Some(EnvOverride {
        python: s("python"),
        requirements: list("pip_packages")?,
        install: list("install")?,
        test_cmd: s("test_cmd"),
        log_parser: s("log_parser")
            .map(|p| p.parse())
            .transpose()
            .map_err(|e: TaskError| ctx.err_from("install_config.log_parser", e))?,
        ..Default::default()
    }))
}

impl Task {
    /// Decode one row strictly. Errors name the location, the instance and the field.
    pub fn from_row(row: Map<String, Value>, loc: &Location) -> Result<Task, TaskError> {
        let mut ctx = Ctx { loc, id: None };
        let instance_id = req_str(&ctx, &row, "instance_id")?;
        if let Some(problem) = instance_id_problem(&instance_id) {
            return Err(ctx.err("instance_id", format!("{instance_id:?} {problem}")));
        }
        ctx.id = Some(instance_id.clone());
        let repo = req_str(&ctx, &row, "repo")?;
        let patch = req_str(&ctx, &row, "patch")?;
        let source = parse_source(&ctx, &row)?;
        let base_commit = match (opt_str(&ctx, &row, "base_commit")?, &source) {
            (Some(c), _) if !c.is_empty() => c,
            (_, Some(TaskSource::Sdist(s))) => s.sha256.clone(),
            (_, None) => {
                return Err(ctx.err(
                    "base_commit",
                    "is missing (required unless `source` is given)",
                ));
            }
        };
        let s = |f: &str| opt_str(&ctx, &row, f).map(Option::unwrap_or_default);
        let image = match opt_str(&ctx, &row, "image")? {
            Some(i) => Some(i),
            None => opt_str(&ctx, &row, "image_name")?,
        };
        let env = match row.get("env") {
            None | Some(Value::Null) => rebench_override(&ctx, &row)?,
            Some(v) => Some(
                serde_json::from_value::<EnvOverride>(v.clone())
                    .map_err(|e| ctx.err_from("env", e))?,
            ),
        };
        let eval_type = opt_str(&ctx, &row, "eval_type")?
            .map(|t| t.parse::<EvalType>())
            .transpose()
            .map_err(|e| ctx.err_from("eval_type", e))?;
        let log_parser = match opt_str(&ctx, &row, "log_parser")? {
            Some(p) => Some(
                p.parse()
                    .map_err(|e: TaskError| ctx.err_from("log_parser", e))?,
            ),
            None => row
                .get("install_config")
                .and_then(|c| c.get("log_parser"))
                .and_then(Value::as_str)
                .map(|p| p.parse())
                .transpose()
                .map_err(|e: TaskError| ctx.err_from("install_config.log_parser", e))?,
        };
        Ok(Task {
            repo,
            base_commit,
            patch,
            test_patch: s("test_patch")?,
            problem_statement: s("problem_statement")?,
            hints_text: s("hints_text")?,
            created_at: s("created_at")?,
            version: s("version")?,
            environment_setup_commit: s("environment_setup_commit")?,
            fail_to_pass: test_list(&ctx, &row, "FAIL_TO_PASS")?,
            pass_to_pass: test_list(&ctx, &row, "PASS_TO_PASS")?,
            fail_to_fail: test_list(&ctx, &row, "FAIL_TO_FAIL")?.unwrap_or_default(),
            pass_to_fail: test_list(&ctx, &row, "PASS_TO_FAIL")?.unwrap_or_default(),
            eval_script: opt_str(&ctx, &row, "eval_script")?.filter(|s| !s.is_empty()),
            log_parser,
            eval_type,
            image,
            source,
            env,
            instance_id,
            raw: row,
        })
    }

    /// FAIL_TO_PASS, or an empty list for a task that has none yet.
    pub fn f2p(&self) -> &[String] {
        self.fail_to_pass.as_deref().unwrap_or(&[])
    }
    pub fn p2p(&self) -> &[String] {
        self.pass_to_pass.as_deref().unwrap_or(&[])
    }

    /// The sdist source, if the task is built from one.
    pub fn sdist(&self) -> Option<&SdistSource> {
        match &self.source {
            Some(TaskSource::Sdist(s)) => Some(s),
            None => None,
        }
    }

    /// The row with new FAIL_TO_PASS / PASS_TO_PASS, stored in the form the row used (a JSON
    /// string or an array); a list the row lacks (absent or null) is an array when
    /// `default_array`, else a JSON string. Other fields keep their values and order.
    pub fn row_with_lists(
        &self,
        f2p: &[String],
        p2p: &[String],
        default_array: bool,
    ) -> Map<String, Value> {
        let mut row = self.raw.clone();
        for (field, list) in [("FAIL_TO_PASS", f2p), ("PASS_TO_PASS", p2p)] {
            let as_array = match row.get(field) {
                Some(Value::Array(_)) => true,
                Some(Value::String(_)) => false,
                _ => default_array,
            };
            let arr = Value::Array(list.iter().cloned().map(Value::String).collect());
            let v = if as_array {
                arr
            } else {
                Value::String(arr.to_string())
            };
            row.insert(field.to_string(), v);
        }
        row
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Ids name directories: one that is a path is refused where the file is read.
    #[test]
    fn path_like_instance_ids_are_refused() {
        let loc = Location {
            file: "tasks.jsonl".into(),
            unit: "line",
            index: 3,
        };
        for bad in ["../../x", "a/b", "a\\b", "..", ".hidden", "a\u{0}b", "x..y"] {
            let row = json!({"instance_id": bad, "repo": "a/b", "base_commit": "c", "patch": "p"});
            let e = Task::from_row(row.as_object().cloned().unwrap(), &loc)
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("tasks.jsonl line 3") && e.contains("field instance_id"),
                "{bad}: {e}"
            );
        }
        assert!(instance_id_problem("django__django-11099").is_none());
    }

    fn loc() -> Location {
        Location {
            file: "t.jsonl".into(),
            unit: "line",
            index: 3,
        }
    }

    fn row(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn lists_as_strings_or_arrays() {
        let a = Task::from_row(
            row(
                json!({"instance_id":"a__b-1","repo":"a/b","base_commit":"c","patch":"p",
                        "FAIL_TO_PASS":"[\"t1\"]","PASS_TO_PASS":["t2","t3"]}),
            ),
            &loc(),
        )
        .unwrap();
        assert_eq!(a.f2p(), ["t1"]);
        assert_eq!(a.p2p(), ["t2", "t3"]);
        let r = a.row_with_lists(&["x".into()], &["y".into()], true);
        assert_eq!(r["FAIL_TO_PASS"], json!("[\"x\"]"));
        assert_eq!(r["PASS_TO_PASS"], json!(["y"]));
    }

    #[test]
    fn errors_name_location_instance_and_field() {
        let e = Task::from_row(
            row(
                json!({"instance_id":"a__b-1","repo":"a/b","base_commit":"c","patch":"p",
                        "FAIL_TO_PASS":"not json"}),
            ),
            &loc(),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("t.jsonl line 3"), "{e}");
        assert!(e.contains("a__b-1"), "{e}");
        assert!(e.contains("FAIL_TO_PASS"), "{e}");
        let e = Task::from_row(row(json!({"repo":"a/b"})), &loc())
            .unwrap_err()
            .to_string();
        assert!(e.contains("instance_id") && e.contains("missing"), "{e}");
        let e = Task::from_row(
            row(json!({"instance_id":"x","repo":"a/b","patch":"p","PASS_TO_PASS":[1]})),
            &loc(),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("base_commit"), "{e}");
    }

    #[test]
    fn sdist_source_and_default_base_commit() {
        let sha = "a".repeat(64);
        let t = Task::from_row(
            row(json!({"instance_id":"toolz-1","repo":"pytoolz/toolz","patch":"p","version":"1.2.0",
                "source":{"kind":"sdist","url":"https://files.pythonhosted.org/x/toolz-1.2.0.tar.gz",
                          "sha256":sha,"filename":"toolz-1.2.0.tar.gz","bug_patch":"d"}})),
            &loc(),
        )
        .unwrap();
        assert_eq!(t.base_commit, sha);
        assert_eq!(t.sdist().map(|s| s.bug_patch.as_str()), Some("d"));
        let e = Task::from_row(
            row(json!({"instance_id":"t","repo":"r/r","patch":"p","source":{"kind":"git"}})),
            &loc(),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("source.kind"), "{e}");
    }

    #[test]
    fn swesmith_and_rebench_extras() {
        let t = Task::from_row(
            row(json!({"instance_id":"x","repo":"swesmith/x","base_commit":"c","patch":"p",
                "image_name":"img","FAIL_TO_PASS":["a"],"PASS_TO_PASS":[],
                "FAIL_TO_FAIL":["f"],"PASS_TO_FAIL":"[\"g\"]",
                "install_config":{"python":"3.10","pip_packages":["pytest"],"log_parser":"parse_log_pytest"}})),
            &loc(),
        )
        .unwrap();
        assert_eq!(t.image.as_deref(), Some("img"));
        assert_eq!(t.fail_to_fail, ["f"]);
        assert_eq!(t.pass_to_fail, ["g"]);
        assert_eq!(t.log_parser, Some(LogParser::Pytest));
        let env = t.env.unwrap();
        assert_eq!(env.python.as_deref(), Some("3.10"));
        assert_eq!(env.requirements.unwrap(), ["pytest"]);
    }
}
