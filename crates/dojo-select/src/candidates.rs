//! The candidates of each task, read from `dojo rollout` run directories or from SWE-bench
//! predictions files (one file per sample, graded through dojo-grade's `dojo eval` path).
//!
//! A candidate is one rollout's final patch with its grade. Infrastructure failures say nothing
//! about the agent, so they are left out (and counted); an empty patch is a real answer of the
//! agent and stays in, as a candidate that loses. Several run directories can be pooled (for
//! example two policies, or two runs of one), but only over the same task file: candidates of
//! different task sets are refused rather than silently mixed.
//!
//! A run directory is complete when its `summary.json` is at least as new as its
//! `trajectories.jsonl` (`dojo rollout` writes the summary last). Selecting on a run that is
//! still being written, or was interrupted, needs `allow_partial`, and the output says so.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use dojo_trajectory::Trajectory;

use crate::SelectError;
use crate::patch::normalized_key;

/// One candidate answer for a task.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    /// Index of the run directory it came from (in the order given).
    pub run: usize,
    pub sample_index: u32,
    /// The final workspace diff (empty when the agent changed nothing).
    pub patch: String,
    /// Graded as resolved. `false` for ungraded candidates too (see `graded`).
    pub resolved: bool,
    pub graded: bool,
    /// Agent steps taken.
    pub steps: usize,
    pub stop_reason: String,
    /// [`normalized_key`] of the patch: equal keys are the same fix.
    pub key: String,
    /// The whole record: the conversation for selectors that read it (the verifier), and the
    /// report's page of this candidate.
    pub record: Arc<Trajectory>,
}

impl Candidate {
    /// `run/sample`, how reports and `selection.json` name a candidate.
    pub fn label(&self) -> String {
        format!("r{}s{}", self.run, self.sample_index)
    }

    /// Its page in a selection's output directory (see [`dojo_report::trajectory`]).
    pub fn page(&self) -> String {
        format!(
            "trajectories/r{}/{}",
            self.run,
            dojo_report::trajectory::page_name(&self.record.task_id, self.sample_index)
        )
    }

    pub fn is_empty(&self) -> bool {
        self.patch.trim().is_empty()
    }
}

/// Every candidate of one task.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskCandidates {
    pub task_id: String,
    pub candidates: Vec<Candidate>,
}

impl TaskCandidates {
    pub fn resolved(&self) -> usize {
        self.candidates.iter().filter(|c| c.resolved).count()
    }
}

/// The candidates of a set of tasks, with what was left out.
#[derive(Debug, Clone, Default)]
pub struct CandidateSet {
    /// Sorted by task id; candidates in (run, sample) order.
    pub tasks: Vec<TaskCandidates>,
    pub sources: Vec<PathBuf>,
    /// Rollouts left out as infrastructure failures.
    pub infra_left_out: usize,
    /// Candidates without a grade (kept; they count as unresolved in every curve).
    pub ungraded: usize,
    /// Unreadable lines, named by file and line.
    pub problems: Vec<String>,
    /// Some run directory was still being written or interrupted.
    pub partial: bool,
}

impl CandidateSet {
    pub fn candidates(&self) -> usize {
        self.tasks.iter().map(|t| t.candidates.len()).sum()
    }

    /// The fewest candidates any task has (0 without tasks).
    pub fn min_k(&self) -> usize {
        self.tasks
            .iter()
            .map(|t| t.candidates.len())
            .min()
            .unwrap_or(0)
    }

    pub fn max_k(&self) -> usize {
        self.tasks
            .iter()
            .map(|t| t.candidates.len())
            .max()
            .unwrap_or(0)
    }
}

#[derive(Debug, Clone, Copy, Default)]
pub struct LoadOptions {
    /// Select on run directories that are still being written or were interrupted.
    pub allow_partial: bool,
}

