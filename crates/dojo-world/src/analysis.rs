//! The per-task initial analysis: 5–10 bullets (the bug, its symptoms, the responsible code, the
//! essence of the fix, what the tests check) that SWT and SWR read as their first section.
//!
//! It is generated once per task and model at temperature 0 from the task's problem, hints, gold
//! patch, test patch and test lists, then cached under `$DOJO_HOME/world-analysis/`, one file per
//! task and model ([`analysis_cache_path`]), so readers that only know the task id find it
//! ([`lookup_analysis`]). The file records a hash of the exact prompt: an edited task or prompt
//! regenerates it. A failed
//! generation is an error, not SWE-World's canned fallback text: a made-up analysis would poison
//! every prompt of the task.

use std::path::{Path, PathBuf};
use std::time::Duration;

use dojo_llm::{ChatBackend, ChatMessage, ChatRequest};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::client::{Role, WorldError, ask};
use crate::parse::strip_think;

/// Schema version of a cached analysis file.
pub const ANALYSIS_SCHEMA_VERSION: u32 = 1;

/// The cache bucket under `$DOJO_HOME`.
pub const ANALYSIS_BUCKET: &str = "world-analysis";

/// What the analysis is written from.
/// A file operation on the analysis cache that failed, naming the path.
#[derive(Debug, thiserror::Error)]
#[error("{}: {source}", .path.display())]
struct AtPath {
    path: PathBuf,
    #[source]
    source: std::io::Error,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AnalysisInput {
    pub task_id: String,
    pub repo: String,
    pub problem_statement: String,
    #[serde(default)]
    pub hints: Option<String>,
    pub gold_patch: String,
    #[serde(default)]
    pub test_patch: Option<String>,
    #[serde(default)]
    pub fail_to_pass: Vec<String>,
    #[serde(default)]
    pub pass_to_pass: Vec<String>,
}

/// The analysis prompt's system message.
pub const ANALYSIS_SYSTEM_PROMPT: &str = "\
You are a senior software engineer and bug-fixing expert. Given a bug report, the discussion \
around it, the repository, the code patch that fixes it, the test patch, and the FAIL_TO_PASS / \
PASS_TO_PASS test lists, write a concise initial technical analysis of the problem and the fix.

Cover:
- the core bug and the incorrect behaviour it causes;
- which modules or functions are responsible;
- the essence of the fix: what changes and why it fixes the bug;
- what the FAIL_TO_PASS and PASS_TO_PASS tests verify;
- subtle constraints or corner cases that matter.

Format: plain English, 5-10 short markdown bullets (\"- \"), one or two sentences each. Do not \
repeat the diffs or the test lists; summarise their intent.";

/// The analysis prompt: `[system, user]`.
pub fn analysis_messages(input: &AnalysisInput) -> Vec<ChatMessage> {
    let list = |t: &[String]| serde_json::to_string_pretty(t).unwrap_or_else(|_| "[]".into());
    let hints = input
        .hints
        .as_deref()
        .filter(|h| !h.trim().is_empty())
        .unwrap_or("No human hints provided.");
    let test_patch = input
        .test_patch
        .as_deref()
        .filter(|p| !p.trim().is_empty())
        .unwrap_or("No test patch provided.");
    let user = format!(
        "### Repository\n{}\n\n\
         ### Problem Statement\n{}\n\n\
         ### Human Discussion / Hints\n{hints}\n\n\
         ### Gold Patch (code fix)\n```diff\n{}\n```\n\n\
         ### Test Patch (changes to tests)\n```diff\n{test_patch}\n```\n\n\
         ### FAIL_TO_PASS (failing before the fix, passing after it)\n{}\n\n\
         ### PASS_TO_PASS (passing before and after the fix)\n{}\n\n\
         ### Your Task\n\
         Write the initial technical analysis: 5-10 markdown \"- \" bullets, plain English, no \
         other commentary.\n",
        input.repo,
        input.problem_statement,
        input.gold_patch,
        list(&input.fail_to_pass),
        list(&input.pass_to_pass),
    );
    vec![
        ChatMessage::system(ANALYSIS_SYSTEM_PROMPT),
        ChatMessage::user(user),
    ]
}

/// One cached analysis.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CachedAnalysis {
    pub schema_version: u32,
    pub task_id: String,
    pub model: String,
    /// sha256 of the rendered prompt it was generated from.
    pub prompt_sha: String,
    pub analysis: String,
}

/// Where the analysis of task `task_id` by `model` is cached under `root` (normally
/// `$DOJO_HOME/world-analysis`): `<model>/<task>-<hash>.json`, names made filesystem-safe and
/// disambiguated by a hash of the exact strings.
pub fn analysis_cache_path(root: &Path, task_id: &str, model: &str) -> PathBuf {
    let safe = |s: &str| -> String {
        s.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                    c
                } else {
                    '_'
                }
            })
            .take(80)
            .collect()
    };
    let mut h = Sha256::new();
    h.update(model.as_bytes());
    h.update([0]);
    h.update(task_id.as_bytes());
    let tag = &hex::encode(h.finalize())[..12];
    root.join(safe(model))
        .join(format!("{}-{tag}.json", safe(task_id)))
}

