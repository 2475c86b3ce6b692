//! Sharded rollouts: one task set split across machines (`dojo rollout --shard I/N`), and the
//! merge that puts the shards back into one run directory (`dojo rollout merge`).
//!
//! A task belongs to shard `1 + (h mod N)`, where `h` is the first 8 bytes of the SHA-256 of its
//! instance id. That split is deterministic on every machine and Rust release, does not depend
//! on the order of the task file, and a task keeps its shard when others are added or removed.
//! Each shard is an ordinary run directory (resumable on its own machine after `kill -9`, as
//! any run); its `run.json` records the shard, so resuming it with another `--shard` is refused.
//!
//! The merge reads the shards without writing to them and refuses, naming the shard and the
//! samples, when anything is missing (a shard not finished: resume it), duplicated (two shards
//! hold one sample), in the wrong shard, or when the shards come from different runs (policy,
//! samples, shard count, task file contents). Only then does it write the merged directory:
//! `run.json` without a shard, `trajectories.jsonl` in (task, sample) order, and `summary.json`,
//! `drift.json` and the predictions through the writer one unsharded run uses at its end.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::str::FromStr;

use dojo_trajectory::Trajectory;

use crate::run_dir::{RolloutError, RunManifest, load_tasks};
use crate::run_dir::{RunOutputs, write_run_outputs};
use crate::store::{Key, Keyed, Store};
use crate::summary::Summary;

/// Shard `index` (1-based) of `count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    pub index: u32,
    pub count: u32,
}

impl FromStr for Shard {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || format!("--shard {s:?}: expected I/N with 1 ≤ I ≤ N (e.g. 2/8)");
        let (i, n) = s.split_once('/').ok_or_else(bad)?;
        let index: u32 = i.trim().parse().map_err(|_| bad())?;
        let count: u32 = n.trim().parse().map_err(|_| bad())?;
        if count == 0 || index == 0 || index > count {
            return Err(bad());
        }
        Ok(Shard { index, count })
    }
}

impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

impl Shard {
    /// The shard (1-based) `instance_id` belongs to when the set is split `count` ways.
    pub fn of(instance_id: &str, count: u32) -> u32 {
        let hex = dojo_cache::sha256_hex(instance_id);
        let h = u64::from_str_radix(&hex[..16], 16).unwrap_or(0);
        1 + (h % u64::from(count.max(1))) as u32
    }

    /// Whether this shard runs `instance_id`.
    pub fn owns(&self, instance_id: &str) -> bool {
        Shard::of(instance_id, self.count) == self.index
    }
}

/// What [`merge`] put together.
#[derive(Debug, Clone, PartialEq)]
pub struct MergeReport {
    pub shards: usize,
    pub tasks: usize,
    pub trajectories: usize,
    pub summary: Summary,
    pub predictions: Vec<PathBuf>,
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
        manifests.push((d, read_manifest(d)?));
    }
    let first = &manifests[0].1;
    let mut by_index: BTreeMap<u32, &Path> = BTreeMap::new();
    let mut count = None;
    for (d, m) in &manifests {
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
    let tasks_file = tasks.map_or_else(|| PathBuf::from(&first.tasks_file), Path::to_path_buf);
    let sha = task_file_sha256(&tasks_file)?;
    if first.tasks_sha256.as_deref().is_some_and(|s| s != sha) {
        return Err(err(format!(
            "{}: not the task file the shards ran (its SHA-256 differs from run.json's)",
            tasks_file.display()
        )));
    }
    let task_ids: Vec<String> = load_tasks(&tasks_file, &[])?
        .into_iter()
        .map(|t| t.instance_id)
        .collect();

    // Every sample of the plan exactly once, each in its own shard.
    let mut records: BTreeMap<Key, Trajectory> = BTreeMap::new();
    for (index, dir) in &by_index {
        let path = dir.join("trajectories.jsonl");
        let rep = dojo_trajectory::read_jsonl(&path).map_err(|e| err(e.to_string()))?;
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
    let mut lacking: BTreeMap<u32, Vec<String>> = BTreeMap::new();
    for id in &task_ids {
        for s in 0..first.samples {
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

    // Write the merged run as one unsharded run would have.
    if out.join("run.json").exists() || out.join("trajectories.jsonl").exists() {
        return Err(err(format!(
            "{}: already holds a run; merge into a new directory",
            out.display()
        )));
    }
    std::fs::create_dir_all(out).map_err(|e| RolloutError::Io {
        path: out.to_path_buf(),
        reason: e.to_string(),
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
    Ok(MergeReport {
        shards: by_index.len(),
        tasks: task_ids.len(),
        trajectories: outcomes.len(),
        summary,
        predictions,
    })
}

/// SHA-256 of a task file's bytes: shards that ran on other machines name it by other paths.
pub fn task_file_sha256(path: &Path) -> Result<String, RolloutError> {
    dojo_cache::sha256_file(path).map_err(|e| RolloutError::Io {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_reject() {
        assert_eq!("2/8".parse::<Shard>(), Ok(Shard { index: 2, count: 8 }));
        for bad in ["0/4", "5/4", "1/0", "1", "a/b", "1/2/3", ""] {
            let e = bad.parse::<Shard>().unwrap_err();
            assert!(e.contains("--shard"), "{bad}: {e}");
        }
    }

    /// Every task lands in exactly one shard for several N, and the split does not depend on
    /// which other tasks exist.
    #[test]
    fn every_task_in_exactly_one_shard() {
        let ids: Vec<String> = (0..500).map(|i| format!("proj__repo-{i}")).collect();
        for n in [1u32, 2, 3, 7, 16] {
            let mut sizes = vec![0usize; n as usize];
            for id in &ids {
                let owners: Vec<u32> = (1..=n)
                    .filter(|&i| Shard { index: i, count: n }.owns(id))
                    .collect();
                assert_eq!(owners.len(), 1, "{id} in {owners:?} of {n}");
                sizes[(owners[0] - 1) as usize] += 1;
            }
            assert_eq!(sizes.iter().sum::<usize>(), ids.len());
            // Not degenerate: with 500 tasks every shard of up to 16 gets some.
            assert!(sizes.iter().all(|&s| s > 0), "{n}: {sizes:?}");
        }
        // Pinned values: the split must not change across releases (shards of one run may be
        // produced by different dojo builds).
        let pinned: Vec<u32> = ["a", "b", "c", "d"]
            .iter()
            .map(|id| Shard::of(id, 4))
            .collect();
        insta::assert_debug_snapshot!(pinned);
    }
}
