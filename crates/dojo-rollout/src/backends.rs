//! Per-rollout backends of each policy kind ([`BackendFactory`] implementations).

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use dojo_llm::{BoxFuture, ChatBackend, ChatMessage, ChatRequest, ChatResponse, LlmError, Role};
use dojo_sandbox::WORKSPACE;
use dojo_trajectory::PolicyInfo;

use crate::agent_runner::{BackendError, BackendFactory};
use crate::error::RolloutError;
use crate::gold::plan_actions;
use crate::policy::{PolicyConfig, Sampling, ScriptedBackend};
use crate::prepared::Prepared;
use crate::store::Key;

/// The test command gold-replay runs before submitting: the environment's test command over the
/// test files of the test patch that already exist in the workspace (the agent never sees the
/// hidden tests, so files the test patch creates are left out). A task without a test patch
/// (synthesized bugs: the tests are already in the tree) runs the files its FAIL_TO_PASS ids
/// name (`path::test` → `path`) instead. `None` when there are none.
pub fn visible_test_command(p: &Prepared) -> Option<String> {
    let mut files = dojo_task::test_directives(&p.task.test_patch, p.repo_env.directives);
    if p.task.test_patch.trim().is_empty() && p.repo_env.directives == dojo_task::Directives::Files
    {
        files = failing_test_files(p.task.f2p());
    }
    let files: Vec<String> = files
        .into_iter()
        .filter(|f| p.pristine.path.join(f).is_file())
        .collect();
    (!files.is_empty()).then(|| format!("{} {}", p.repo_env.test_cmd, files.join(" ")))
}

/// The distinct files of pytest-style test ids (`tests/a.py::T::t[x]` → `tests/a.py`), in order.
fn failing_test_files(ids: &[String]) -> Vec<String> {
    let mut seen = std::collections::HashSet::new();
    ids.iter()
        .filter_map(|id| dojo_patch::id_file(id))
        .filter(|f| seen.insert(*f))
        .map(str::to_string)
        .collect()
}

/// `gold-replay`.
pub struct GoldBackends {
    pub config: PolicyConfig,
    pub run_tests: bool,
}

impl BackendFactory for GoldBackends {
    fn backend(&self, p: &Prepared, _sample: u32) -> Result<Arc<dyn ChatBackend>, BackendError> {
        let cmd = if self.run_tests {
            visible_test_command(p)
        } else {
            None
        };
        let root = p.pristine.path.clone();
        let actions = plan_actions(
            &p.task.instance_id,
            &p.task.patch,
            WORKSPACE,
            cmd.as_deref(),
            |rel| std::fs::read_to_string(root.join(rel)),
        )?;
        Ok(Arc::new(ScriptedBackend::gold(
            &p.task.instance_id,
            actions,
        )))
    }
    fn policy_info(&self) -> PolicyInfo {
        PolicyInfo {
            kind: "gold-replay".into(),
            model: None,
            endpoint: None,
            config: self.config.to_json(),
        }
    }
}

/// `replay FILE`: the assistant turns of recorded trajectories, by (task id, sample index).
pub struct ReplayBackends {
    pub config: PolicyConfig,
    pub source: String,
    turns: HashMap<Key, Vec<ChatMessage>>,
}

impl ReplayBackends {
    pub fn load(config: PolicyConfig, file: &Path) -> Result<ReplayBackends, RolloutError> {
        let report = dojo_trajectory::read_jsonl(file).map_err(RolloutError::policy)?;
        for p in &report.problems {
            tracing::warn!("replay source {}: {p:?}", file.display());
        }
        let turns = report
            .trajectories
            .into_iter()
            .map(|t| {
                let key = Key {
                    task_id: t.task_id.clone(),
                    sample_index: t.sample_index,
                };
                let msgs = t
                    .messages
                    .into_iter()
                    .filter(|m| m.role == Role::Assistant)
                    .collect();
                (key, msgs)
            })
            .collect();
        Ok(ReplayBackends {
            config,
            source: file.display().to_string(),
            turns,
        })
    }
}

