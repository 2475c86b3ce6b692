//! The `swr` selector: SWE-World's reward model (SWR) scores each candidate, as SWE-Master picks
//! the argmax of SWR's score and SWE-World averages n samples of it per candidate.
//!
//! SWR reads the issue, the test command, the FAIL_TO_PASS / PASS_TO_PASS test names and the
//! candidate's patch, and answers with a simulated test report and a 0/1 reward
//! ([`dojo_world::WorldClient::predict_reward`], the world stage's client and parser). The score
//! is the mean reward over `samples` independent samples (SWE-World uses 3, at temperature 0.7).
//! The context is built as real grading's SWR records are ([`dojo_world::WorldTask`], with the
//! test files as grading runs them), except that the gold patch is never put in it: at
//! selection time it is unknown ([`dojo_world::WorldTask::at_test_time`]).
//! An empty patch is reward 0 without a call. A candidate whose every sample failed (model
//! error, unparseable reply) is an infrastructure failure: it has no score (below every real
//! one) and is counted in the notes.

use std::collections::HashMap;
use std::sync::Arc;

use dojo_world::{FileView, SwrContext, WorldClient, WorldTask};
use futures::stream::{self, StreamExt};

use crate::SelectError;
use crate::candidates::CandidateSet;
use crate::verifier::{CandidateKey, Precomputed};

/// What a task contributes to SWR's context: the task as a test-time selector may see it, and
/// its test files as grading runs them (one read serves every candidate).
#[derive(Debug, Clone, Default)]
pub struct SwrTask {
    pub world: WorldTask,
    pub test_files: Vec<FileView>,
}

/// How the scoring went.
#[derive(Debug, Clone, Default)]
pub struct SwrStats {
    pub scored: usize,
    pub empty: usize,
    pub failed: usize,
    /// Samples that failed among scored candidates.
    pub failed_samples: usize,
    /// The first failure, as an example: `task: error`, the error with its causes
    /// ([`dojo_rundir::error_chain`]).
    pub first_failure: Option<String>,
}

/// Why a candidate has no context to score (the caller names the task).
#[derive(Debug, thiserror::Error)]
enum NoContext<'a> {
    #[error("not in the task file")]
    NotInTaskFile,
    #[error("{0}")]
    Task(&'a SelectError),
}

