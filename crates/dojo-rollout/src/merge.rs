//! The merge of a sharded run (`dojo rollout merge`): the shard directories of
//! [`crate::shard`] put back into one run directory.
//!
//! The merge reads the shards without writing to them and refuses, naming the shard and the
//! samples, when anything is missing (a shard not finished: resume it), duplicated (two shards
//! hold one sample), in the wrong shard, or when the shards come from different runs (policy,
//! samples, shard count, task file contents). Only then does it write the merged directory:
//! `run.json` without a shard, `trajectories.jsonl` in (task, sample) order, and `summary.json`,
//! `drift.json` and the predictions through the writer one unsharded run uses at its end.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use dojo_trajectory::Trajectory;

use crate::error::RolloutError;
use crate::run_dir::{RunManifest, RunOutputs, load_tasks, write_run_outputs};
use crate::shard::{Shard, task_file_sha256};
use crate::store::{Key, Keyed, Store};
use crate::summary::Summary;

/// What [`merge`] put together.
#[derive(Debug, Clone, PartialEq)]
pub struct MergeReport {
    pub shards: usize,
    pub tasks: usize,
    pub trajectories: usize,
    pub summary: Summary,
    pub predictions: Vec<PathBuf>,
}

impl MergeReport {
    /// The progress line of a merge into `out` (stderr).
    pub fn progress_line(&self, out: &Path) -> String {
        format!(
            "merged {} shards: {} tasks, {} trajectories → {}",
            self.shards,
            self.tasks,
            self.trajectories,
            out.display()
        )
    }

    /// What `dojo rollout --merge` prints on stdout: the merged run's table and predictions.
    pub fn report(&self) -> String {
        let mut lines = vec![crate::summary::render_table(std::slice::from_ref(
            &self.summary,
        ))];
        lines.extend(crate::run_dir::prediction_lines(&self.predictions));
        lines.join("\n")
    }
}

fn err(what: impl Into<String>) -> RolloutError {
    RolloutError::Merge(what.into())
}

fn read_manifest(dir: &Path) -> Result<RunManifest, RolloutError> {
    if !dir.join("run.json").is_file() {
        return Err(err(format!(
            "{}: no run.json (is this a `dojo rollout --shard` directory?)",
            dir.display()
        )));
    }
    crate::run_dir::read_manifest(dir)
}

fn list(keys: &[String]) -> String {
    let mut s = keys.iter().take(8).cloned().collect::<Vec<_>>().join(", ");
    if keys.len() > 8 {
        s.push_str(&format!(", … ({} in all)", keys.len()));
    }
    s
}

/// Merge the shard directories `dirs` into `out` (which must not hold a run yet). `tasks`
/// overrides the task file recorded in the shards' `run.json` (shards that ran on other
/// machines record their own paths); its contents must hash the same as the shards' file.
pub fn merge(
    dirs: &[PathBuf],
    tasks: Option<&Path>,
    out: &Path,
) -> Result<MergeReport, RolloutError> {
    if dirs.is_empty() {
        return Err(err("no shard directories given"));
    }
    let mut manifests = Vec::new();
    for d in dirs {
        manifests.push((d.as_path(), read_manifest(d)?));
    }
    let (by_index, count) = shards(&manifests)?;
    let first = &manifests[0].1;
    let tasks_file = tasks.map_or_else(|| PathBuf::from(&first.tasks_file), Path::to_path_buf);
    let task_ids = task_ids(first, &tasks_file)?;
    let records = read_shards(&by_index, count)?;
    check_complete(&records, &task_ids, first.samples, count, &tasks_file)?;
    let (summary, trajectories, predictions) = write_merged(out, &manifests, &tasks_file, records)?;
    Ok(MergeReport {
        shards: by_index.len(),
        tasks: task_ids.len(),
        trajectories,
        summary,
        predictions,
    })
}