impl BackendFactory for ReplayBackends {
    fn backend(&self, p: &Prepared, sample: u32) -> Result<Arc<dyn ChatBackend>, BackendError> {
        let key = Key {
            task_id: p.task.instance_id.clone(),
            sample_index: sample,
        };
        let msgs = self
            .turns
            .get(&key)
            .ok_or_else(|| BackendError::NoRecording {
                key: key.to_string(),
                source_file: self.source.clone(),
            })?;
        Ok(Arc::new(ScriptedBackend::replay(
            format!("replay:{}", self.source),
            msgs.clone(),
        )))
    }
    fn policy_info(&self) -> PolicyInfo {
        PolicyInfo {
            kind: "replay".into(),
            model: None,
            endpoint: Some(self.source.clone()),
            config: self.config.to_json(),
        }
    }
}

/// A model policy (OpenAI-compatible client or the embedded engine): one shared backend, with the
/// policy's model name and sampling filled into requests that leave them unset.
pub struct ModelBackends {
    pub config: PolicyConfig,
    pub kind: &'static str,
    pub model: String,
    pub client: Arc<dyn ChatBackend>,
}

struct WithSampling {
    inner: Arc<dyn ChatBackend>,
    model: String,
    sampling: Sampling,
    /// Requests answered so far: one rollout's calls come in order, so call `i` gets its own
    /// seed stream `i` and turns do not replay one random stream.
    calls: AtomicU64,
}

impl ChatBackend for WithSampling {
    fn complete(&self, mut req: ChatRequest) -> BoxFuture<'_, Result<ChatResponse, LlmError>> {
        if req.model.is_empty() {
            req.model = self.model.clone();
        }
        let s = &self.sampling;
        req.temperature = req.temperature.or(s.temperature);
        req.top_p = req.top_p.or(s.top_p);
        if req.max_tokens.is_none() && req.max_completion_tokens.is_none() {
            req.max_tokens = s.max_tokens;
        }
        let call = self.calls.fetch_add(1, Ordering::Relaxed);
        req.seed = req
            .seed
            .or(s.seed.map(|seed| dojo_llm::derive_seed(seed, call)));
        for (k, v) in &s.extra {
            req.extra.entry(k.clone()).or_insert_with(|| v.clone());
        }
        self.inner.complete(req)
    }
    fn describe(&self) -> String {
        self.inner.describe()
    }
    fn context_tokens(&self) -> Option<usize> {
        self.inner.context_tokens()
    }
}

impl ModelBackends {
    /// Sample `sample`'s backend: the policy's model with its name and sampling filled into
    /// requests. A fixed seed becomes one per sample and, within it, one per call
    /// ([`dojo_llm::derive_seed`]), so distinct samples of a task differ and a rollout's turns
    /// draw fresh numbers; calls are counted in the order they arrive, so the seeds repeat from
    /// run to run when one caller (a rollout) makes them one after another.
    pub fn for_sample(&self, sample: u32) -> Arc<dyn ChatBackend> {
        let mut sampling = self.config.sampling.clone();
        sampling.seed = sampling
            .seed
            .map(|s| dojo_llm::derive_seed(s, u64::from(sample)));
        Arc::new(WithSampling {
            inner: self.client.clone(),
            model: self.model.clone(),
            sampling,
            calls: AtomicU64::new(0),
        })
    }
}

impl BackendFactory for ModelBackends {
    fn backend(&self, _p: &Prepared, sample: u32) -> Result<Arc<dyn ChatBackend>, BackendError> {
        Ok(self.for_sample(sample))
    }
    fn policy_info(&self) -> PolicyInfo {
        PolicyInfo {
            kind: self.kind.into(),
            model: Some(self.model.clone()),
            endpoint: Some(self.client.describe()),
            config: self.config.to_json(),
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn failing_test_ids_name_their_files_once() {
        let ids = [
            "tests/test_a.py::T::test_x[1 2]",
            "tests/test_a.py::test_y",
            "tests/test_b.py::test_z",
            "not a path id",
        ]
        .map(String::from);
        assert_eq!(
            super::failing_test_files(&ids),
            ["tests/test_a.py", "tests/test_b.py"]
        );
    }
}