/// Reads the candidates of every run directory in `dirs`.
pub fn load_runs(dirs: &[PathBuf], opts: LoadOptions) -> Result<CandidateSet, SelectError> {
    if dirs.is_empty() {
        return Err(SelectError::Empty("no run directory given".into()));
    }
    let mut set = CandidateSet {
        sources: dirs.to_vec(),
        ..CandidateSet::default()
    };
    let mut tasks_file: Option<(String, &Path)> = None;
    let mut by_task: BTreeMap<String, Vec<Candidate>> = BTreeMap::new();
    for (run, dir) in dirs.iter().enumerate() {
        let manifest_tasks = tasks_file_of(dir)?;
        match &tasks_file {
            None => tasks_file = Some((manifest_tasks.clone(), dir)),
            Some((first, first_dir)) if *first != manifest_tasks => {
                return Err(SelectError::Input {
                    path: dir.join("run.json"),
                    reason: format!(
                        "a run over tasks file {}, but {} is a run over {first}: \
                         candidates of different task sets are not pooled",
                        manifest_tasks,
                        first_dir.display()
                    ),
                });
            }
            Some(_) => {}
        }
        let store = dir.join("trajectories.jsonl");
        if !is_complete(dir, &store) {
            if !opts.allow_partial {
                return Err(SelectError::Input {
                    path: dir.to_path_buf(),
                    reason: "the run is still being written or was interrupted (summary.json is \
                             missing or older than trajectories.jsonl); finish or resume it, or \
                             pass --partial to select on what is there"
                        .into(),
                });
            }
            set.partial = true;
        }
        let report = dojo_trajectory::read_jsonl(&store).map_err(|e| SelectError::Io {
            path: store.clone(),
            source: e.into(),
        })?;
        for p in &report.problems {
            set.problems.push(format!("{}: {p}", store.display()));
        }
        for t in report.trajectories {
            if t.is_infrastructure_failure() {
                set.infra_left_out += 1;
                continue;
            }
            if !t.is_graded() {
                set.ungraded += 1;
            }
            let patch = t.patch.clone().unwrap_or_default();
            let t = Arc::new(t);
            by_task
                .entry(t.task_id.clone())
                .or_default()
                .push(Candidate {
                    run,
                    sample_index: t.sample_index,
                    key: normalized_key(&patch),
                    resolved: t.is_resolved(),
                    graded: t.is_graded(),
                    steps: t.steps.len(),
                    stop_reason: t.stop_reason.as_str().to_string(),
                    patch,
                    record: t.clone(),
                });
        }
    }
    set.tasks = by_task
        .into_iter()
        .map(|(task_id, mut candidates)| {
            candidates.sort_by_key(|c| (c.run, c.sample_index));
            TaskCandidates {
                task_id,
                candidates,
            }
        })
        .collect();
    if set.tasks.is_empty() {
        return Err(SelectError::Empty(format!(
            "{} run director{} hold no candidate ({} infrastructure failures left out)",
            dirs.len(),
            if dirs.len() == 1 { "y" } else { "ies" },
            set.infra_left_out
        )));
    }
    Ok(set)
}

/// Candidates from SWE-bench predictions files, one file per sample: file `i` gives each task's
/// sample `i` (label `r0s<i>`). Each file is graded by dojo-grade's batch grader
/// ([`dojo_grade::batch::eval_jobs`], the path of `dojo eval`) into `graded_dir/p<i>/`, which
/// makes it resumable: an instance graded before is not graded again. Grading infrastructure
/// failures are left out and counted like a rollout's; predictions of instances the task file
/// does not have are named in `problems`.
pub async fn load_predictions(
    files: &[PathBuf],
    tasks: &[dojo_task::Task],
    registry: &dojo_task::EnvRegistry,
    preparer: &dojo_task::Preparer,
    opts: &dojo_grade::batch::BatchOptions,
    graded_dir: &Path,
) -> Result<CandidateSet, SelectError> {
    if files.is_empty() {
        return Err(SelectError::Empty("no predictions file given".into()));
    }
    let mut set = CandidateSet {
        sources: files.to_vec(),
        ..CandidateSet::default()
    };
    let mut by_task: BTreeMap<String, Vec<Candidate>> = BTreeMap::new();
    for (i, file) in files.iter().enumerate() {
        let (preds, malformed) =
            dojo_grade::read_predictions(file).map_err(|e| SelectError::Io {
                path: file.clone(),
                source: e.into(),
            })?;
        for m in &malformed {
            set.problems
                .push(format!("{}: line {}: {}", file.display(), m.line, m.reason));
        }
        let jobs = prediction_jobs(file, preds, tasks, registry, &mut set.problems);
        let patches: BTreeMap<String, (Option<String>, String)> = jobs
            .iter()
            .map(|j| {
                (
                    j.prediction.instance_id.clone(),
                    (
                        j.prediction.model_patch.clone(),
                        j.prediction.model_name_or_path.clone(),
                    ),
                )
            })
            .collect();
        let out = graded_dir.join(format!("p{i}"));
        std::fs::create_dir_all(&out).map_err(|e| SelectError::Io {
            path: out.clone(),
            source: e.into(),
        })?;
        let reports = dojo_grade::batch::eval_jobs(jobs, &out, preparer, opts).await;
        for r in reports {
            if r.infra_failure {
                set.infra_left_out += 1;
                continue;
            }
            let (patch, model) = patches.get(&r.instance_id).cloned().unwrap_or_default();
            by_task
                .entry(r.instance_id.clone())
                .or_default()
                .push(prediction_candidate(file, i as u32, &r, patch, model));
        }
    }
    set.tasks = by_task
        .into_iter()
        .map(|(task_id, mut candidates)| {
            candidates.sort_by_key(|c| c.sample_index);
            TaskCandidates {
                task_id,
                candidates,
            }
        })
        .collect();
    if set.tasks.is_empty() {
        return Err(SelectError::Empty(format!(
            "{} predictions file(s) hold no gradable candidate of the task file ({} \
             infrastructure failures left out, {} problems)",
            files.len(),
            set.infra_left_out,
            set.problems.len()
        )));
    }
    Ok(set)
}

