//! The per-task initial analysis: 5–10 bullets (the bug, its symptoms, the responsible code, the
//! essence of the fix, what the tests check) that SWT and SWR read as their first section.
//!
//! It is generated once per task and model at temperature 0 from the task's problem, hints, gold
//! patch, test patch and test lists, then cached under `$DOJO_HOME/world-analysis/` (keyed by the
//! task, the model and the exact prompt, so an edited task or prompt regenerates it). A failed
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
    /// sha256 of the model name and the rendered prompt: the cache key.
    pub key: String,
    pub analysis: String,
}

/// Where the analysis of `input` by `model` is cached under `root` (normally
/// `$DOJO_HOME/world-analysis`).
pub fn analysis_cache_path(root: &Path, input: &AnalysisInput, model: &str) -> PathBuf {
    root.join(format!("{}.json", cache_key(input, model)))
}

fn cache_key(input: &AnalysisInput, model: &str) -> String {
    let mut h = Sha256::new();
    h.update(model.as_bytes());
    h.update([0]);
    h.update(serde_json::to_vec(&analysis_messages(input)).unwrap_or_default());
    hex::encode(h.finalize())
}

/// The analysis of `input` by `backend` (asked for `model`, temperature 0), from the cache under
/// `root` when present, else generated and cached. A cache file that cannot be read as an
/// analysis is regenerated (and overwritten).
pub async fn cached_analysis(
    backend: &dyn ChatBackend,
    model: &str,
    input: &AnalysisInput,
    root: &Path,
    timeout: Duration,
) -> Result<String, WorldError> {
    let path = analysis_cache_path(root, input, model);
    if let Ok(bytes) = std::fs::read(&path)
        && let Ok(c) = serde_json::from_slice::<CachedAnalysis>(&bytes)
        && c.schema_version == ANALYSIS_SCHEMA_VERSION
        && !c.analysis.trim().is_empty()
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
        key: cache_key(input, model),
        analysis: analysis.clone(),
    };
    let setup = |reason: String| WorldError::Setup {
        role: Role::Analysis,
        reason,
    };
    std::fs::create_dir_all(root).map_err(|e| setup(format!("{}: {e}", root.display())))?;
    let bytes = serde_json::to_vec_pretty(&record).map_err(|e| setup(e.to_string()))?;
    dojo_cache::write_atomic(&path, &bytes)
        .map_err(|e| setup(format!("{}: {e}", path.display())))?;
    Ok(analysis)
}

/// `$DOJO_HOME/world-analysis`.
pub fn default_cache_root() -> PathBuf {
    dojo_cache::dojo_home().join(ANALYSIS_BUCKET)
}