fn prompt_sha(input: &AnalysisInput) -> String {
    let mut h = Sha256::new();
    h.update(serde_json::to_vec(&analysis_messages(input)).unwrap_or_default());
    hex::encode(h.finalize())
}

fn read_cached(path: &Path) -> Option<CachedAnalysis> {
    let c: CachedAnalysis = serde_json::from_slice(&std::fs::read(path).ok()?).ok()?;
    (c.schema_version == ANALYSIS_SCHEMA_VERSION && !c.analysis.trim().is_empty()).then_some(c)
}

/// The cached analysis of `task_id` by `model`, if one was generated (whatever prompt it came
/// from): for readers that have the task id but not the task, such as curation of records.
pub fn lookup_analysis(root: &Path, task_id: &str, model: &str) -> Option<String> {
    read_cached(&analysis_cache_path(root, task_id, model)).map(|c| c.analysis)
}

/// The analysis of `input` by `backend` (asked for `model`, temperature 0), from the cache under
/// `root` when present and made from the same prompt, else generated and cached. A cache file
/// that cannot be read as an analysis is regenerated (and overwritten).
pub async fn cached_analysis(
    backend: &dyn ChatBackend,
    model: &str,
    input: &AnalysisInput,
    root: &Path,
    timeout: Duration,
) -> Result<String, WorldError> {
    let path = analysis_cache_path(root, &input.task_id, model);
    let sha = prompt_sha(input);
    if let Some(c) = read_cached(&path)
        && c.prompt_sha == sha
    {
        return Ok(c.analysis);
    }
    let req = ChatRequest {
        model: model.to_string(),
        messages: analysis_messages(input),
        temperature: Some(0.0),
        ..ChatRequest::default()
    };
    let (reply, _) = ask(backend, Role::Analysis, req, timeout).await?;
    let analysis = strip_think(&reply)
        .map_err(|e| crate::client::unparseable(Role::Analysis, backend, e, &reply))?
        .trim()
        .to_string();
    if analysis.is_empty() {
        return Err(crate::client::unparseable(
            Role::Analysis,
            backend,
            crate::parse::ParseError::Empty,
            &reply,
        ));
    }
    let record = CachedAnalysis {
        schema_version: ANALYSIS_SCHEMA_VERSION,
        task_id: input.task_id.clone(),
        model: model.to_string(),
        prompt_sha: sha,
        analysis: analysis.clone(),
    };
    let setup = |source: std::sync::Arc<dyn std::error::Error + Send + Sync>| WorldError::Setup {
        role: Role::Analysis,
        source,
    };
    let at = |path: &Path, source: std::io::Error| {
        setup(std::sync::Arc::new(AtPath {
            path: path.to_path_buf(),
            source,
        }))
    };
    let dir = path.parent().unwrap_or(root);
    std::fs::create_dir_all(dir).map_err(|e| at(dir, e))?;
    let bytes = serde_json::to_vec_pretty(&record).map_err(|e| setup(std::sync::Arc::new(e)))?;
    dojo_rundir::write_atomic(&path, &bytes).map_err(|e| at(&path, e))?;
    Ok(analysis)
}

/// `$DOJO_HOME/world-analysis`.
pub fn default_cache_root() -> PathBuf {
    dojo_cache::dojo_home().join(ANALYSIS_BUCKET)
}

/// What `dojo tasks analyze` did: each task's analysis or error, by one model, cached under
/// one root.
pub struct AnalysisRun {
    pub model: String,
    pub root: PathBuf,
    /// (task id, its analysis or why there is none), in completion order.
    pub results: Vec<(String, Result<String, WorldError>)>,
}

impl AnalysisRun {
    /// The analysis of every task of `inputs` ([`cached_analysis`]), at most `concurrency`
    /// requests in flight.
    pub async fn run(
        backend: &dyn ChatBackend,
        model: &str,
        inputs: &[AnalysisInput],
        root: &Path,
        timeout: Duration,
        concurrency: usize,
    ) -> AnalysisRun {
        use futures::stream::{self, StreamExt};
        let results = stream::iter(inputs)
            .map(|input| async move {
                let r = cached_analysis(backend, model, input, root, timeout).await;
                (input.task_id.clone(), r)
            })
            .buffer_unordered(concurrency.max(1))
            .collect()
            .await;
        AnalysisRun {
            model: model.to_string(),
            root: root.to_path_buf(),
            results,
        }
    }

