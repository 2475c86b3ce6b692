//! World-model training data (`dojo curate --world swt|swr`): SFT samples for SWE-World's
//! transition model (SWT) and reward model (SWR) from the `world.jsonl` records `dojo rollout`
//! captures beside its trajectories.
//!
//! Each record becomes one conversation in SWE-World's prompt layout, rendered by
//! [`dojo_world::swt_messages`] / [`dojo_world::swr_messages`] (the same functions the simulated
//! environment asks its models with, so a model is trained on exactly what it is later sent),
//! answered by the real result as JSON: `{"stdout","stderr","exit_code"}` for SWT,
//! `{"test_report","reward"}` for SWR. Only the answer carries loss. The samples then go through
//! the same token budget and exporters as agent data (messages Parquet/JSONL, token-exact
//! Parquet), so `dojo train sft` and external trainers take them as they are.
//!
//! Before rendering, the `world` stage drops, and counts: records of the other kind, SWT records
//! whose real output is incomplete (cut or timed out: not the whole truth), SWT commands that
//! execute neither a file nor inline code (SWE-World skips them), records already seen (same
//! content hash, e.g. in two run directories) and SWT records beyond the per-rollout cap
//! (SWE-World: 6; the first commands of a rollout are kept). Sections cut to their caps while
//! rendering are counted per section in [`WorldStats`].

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};

use dojo_rundir::clip::{Keep, Unit, clip};
use dojo_world::record::{WORLD_FILE, WORLD_SCHEMA_VERSION, WorldBody, WorldRecord};
use dojo_world::{Caps, Rendered, swr_messages, swt_messages};
use serde::Serialize;
use serde_json::{Value, json};

use crate::error::CurateError;
use crate::filters::{Cand, StageReport};
use crate::input::Problem;
use crate::view::{Origin, StopKind, Traj};

/// Where the simulated environment caches initial analyses (`$DOJO_HOME/world-analysis`).
pub use dojo_world::analysis::default_cache_root as default_analysis_root;

/// Which world model the samples train.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WorldKind {
    Swt,
    Swr,
}

impl std::str::FromStr for WorldKind {
    type Err = CurateError;
    fn from_str(s: &str) -> Result<Self, CurateError> {
        match s {
            "swt" => Ok(WorldKind::Swt),
            "swr" => Ok(WorldKind::Swr),
            other => Err(CurateError::UnknownWorld(other.to_string())),
        }
    }
}

impl WorldKind {
    fn as_str(self) -> &'static str {
        match self {
            WorldKind::Swt => "swt",
            WorldKind::Swr => "swr",
        }
    }
}

/// Settings of the world export.
#[derive(Debug, Clone, Serialize)]
pub struct WorldConfig {
    pub kind: WorldKind,
    /// Per-section prompt caps (SWE-World's by default).
    pub caps: Caps,
    /// SWT samples kept per rollout (SWE-World: 6).
    pub max_per_trajectory: usize,
    /// Keep SWT records whose real output was cut or timed out.
    pub keep_incomplete: bool,
    /// Attach the initial analysis cached for each task by this model (see
    /// [`dojo_world::analysis`]) to records captured without one: (cache root, model).
    pub analysis: Option<(PathBuf, String)>,
    /// Leave the gold patch out of every context: data for a reward model that scores
    /// candidates at test time (`dojo select --selector swr`), which is asked without it
    /// ([`dojo_world::WorldTask::at_test_time`]). Off: SWE-World's training contexts, which
    /// show it (the model then rewards RL rollouts, where it is known).
    pub withhold_gold: bool,
}

impl WorldConfig {
    pub fn new(kind: WorldKind) -> WorldConfig {
        WorldConfig {
            kind,
            caps: Caps::default(),
            max_per_trajectory: 6,
            keep_incomplete: false,
            analysis: None,
            withhold_gold: false,
        }
    }
}

