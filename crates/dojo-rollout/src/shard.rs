//! Sharded rollouts: one task set split across machines (`dojo rollout --shard I/N`); putting
//! the shards back together is [`crate::merge`]'s.
//!
//! A task belongs to shard `1 + (h mod N)`, where `h` is the first 8 bytes of the SHA-256 of its
//! instance id. That split is deterministic on every machine and Rust release, does not depend
//! on the order of the task file, and a task keeps its shard when others are added or removed.
//! Each shard is an ordinary run directory (resumable on its own machine after `kill -9`, as
//! any run); its `run.json` records the shard, so resuming it with another `--shard` is refused.

use std::path::Path;
use std::str::FromStr;

use crate::error::RolloutError;

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

/// SHA-256 of a task file's bytes: shards that ran on other machines name it by other paths.
pub fn task_file_sha256(path: &Path) -> Result<String, RolloutError> {
    dojo_cache::sha256_file(path).map_err(|e| RolloutError::Io {
        path: path.to_path_buf(),
        source: e.into(),
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