    /// `TASK: ERROR` for each task without an analysis.
    pub fn failures(&self) -> Vec<String> {
        self.results
            .iter()
            .filter_map(|(task, r)| r.as_ref().err().map(|e| format!("{task}: {e}")))
            .collect()
    }

    /// The closing line: tasks analysed and failed, the cache, and how to use the analyses.
    pub fn summary(&self) -> String {
        let failed = self.results.iter().filter(|(_, r)| r.is_err()).count();
        let key = &self.model;
        format!(
            "{} tasks analysed by {key} ({failed} failed), cached under {}; use them with `[world] analysis_model = \"{key}\"` or `dojo curate --world-analysis-model {key}`",
            self.results.len() - failed,
            self.root.display()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::tests::Scripted;
    use dojo_llm::LlmError;

    fn input() -> AnalysisInput {
        AnalysisInput {
            task_id: "calc-1".into(),
            repo: "example/calc".into(),
            problem_statement: "add(2, 3) returns -1.".into(),
            hints: None,
            gold_patch: "diff --git a/calc.py b/calc.py\n-    return a - b\n+    return a + b\n"
                .into(),
            test_patch: Some(
                "diff --git a/test_calc.py b/test_calc.py\n+def test_add(): ...\n".into(),
            ),
            fail_to_pass: vec!["test_calc.py::test_add".into()],
            pass_to_pass: vec![],
        }
    }

    #[test]
    fn analysis_prompt_layout() {
        let text = analysis_messages(&input())
            .iter()
            .map(|m| format!("=== {:?} ===\n{}", m.role, m.text()))
            .collect::<Vec<_>>()
            .join("\n");
        insta::assert_snapshot!("analysis_prompt", text);
    }

    #[tokio::test]
    async fn generated_once_per_task_and_model_at_temperature_zero() {
        let dir = tempfile::tempdir().unwrap();
        let t = Duration::from_secs(5);
        let first = Scripted::text(&["<think>hmm</think>\n- `add` subtracts.\n"]);
        let a = cached_analysis(&*first, "m1", &input(), dir.path(), t)
            .await
            .unwrap();
        assert_eq!(a, "- `add` subtracts.");
        assert_eq!(first.requests.lock().unwrap()[0].temperature, Some(0.0));
        // Cached: a backend that would fail is not asked.
        let down = Scripted::new(vec![Some(Err(LlmError::from_status("e", 500, "", None)))]);
        let again = cached_analysis(&*down, "m1", &input(), dir.path(), t)
            .await
            .unwrap();
        assert_eq!(again, a);
        assert_eq!(down.calls(), 0);
        // Another model is another entry; its failure is an error, not a canned analysis.
        let e = cached_analysis(&*down, "m2", &input(), dir.path(), t)
            .await
            .unwrap_err();
        assert!(e.is_infrastructure());
        let cached: CachedAnalysis = serde_json::from_slice(
            &std::fs::read(analysis_cache_path(dir.path(), "calc-1", "m1")).unwrap(),
        )
        .unwrap();
        assert_eq!(
            (cached.schema_version, cached.task_id.as_str()),
            (1, "calc-1")
        );
        assert_eq!(
            lookup_analysis(dir.path(), "calc-1", "m1").as_deref(),
            Some(a.as_str())
        );
        assert_eq!(lookup_analysis(dir.path(), "calc-1", "m2"), None);
        // An edited task is generated again.
        let mut edited = input();
        edited.problem_statement.push_str(" Also for floats.");
        let fresh = Scripted::text(&["- new"]);
        let b = cached_analysis(&*fresh, "m1", &edited, dir.path(), t)
            .await
            .unwrap();
        assert_eq!((b.as_str(), fresh.calls()), ("- new", 1));
    }

    #[tokio::test]
    async fn a_run_analyses_every_task_and_counts_failures() {
        let dir = tempfile::tempdir().unwrap();
        let mut other = input();
        other.task_id = "calc-2".into();
        let backend = Scripted::new(vec![
            Some(Ok("- one".into())),
            Some(Err(LlmError::from_status("e", 500, "", None))),
        ]);
        let run = AnalysisRun::run(
            &*backend,
            "m",
            &[input(), other],
            dir.path(),
            Duration::from_secs(5),
            1,
        )
        .await;
        assert_eq!(run.results.len(), 2);
        assert_eq!(run.failures().len(), 1);
        assert!(
            run.failures()[0].starts_with("calc-2: "),
            "{:?}",
            run.failures()
        );
        let root = dir.path().display();
        assert_eq!(
            run.summary(),
            format!(
                "1 tasks analysed by m (1 failed), cached under {root}; use them with `[world] analysis_model = \"m\"` or `dojo curate --world-analysis-model m`"
            )
        );
    }
}