/// What rendering cut, for the summary and `manifest.json`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct WorldStats {
    /// Samples with at least one section cut or file dropped.
    pub truncated_samples: usize,
    /// Section → samples in which it was cut.
    pub truncated_sections: BTreeMap<String, usize>,
    /// Executed/test files left out beyond the file cap, over all samples.
    pub dropped_files: usize,
    /// Target field (`test_report`, `stdout`, `stderr`) → samples whose target kept only its
    /// tail ([`Caps::target_output`]).
    pub truncated_targets: BTreeMap<String, usize>,
    /// With an analysis model: samples given a cached initial analysis, and samples whose task
    /// has none cached (they say "No initial analysis provided.").
    pub analysis_attached: usize,
    pub analysis_missing: usize,
}

/// What reading the world records produced.
#[derive(Debug, Default)]
pub struct WorldInput {
    pub records: Vec<(WorldRecord, Origin)>,
    pub problems: Vec<Problem>,
    pub files: Vec<PathBuf>,
    pub bytes: u64,
    pub lines: usize,
}

/// Reads the `world.jsonl` files of the inputs: directories are searched recursively for files
/// named `world.jsonl`; files are read as given. Unusable lines are problems with file and line.
pub fn load(inputs: &[PathBuf]) -> WorldInput {
    let mut input = WorldInput::default();
    for i in inputs {
        if i.is_dir() {
            let mut found = Vec::new();
            walk(i, &mut found);
            found.sort();
            if found.is_empty() {
                input.problems.push(problem(
                    i,
                    0,
                    "io",
                    format!(
                        "directory holds no {WORLD_FILE} (run `dojo rollout` with world records on)"
                    ),
                ));
            }
            input.files.extend(found);
        } else if i.is_file() {
            input.files.push(i.clone());
        } else {
            input
                .problems
                .push(problem(i, 0, "io", "no such file or directory".into()));
        }
    }
    for f in input.files.clone() {
        read_file(&f, &mut input);
    }
    input
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            walk(&p, out);
        } else if p.file_name().is_some_and(|n| n == WORLD_FILE) {
            out.push(p);
        }
    }
}

fn problem(file: &Path, line: usize, kind: &str, reason: String) -> Problem {
    Problem {
        file: file.display().to_string(),
        line,
        kind: kind.into(),
        reason,
    }
}

fn read_file(path: &Path, input: &mut WorldInput) {
    let mut lines = match dojo_rundir::JsonlLines::open(path) {
        Ok(l) => l,
        Err(e) => {
            input.problems.push(problem(path, 0, "io", e.to_string()));
            return;
        }
    };
    for item in lines.by_ref() {
        let line = match item {
            Ok(l) => l,
            Err(e) => {
                input.problems.push(problem(path, 0, "io", e.to_string()));
                break;
            }
        };
        input.lines += 1;
        let n = line.number;
        match serde_json::from_str::<Value>(&line.text) {
            Err(e) if line.torn || e.is_eof() => input.problems.push(problem(
                path,
                n,
                "truncated_last_line",
                format!("torn last line (an interrupted run): {e}"),
            )),
            Err(e) => input
                .problems
                .push(problem(path, n, "invalid_json", e.to_string())),
            Ok(v) => {
                let version = v.get("schema_version").and_then(Value::as_u64);
                if version != Some(u64::from(WORLD_SCHEMA_VERSION)) {
                    input.problems.push(problem(
                        path,
                        n,
                        "unknown_schema_version",
                        format!("world record schema_version {version:?}, this dojo reads {WORLD_SCHEMA_VERSION}"),
                    ));
                    continue;
                }
                match serde_json::from_value::<WorldRecord>(v) {
                    Ok(r) => input.records.push((
                        r,
                        Origin {
                            file: path.display().to_string(),
                            line: n,
                        },
                    )),
                    Err(e) => {
                        input
                            .problems
                            .push(problem(path, n, "invalid_record", e.to_string()))
                    }
                }
            }
        }
    }
    input.bytes += lines.bytes_read();
}