/// Scores every candidate of `set` with SWR's mean reward over `samples` samples, `concurrency`
/// candidates at a time. Tasks missing from `tasks`, or whose entry is the reason no context
/// can be built (an environment that does not resolve), are failures with that reason.
pub async fn score_all(
    client: Arc<WorldClient>,
    set: &CandidateSet,
    tasks: &HashMap<String, Result<SwrTask, SelectError>>,
    samples: u32,
    concurrency: usize,
) -> (Precomputed, SwrStats) {
    let jobs: Vec<(CandidateKey, Result<SwrContext, NoContext>)> = set
        .tasks
        .iter()
        .flat_map(|t| {
            t.candidates.iter().map(|c| {
                let ctx = match tasks.get(&t.task_id) {
                    None => Err(NoContext::NotInTaskFile),
                    Some(Err(e)) => Err(NoContext::Task(e)),
                    Some(Ok(task)) => Ok(task),
                }
                .map(|task| task.world.swr_context(&c.patch, task.test_files.clone()));
                ((t.task_id.clone(), c.label()), ctx)
            })
        })
        .collect();
    let results: Vec<_> = stream::iter(jobs)
        .map(|(key, ctx)| {
            let client = client.clone();
            async move {
                let r = match ctx {
                    Err(e) => Err(format!("{}: {}", key.0, dojo_rundir::error_chain(&e))),
                    Ok(ctx) => client
                        .predict_reward(&ctx, samples)
                        .await
                        .map_err(|e| format!("{}: {}", key.0, dojo_rundir::error_chain(&e))),
                };
                (key, r)
            }
        })
        .buffer_unordered(concurrency.max(1))
        .collect()
        .await;
    let mut stats = SwrStats::default();
    let mut scores = HashMap::new();
    for (key, r) in results {
        match r {
            Ok(est) => {
                if est.empty_patch {
                    stats.empty += 1;
                } else {
                    stats.scored += 1;
                }
                stats.failed_samples += est.failures.len();
                scores.insert(key, est.mean);
            }
            Err(e) => {
                stats.failed += 1;
                stats.first_failure.get_or_insert(e);
            }
        }
    }
    (
        Precomputed {
            name: "swr",
            scores,
        },
        stats,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::candidates::TaskCandidates;
    use crate::candidates::tests::cand;
    use crate::selector::{Selector, expected_resolved};
    use dojo_llm::{ChatBackend, ChatRequest, ChatResponse, LlmError};
    use futures::future::BoxFuture;

    /// SWR as a rule on the patch it is shown: reward 1 when the patch sets `x = 2` and the
    /// task's test file is shown, else 0; and a reply that does not parse for `x = 9`. A gold
    /// patch in the prompt is a reply that does not parse either (it must never be shown).
    struct RuleSwr;
    impl ChatBackend for RuleSwr {
        fn complete(&self, req: ChatRequest) -> BoxFuture<'_, Result<ChatResponse, LlmError>> {
            let prompt: String = req
                .messages
                .iter()
                .filter_map(|m| m.content.as_ref().map(|c| c.text()))
                .collect();
            let text = if prompt.contains("+x = 9") || prompt.contains("GOLD") {
                "no idea".to_string()
            } else {
                let reward =
                    u8::from(prompt.contains("+x = 2") && prompt.contains("assert m.x == 2"));
                format!("{{\"test_report\": \"ok\", \"reward\": {reward}}}")
            };
            Box::pin(async move {
                serde_json::from_value(serde_json::json!({
                    "id": "r", "object": "chat.completion", "created": 0, "model": "swr",
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": text}}]
                }))
                .map_err(|e| LlmError::Config(e.to_string()))
            })
        }
    }

    fn patch(v: u32) -> String {
        format!("diff --git a/m.py b/m.py\n--- a/m.py\n+++ b/m.py\n@@ -1 +1 @@\n-x = 0\n+x = {v}\n")
    }

    #[test]
    fn swr_scores_are_mean_rewards_and_pick_the_right_fix() {
        let t = TaskCandidates {
            task_id: "t".into(),
            candidates: vec![
                cand(0, &patch(1), false),
                cand(1, &patch(2), true),
                cand(2, "", false),
                cand(3, &patch(9), false),
            ],
        };
        let set = CandidateSet {
            tasks: vec![t.clone()],
            ..CandidateSet::default()
        };
        let tasks = HashMap::from([(
            "t".to_string(),
            Ok(SwrTask {
                world: WorldTask {
                    task_id: "t".into(),
                    problem_statement: "x must be 2".into(),
                    test_command: "pytest".into(),
                    fail_to_pass: vec!["test_x".into()],
                    gold_patch: Some("GOLD".into()),
                    ..WorldTask::default()
                }
                .at_test_time(),
                test_files: vec![FileView {
                    path: "test_m.py".into(),
                    base: None,
                    current: Some("import m\ndef test_x(): assert m.x == 2\n".into()),
                }],
            }),
        )]);
        let backend: Arc<dyn ChatBackend> = Arc::new(RuleSwr);
        let client = Arc::new(WorldClient::new(
            backend.clone(),
            backend,
            dojo_world::WorldClientConfig::default(),
        ));
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let (sel, stats) = rt.block_on(score_all(client, &set, &tasks, 3, 2));
        assert_eq!((stats.scored, stats.empty, stats.failed), (2, 1, 1));
        assert!(stats.first_failure.is_some());
        assert_eq!(sel.scores(&t, &[0, 1, 2, 3]), vec![0.0, 1.0, 0.0, -1.0]);
        assert_eq!(expected_resolved(&sel, &t, &[0, 1, 2, 3]), 1.0);
    }
}
