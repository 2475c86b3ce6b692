//! What a curation run did ([`CurationSummary`]): the pipeline fills it stage by stage; the CLI
//! prints it, and `manifest.json` and `report.html` are made from it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::Serialize;

use crate::filters::{DifficultyStats, StageReport};
use crate::input::Problem;
use crate::view::Origin;
use crate::world::WorldStats;

/// What a curation run did: how much it read, what each stage kept and dropped, every problem
/// met, what it wrote and how long each phase took. The CLI prints it, `manifest.json` and
/// `report.html` are made from it.
#[derive(Debug, Default, Serialize)]
pub struct CurationSummary {
    pub files_read: usize,
    pub bytes_read: u64,
    pub lines: usize,
    pub trajectories: usize,
    pub stages: Vec<StageReport>,
    pub difficulty: Option<DifficultyStats>,
    pub problems: Vec<String>,
    /// Problem kind → count.
    pub problem_counts: BTreeMap<String, usize>,
    pub kept_trajectories: usize,
    pub samples: usize,
    pub trained_tokens: usize,
    pub sample_tokens: Vec<usize>,
    pub kept_turns: Vec<usize>,
    /// Where each kept trajectory came from, for the report's links to their pages.
    #[serde(skip)]
    pub kept_records: Vec<KeptRecord>,
    pub written: Vec<PathBuf>,
    pub seconds: BTreeMap<String, f64>,
    /// How the messages exports wrote tool calls: `native` or `inline`.
    pub messages_style: &'static str,
    /// With `--world`: what the prompt caps cut.
    pub world: Option<WorldStats>,
}

/// Problems `dojo curate` lists on stderr; the rest are counted, and all are in the manifest.
const LISTED_PROBLEMS: usize = 50;

impl CurationSummary {
    /// The warnings `dojo curate` prints on stderr: the first problems met, then how many more
    /// `manifest` lists.
    pub fn warnings(&self, manifest: &Path) -> Vec<String> {
        let mut w: Vec<String> = self
            .problems
            .iter()
            .take(LISTED_PROBLEMS)
            .map(|p| format!("warning: {p}"))
            .collect();
        if self.problems.len() > LISTED_PROBLEMS {
            w.push(format!(
                "warning: ... {} more problems in {}",
                self.problems.len() - LISTED_PROBLEMS,
                manifest.display()
            ));
        }
        w
    }
}

/// A kept trajectory, for the report's per-task links.
#[derive(Debug, Clone)]
pub struct KeptRecord {
    pub task_id: String,
    pub resolved: bool,
    pub origin: Origin,
}

impl CurationSummary {
    /// Counts a problem by kind and keeps its text for the report and the manifest.
    pub(crate) fn record_problem(&mut self, p: Problem) {
        *self.problem_counts.entry(p.kind.clone()).or_default() += 1;
        self.problems.push(p.to_string());
    }

    /// Records how long `phase` took, from `since` until now.
    pub(crate) fn time(&mut self, phase: &str, since: Instant) {
        self.seconds
            .insert(phase.into(), since.elapsed().as_secs_f64());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warnings_list_fifty_problems() {
        let s = CurationSummary {
            problems: (0..52).map(|i| format!("p{i}")).collect(),
            ..Default::default()
        };
        let w = s.warnings(Path::new("/out/manifest.json"));
        assert_eq!(w.len(), 51);
        assert_eq!(w[0], "warning: p0");
        assert_eq!(w[50], "warning: ... 2 more problems in /out/manifest.json");
    }
}