/// Whether an SWT command executes anything SWT can be shown: a file, or inline code.
fn executes_something(context: &dojo_world::SwtContext) -> bool {
    !context.executed_files.is_empty()
        || context.command.contains(" -c ")
        || context.command.contains("<<")
}

/// The `world` stage: the records that become samples, with what was dropped and why.
pub fn select(
    records: Vec<(WorldRecord, Origin)>,
    cfg: &WorldConfig,
) -> (Vec<(WorldRecord, Origin)>, StageReport) {
    let mut rep = StageReport::new("world", records.len());
    let mut seen = HashSet::new();
    let mut per_rollout: HashMap<(String, u32), usize> = HashMap::new();
    let mut kept = Vec::new();
    // Within a rollout, commands in the order they ran (the cap keeps the first ones).
    let mut records = records;
    records.sort_by_key(|(r, o)| {
        let seq = match &r.body {
            WorldBody::Swt { seq, .. } => *seq,
            WorldBody::Swr { .. } => 0,
        };
        (o.file.clone(), r.task_id.clone(), r.sample_index, seq)
    });
    for (r, o) in records {
        if r.kind() != cfg.kind.as_str() {
            rep.drop("other_kind");
            continue;
        }
        if let WorldBody::Swt {
            context,
            incomplete,
            ..
        } = &r.body
        {
            if *incomplete && !cfg.keep_incomplete {
                rep.drop("incomplete_output");
                continue;
            }
            if !executes_something(context) {
                rep.drop("no_executed_code");
                continue;
            }
        }
        if !seen.insert(r.hash.clone()) {
            rep.drop("duplicate");
            continue;
        }
        if cfg.kind == WorldKind::Swt {
            let n = per_rollout
                .entry((r.task_id.clone(), r.sample_index))
                .or_default();
            if *n >= cfg.max_per_trajectory {
                rep.drop("over_per_trajectory_cap");
                continue;
            }
            *n += 1;
        }
        kept.push((r, o));
    }
    rep.kept = kept.len();
    (kept, rep)
}

/// Renders the selected records into candidates (system, user, assistant target), counting the
/// caps' cuts.
pub fn samples(records: Vec<(WorldRecord, Origin)>, cfg: &WorldConfig) -> (Vec<Cand>, WorldStats) {
    let mut stats = WorldStats::default();
    let mut out = Vec::with_capacity(records.len());
    let mut analyses: HashMap<String, Option<String>> = HashMap::new();
    for (mut r, origin) in records {
        if cfg.withhold_gold {
            match &mut r.body {
                WorldBody::Swt { context, .. } => context.gold_patch = None,
                WorldBody::Swr { context, .. } => context.gold_patch = None,
            }
        }
        attach_analysis(&mut r, cfg, &mut analyses, &mut stats);
        let rendered = render_record(&mut r, cfg, &mut stats);
        out.push(candidate(&r, origin, cfg, rendered));
    }
    (out, stats)
}

/// The task's cached initial analysis (looked up once per task) into a record that has none,
/// when the configuration asks for it.
fn attach_analysis(
    r: &mut WorldRecord,
    cfg: &WorldConfig,
    analyses: &mut HashMap<String, Option<String>>,
    stats: &mut WorldStats,
) {
    let Some((root, model)) = &cfg.analysis else {
        return;
    };
    let slot = match &mut r.body {
        WorldBody::Swt { context, .. } => &mut context.analysis,
        WorldBody::Swr { context, .. } => &mut context.analysis,
    };
    if slot.is_some() {
        return;
    }
    let found = analyses
        .entry(r.task_id.clone())
        .or_insert_with(|| dojo_world::analysis::lookup_analysis(root, &r.task_id, model))
        .clone();
    if found.is_some() {
        stats.analysis_attached += 1;
    } else {
        stats.analysis_missing += 1;
    }
    *slot = found;
}

/// A record rendered for training: the prompt, the target as JSON, the reward and the row id.
struct RenderedRecord {
    rendered: Rendered,
    target: String,
    reward: f64,
    row_id: String,
}