/// The shards by index and the split's count: every directory a shard of one run (same policy,
/// samples and task file, same count), no index twice, none missing.
fn shards<'a>(
    manifests: &[(&'a Path, RunManifest)],
) -> Result<(BTreeMap<u32, &'a Path>, u32), RolloutError> {
    let first = &manifests[0].1;
    let mut by_index: BTreeMap<u32, &Path> = BTreeMap::new();
    let mut count = None;
    for (d, m) in manifests {
        let shard: Shard = m
            .shard
            .as_deref()
            .ok_or_else(|| {
                err(format!(
                    "{}: not a shard (run.json has no `shard`)",
                    d.display()
                ))
            })?
            .parse()
            .map_err(|e: String| err(format!("{}/run.json: {e}", d.display())))?;
        if *count.get_or_insert(shard.count) != shard.count {
            return Err(err(format!(
                "{}: shard {shard} of a {}-way split, the others are {}-way",
                d.display(),
                shard.count,
                count.unwrap_or(0)
            )));
        }
        for (field, same) in [
            ("policy", m.policy == first.policy),
            ("samples", m.samples == first.samples),
            ("tasks_sha256", m.tasks_sha256 == first.tasks_sha256),
        ] {
            if !same {
                return Err(err(format!(
                    "{} and {} come from different runs: `{field}` differs in run.json",
                    manifests[0].0.display(),
                    d.display()
                )));
            }
        }
        if let Some(prev) = by_index.insert(shard.index, d) {
            return Err(err(format!(
                "shard {shard} given twice: {} and {}",
                prev.display(),
                d.display()
            )));
        }
    }
    let count = count.unwrap_or(1);
    let missing: Vec<String> = (1..=count)
        .filter(|i| !by_index.contains_key(i))
        .map(|i| format!("{i}/{count}"))
        .collect();
    if !missing.is_empty() {
        return Err(err(format!("missing shards: {}", missing.join(", "))));
    }
    Ok((by_index, count))
}

/// The task ids of `tasks_file`, which must be the file the shards ran (same SHA-256).
fn task_ids(first: &RunManifest, tasks_file: &Path) -> Result<Vec<String>, RolloutError> {
    let sha = task_file_sha256(tasks_file)?;
    if first.tasks_sha256.as_deref().is_some_and(|s| s != sha) {
        return Err(err(format!(
            "{}: not the task file the shards ran (its SHA-256 differs from run.json's)",
            tasks_file.display()
        )));
    }
    Ok(load_tasks(tasks_file, &[])?
        .into_iter()
        .map(|t| t.instance_id)
        .collect())
}

/// Every shard's trajectories by key: a shard with an unreadable line, a sample of another
/// shard or a sample twice is refused.
fn read_shards(
    by_index: &BTreeMap<u32, &Path>,
    count: u32,
) -> Result<BTreeMap<Key, Trajectory>, RolloutError> {
    let mut records: BTreeMap<Key, Trajectory> = BTreeMap::new();
    for (index, dir) in by_index {
        let path = dir.join("trajectories.jsonl");
        let rep = dojo_trajectory::read_jsonl(&path).map_err(RolloutError::MergeRead)?;
        if let Some(p) = rep.problems.first() {
            return Err(err(format!(
                "shard {index}/{count}: {p} ({} problem(s); resume that shard with the same command, then merge)",
                rep.problems.len()
            )));
        }
        let mut wrong = Vec::new();
        let mut dup = Vec::new();
        for t in rep.trajectories {
            let k = t.key();
            if Shard::of(&k.task_id, count) != *index {
                wrong.push(k.to_string());
                continue;
            }
            match records.entry(k) {
                std::collections::btree_map::Entry::Occupied(e) => dup.push(e.key().to_string()),
                std::collections::btree_map::Entry::Vacant(e) => {
                    e.insert(t);
                }
            }
        }
        if !wrong.is_empty() {
            return Err(err(format!(
                "shard {index}/{count} ({}) holds samples of another shard: {}",
                dir.display(),
                list(&wrong)
            )));
        }
        if !dup.is_empty() {
            return Err(err(format!(
                "shard {index}/{count} ({}) holds duplicate samples: {}",
                dir.display(),
                list(&dup)
            )));
        }
    }
    Ok(records)
}

/// Every sample of the plan exactly once: the samples lacking are named by shard, and a sample
/// of a task not in `tasks_file` is refused.
fn check_complete(
    records: &BTreeMap<Key, Trajectory>,
    task_ids: &[String],
    samples: u32,
    count: u32,
    tasks_file: &Path,
) -> Result<(), RolloutError> {
    let mut lacking: BTreeMap<u32, Vec<String>> = BTreeMap::new();
    for id in task_ids {
        for s in 0..samples {
            let k = Key {
                task_id: id.clone(),
                sample_index: s,
            };
            if !records.contains_key(&k) {
                lacking
                    .entry(Shard::of(id, count))
                    .or_default()
                    .push(k.to_string());
            }
        }
    }
    if !lacking.is_empty() {
        let parts: Vec<String> = lacking
            .iter()
            .map(|(i, ks)| {
                format!(
                    "shard {i}/{count} lacks {} sample(s): {}",
                    ks.len(),
                    list(ks)
                )
            })
            .collect();
        return Err(err(format!(
            "{}; resume those shards with the same command, then merge",
            parts.join("; ")
        )));
    }
    let known: BTreeSet<&str> = task_ids.iter().map(String::as_str).collect();
    if let Some(k) = records.keys().find(|k| !known.contains(k.task_id.as_str())) {
        return Err(err(format!(
            "sample {k} is of a task not in {}",
            tasks_file.display()
        )));
    }
    Ok(())
}

/// Write the merged run into `out` as one unsharded run would have: `run.json` without a shard,
/// the trajectories in (task, sample) order, then the run's outputs under the policy label the
/// shards printed. Returns the summary, the number of trajectories and the predictions files.
fn write_merged(
    out: &Path,
    manifests: &[(&Path, RunManifest)],
    tasks_file: &Path,
    records: BTreeMap<Key, Trajectory>,
) -> Result<(Summary, usize, Vec<PathBuf>), RolloutError> {
    let first = &manifests[0].1;
    if out.join("run.json").exists() || out.join("trajectories.jsonl").exists() {
        return Err(err(format!(
            "{}: already holds a run; merge into a new directory",
            out.display()
        )));
    }
    std::fs::create_dir_all(out).map_err(|e| RolloutError::Io {
        path: out.to_path_buf(),
        source: e.into(),
    })?;
    let manifest = RunManifest {
        shard: None,
        tasks_file: tasks_file.display().to_string(),
        ..first.clone()
    };
    crate::run_dir::manifest(out).write(&manifest)?;
    let store = Store::<Trajectory>::open(&out.join("trajectories.jsonl"))?;
    for t in records.values() {
        store.append(t)?;
    }
    // The policy's label as the shards printed it (every finished shard wrote a summary).
    let sp = manifests[0].0.join("summary.json");
    let label = std::fs::read_to_string(&sp)
        .ok()
        .and_then(|t| serde_json::from_str::<Summary>(&t).ok())
        .map(|s| s.policy)
        .ok_or_else(|| {
            err(format!(
                "{}: missing or unreadable; finish that shard first",
                sp.display()
            ))
        })?;
    let plan: Vec<Trajectory> = records.into_values().collect();
    let RunOutputs {
        summary,
        outcomes,
        predictions,
        ..
    } = write_run_outputs(out, &label, &plan, first.samples, true)?;
    Ok((summary, outcomes.len(), predictions))
}