/// The grading jobs of one predictions file: each prediction with its task and environment;
/// a prediction of an instance the task file does not have goes to `problems`.
fn prediction_jobs(
    file: &Path,
    preds: Vec<dojo_grade::Prediction>,
    tasks: &[dojo_task::Task],
    registry: &dojo_task::EnvRegistry,
    problems: &mut Vec<String>,
) -> Vec<dojo_grade::batch::EvalJob> {
    let mut jobs = Vec::new();
    for p in preds {
        match tasks.iter().find(|t| t.instance_id == p.instance_id) {
            Some(t) => jobs.push(dojo_grade::batch::EvalJob {
                task: t.clone(),
                env: registry.resolve(t).map_err(std::sync::Arc::new),
                prediction: p,
            }),
            None => problems.push(format!(
                "{}: line {}: instance {} is not in the task file",
                file.display(),
                p.line,
                p.instance_id
            )),
        }
    }
    jobs
}

/// A graded prediction as a candidate: sample `sample` of its task, with a trajectory record
/// that says where it came from (`predictions` policy, the file) and how it was graded.
fn prediction_candidate(
    file: &Path,
    sample: u32,
    r: &dojo_grade::InstanceReport,
    patch: Option<String>,
    model: String,
) -> Candidate {
    let mut t = Trajectory::new(r.instance_id.clone(), sample);
    t.stop_reason = dojo_trajectory::StopReason::Submitted;
    t.policy.kind = "predictions".into();
    t.policy.model = Some(model);
    t.patch = patch.clone();
    t.grading = Some(r.to_json());
    t.set_grade(r.resolved);
    t.metadata.insert(
        "predictions_file".into(),
        serde_json::Value::String(file.display().to_string()),
    );
    let patch = patch.unwrap_or_default();
    Candidate {
        run: 0,
        sample_index: sample,
        key: normalized_key(&patch),
        resolved: r.resolved,
        graded: true,
        steps: 0,
        stop_reason: "submitted".into(),
        patch,
        record: Arc::new(t),
    }
}

/// The task file a `dojo rollout` run directory was run over, as its `run.json` names it
/// (read by the rollout stage's own reader).
pub fn tasks_file_of(dir: &Path) -> Result<String, SelectError> {
    use dojo_rollout::error::RolloutError;
    dojo_rollout::run_dir::read_manifest(dir)
        .map(|m| m.tasks_file)
        .map_err(|e| match e {
            e @ RolloutError::Io { .. } => SelectError::Run(Box::new(e)),
            e => SelectError::NotARun {
                path: dir.join("run.json"),
                source: Box::new(e),
            },
        })
}

fn is_complete(dir: &Path, store: &Path) -> bool {
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    match (modified(&dir.join("summary.json")), modified(store)) {
        (Some(summary), Some(store)) => summary >= store,
        _ => false,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A candidate with a patch touching `line`, for selector tests.
    pub fn cand(sample: u32, patch: &str, resolved: bool) -> Candidate {
        Candidate {
            run: 0,
            sample_index: sample,
            patch: patch.to_string(),
            resolved,
            graded: true,
            steps: 3,
            stop_reason: "submitted".into(),
            key: normalized_key(patch),
            record: Arc::new(Trajectory::new("t", sample)),
        }
    }

    #[test]
    fn labels_name_run_and_sample() {
        assert_eq!(cand(3, "", false).label(), "r0s3");
        assert!(cand(0, "  \n", false).is_empty());
    }
}