/// The record's prompt in SWE-World's layout and its target, with long target outputs cut to
/// their tail (`Caps::target_output`); every cut is counted in `stats`.
fn render_record(r: &mut WorldRecord, cfg: &WorldConfig, stats: &mut WorldStats) -> RenderedRecord {
    // Long outputs of the targets keep their tail, counted per field.
    let mut tail = |field: &str, text: &mut String| {
        if let Some(cap) = cfg.caps.target_output {
            let (kept, cut) = clip(text, cap, Unit::Chars, Keep::Tail);
            if cut {
                *stats
                    .truncated_targets
                    .entry(field.to_string())
                    .or_default() += 1;
                *text = kept;
            }
        }
    };
    let out = match &mut r.body {
        WorldBody::Swt {
            seq,
            context,
            target,
            ..
        } => {
            tail("stdout", &mut target.stdout);
            tail("stderr", &mut target.stderr);
            RenderedRecord {
                rendered: swt_messages(context, &cfg.caps),
                target: target.to_json(),
                reward: 0.0,
                row_id: format!("{}#{}/swt{seq}", r.task_id, r.sample_index),
            }
        }
        WorldBody::Swr { context, target } => {
            tail("test_report", &mut target.test_report);
            RenderedRecord {
                rendered: swr_messages(context, &cfg.caps),
                target: target.to_json(),
                reward: f64::from(target.reward),
                row_id: format!("{}#{}/swr", r.task_id, r.sample_index),
            }
        }
    };
    if out.rendered.is_truncated() {
        stats.truncated_samples += 1;
    }
    for t in &out.rendered.truncations {
        *stats
            .truncated_sections
            .entry(t.section.clone())
            .or_default() += 1;
    }
    stats.dropped_files += out.rendered.dropped_files;
    out
}

/// The candidate curation's filters and exports take: the rendered messages with the target as
/// the assistant's answer, graded by the record's reward.
fn candidate(r: &WorldRecord, origin: Origin, cfg: &WorldConfig, rec: RenderedRecord) -> Cand {
    let mut messages: Vec<Value> = rec
        .rendered
        .messages
        .iter()
        .map(|m| json!({"role": role_name(m), "content": m.text()}))
        .collect();
    messages.push(json!({"role": "assistant", "content": rec.target}));
    Cand {
        n_tokens: None,
        traj: Traj {
            origin,
            schema_version: u64::from(r.schema_version),
            task_id: r.task_id.clone(),
            sample: i64::from(r.sample_index),
            source: format!("world-{}", cfg.kind.as_str()),
            messages,
            tools: Vec::new(),
            stop_reason: "world_record".into(),
            stop: StopKind::Submitted,
            forced: false,
            reward: rec.reward,
            resolved: rec.reward >= 1.0,
            format_errors: 0,
            graded: true,
            steps: Vec::new(),
            summaries: Vec::new(),
            recorded_tokens: None,
            recorded_prompt: None,
            patch: None,
            row_id: Some(rec.row_id),
        },
    }
}

fn role_name(m: &dojo_llm::ChatMessage) -> Value {
    serde_json::to_value(m.role).unwrap_or_else(|_| Value::String("user".into()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use dojo_world::{FileView, SwrContext, SwrTarget, SwtContext, SwtTarget};

    fn swt(sample: u32, seq: u32, cmd: &str, incomplete: bool) -> WorldRecord {
        WorldRecord::new(
            "t",
            sample,
            WorldBody::Swt {
                seq,
                context: SwtContext {
                    task_id: "t".into(),
                    problem_statement: "p".into(),
                    command: cmd.into(),
                    executed_files: if cmd.contains(".py") {
                        vec![FileView {
                            path: "a.py".into(),
                            base: None,
                            current: Some("print(1)".into()),
                        }]
                    } else {
                        vec![]
                    },
                    agent_patch: String::new(),
                    gold_patch: Some("gold".into()),
                    analysis: None,
                },
                target: SwtTarget {
                    stdout: format!("{cmd}\n"),
                    stderr: String::new(),
                    exit_code: 0,
                },
                incomplete,
            },
        )
    }

    fn swr() -> WorldRecord {
        WorldRecord::new(
            "t",
            0,
            WorldBody::Swr {
                context: SwrContext {
                    task_id: "t".into(),
                    problem_statement: "p".into(),
                    test_command: "pytest -rA a_test.py".into(),
                    test_files: vec![],
                    agent_patch: "diff".into(),
                    gold_patch: None,
                    fail_to_pass: vec!["a_test.py::test_a".into()],
                    pass_to_pass: vec![],
                    analysis: None,
                },
                target: SwrTarget {
                    test_report: "1 passed".into(),
                    reward: 1,
                },
            },
        )
    }

    fn origin(line: usize) -> Origin {
        Origin {
            file: "world.jsonl".into(),
            line,
        }
    }

    #[test]
    fn the_world_stage_counts_every_drop() {
        let mut recs = vec![(swr(), origin(1))];
        for seq in 1..=8 {
            recs.push((
                swt(0, seq, &format!("python a{seq}.py"), false),
                origin(seq as usize + 1),
            ));
        }
        recs.push((swt(0, 9, "python cut.py", true), origin(20)));
        recs.push((swt(0, 10, "pytest", false), origin(21)));
        recs.push((swt(1, 1, "python a1.py", false), origin(22)));
        let n = recs.len();
        let (kept, rep) = select(recs, &WorldConfig::new(WorldKind::Swt));
        assert_eq!(rep.input, n);
        assert_eq!(rep.kept, 6);
        assert_eq!(rep.dropped["other_kind"], 1);
        assert_eq!(rep.dropped["incomplete_output"], 1);
        assert_eq!(rep.dropped["no_executed_code"], 1);
        assert_eq!(rep.dropped["duplicate"], 1);
        assert_eq!(rep.dropped["over_per_trajectory_cap"], 2);
        let (cands, stats) = samples(kept, &WorldConfig::new(WorldKind::Swt));
        assert_eq!(stats, WorldStats::default());
        let m = &cands[0].traj.messages;
        assert_eq!(m.len(), 3);
        assert_eq!(m[0]["role"], "system");
        assert!(
            m[1]["content"]
                .as_str()
                .unwrap()
                .contains("### 4. Command to Simulate")
        );
        assert_eq!(
            m[2],
            json!({"role": "assistant", "content": "{\"stdout\":\"python a1.py\\n\",\"stderr\":\"\",\"exit_code\":0}"})
        );
        assert_eq!(cands[0].traj.row_id.as_deref(), Some("t#0/swt1"));
    }

    #[test]
    fn swr_samples_carry_the_reward_and_count_cuts() {
        let mut cfg = WorldConfig::new(WorldKind::Swr);
        cfg.caps.problem = 0;
        let (kept, rep) = select(
            vec![
                (swr(), origin(1)),
                (swt(0, 1, "python a.py", false), origin(2)),
            ],
            &cfg,
        );
        assert_eq!((rep.kept, rep.dropped["other_kind"]), (1, 1));
        let (cands, stats) = samples(kept, &cfg);
        assert_eq!(cands[0].traj.reward, 1.0);
        assert_eq!(stats.truncated_samples, 1);
        assert_eq!(stats.truncated_sections["problem"], 1);
        let answer = cands[0].traj.messages[2]["content"].as_str().unwrap();
        assert_eq!(answer, r#"{"test_report":"1 passed","reward":1}"#);
    }

    #[test]
    fn long_targets_keep_their_tail_when_capped() {
        let mut cfg = WorldConfig::new(WorldKind::Swr);
        cfg.caps.target_output = Some(8);
        let mut long = swr();
        if let WorldBody::Swr { target, .. } = &mut long.body {
            target.test_report = "collected 3 items\n3 passed".into();
        }
        let (cands, stats) = samples(vec![(long, origin(1)), (swr(), origin(2))], &cfg);
        // Only the report over the cap is cut, and counted once.
        assert_eq!(stats.truncated_targets["test_report"], 1);
        let answer = |i: usize| {
            cands[i].traj.messages[2]["content"]
                .as_str()
                .unwrap()
                .to_string()
        };
        assert_eq!(
            answer(0),
            r#"{"test_report":"[… 18 characters cut]\n3 passed","reward":1}"#
        );
        assert_eq!(answer(1), r#"{"test_report":"1 passed","reward":1}"#);
        let mut cfg = WorldConfig::new(WorldKind::Swt);
        cfg.caps.target_output = Some(4);
        let (cands, stats) = samples(vec![(swt(0, 1, "python a1.py", false), origin(1))], &cfg);
        assert_eq!(stats.truncated_targets["stdout"], 1);
        assert!(!stats.truncated_targets.contains_key("stderr"));
        assert_eq!(
            cands[0].traj.messages[2]["content"],
            "{\"stdout\":\"[… 9 characters cut]\\n.py\\n\",\"stderr\":\"\",\"exit_code\":0}"
        );
    }

    #[test]
    fn cached_analyses_are_attached_and_counted() {
        let dir = tempfile::tempdir().unwrap();
        let path = dojo_world::analysis::analysis_cache_path(dir.path(), "t", "m");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let cached = json!({"schema_version": 1, "task_id": "t", "model": "m", "prompt_sha": "x", "analysis": "- the bug"});
        std::fs::write(&path, cached.to_string()).unwrap();
        let mut cfg = WorldConfig::new(WorldKind::Swr);
        cfg.analysis = Some((dir.path().to_path_buf(), "m".into()));
        let mut other = swr();
        other.task_id = "u".into();
        let (cands, stats) = samples(vec![(swr(), origin(1)), (other, origin(2))], &cfg);
        assert_eq!((stats.analysis_attached, stats.analysis_missing), (1, 1));
        let user = |i: usize| {
            cands[i].traj.messages[1]["content"]
                .as_str()
                .unwrap()
                .to_string()
        };
        assert!(user(0).contains("### 1. Initial Analysis of the Problem\n- the bug"));
        assert!(user(1).contains("No initial analysis provided."));
    }

    #[test]
    fn the_gold_patch_is_withheld_on_request() {
        let mut r = swr();
        if let WorldBody::Swr { context, .. } = &mut r.body {
            context.gold_patch = Some("+GOLDFIX\n".into());
        }
        let user = |cfg: &WorldConfig| {
            let (cands, _) = samples(vec![(r.clone(), origin(1))], cfg);
            cands[0].traj.messages[1]["content"]
                .as_str()
                .unwrap()
                .to_string()
        };
        let mut cfg = WorldConfig::new(WorldKind::Swr);
        assert!(user(&cfg).contains("GOLDFIX"));
        cfg.withhold_gold = true;
        let text = user(&cfg);
        assert!(!text.contains("GOLDFIX"), "{text}");
        assert!(text.contains("No gold patch provided."), "{text}");
    }

    #[test]
    fn unreadable_lines_are_problems_with_their_line() {
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().join("run");
        std::fs::create_dir_all(&run).unwrap();
        let good = serde_json::to_string(&swr()).unwrap();
        let mut old = serde_json::to_value(swr()).unwrap();
        old["schema_version"] = json!(99);
        std::fs::write(
            run.join(WORLD_FILE),
            format!("{good}\nnot json\n{old}\n{}", &good[..20]),
        )
        .unwrap();
        std::fs::write(run.join("trajectories.jsonl"), "{}\n").unwrap();
        let input = load(&[dir.path().to_path_buf()]);
        assert_eq!(input.files.len(), 1);
        assert_eq!(input.records.len(), 1);
        let kinds: Vec<(usize, &str)> = input
            .problems
            .iter()
            .map(|p| (p.line, p.kind.as_str()))
            .collect();
        assert_eq!(
            kinds,
            vec![
                (2, "invalid_json"),
                (3, "unknown_schema_version"),
                (4, "truncated_last_line")
            ]
        );
    }
}
