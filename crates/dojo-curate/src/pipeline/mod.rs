//! One curation run, stage by stage: read → dedup → difficulty → format → tokenize → lsp → cap
//! → render → export → report. [`run`] only sequences the stages; each is a function of
//! [`stages`] that takes the surviving candidates and records what it dropped and why in the
//! [`CurationSummary`] (its own module, [`crate::summary`], since the report reads it too). The
//! settings are in [`config`], the files written in [`output`], the human-readable report in
//! [`crate::report`].

use std::time::Instant;

use crate::error::CurateError;
use crate::render::{ChatModel, MessagesStyle};
use crate::report;
use crate::summary::{CurationSummary, KeptRecord};

mod config;
pub(crate) mod output;
mod stages;

pub use config::{Config, FilterSet, Formats};

/// Refuses settings that cannot work before anything is read.
fn check(cfg: &Config, model: Option<&dyn ChatModel>) -> Result<(), CurateError> {
    if cfg.world.is_some() && cfg.verifier.is_some() {
        return Err(CurateError::Config(
            "--world and --verifier write different datasets: choose one".into(),
        ));
    }
    if cfg.formats.tokens && model.is_none() {
        return Err(CurateError::Config(
            "the token export needs a target model (tokenizer + chat template)".into(),
        ));
    }
    if cfg.messages_style == MessagesStyle::Inline && model.is_none() {
        return Err(CurateError::Config(
            "--messages-style inline writes what a target model's template is given: it needs a target model".into(),
        ));
    }
    Ok(())
}

/// Runs the pipeline. `model` is the target chat template + tokenizer; without one, token
/// budgets use the recorded usage and no token export is written.
pub fn run(cfg: &Config, model: Option<&dyn ChatModel>) -> Result<CurationSummary, CurateError> {
    let t0 = Instant::now();
    let nthreads = stages::threads(cfg.threads);
    check(cfg, model)?;
    let mut out = CurationSummary::default();
    let cands = match &cfg.world {
        Some(w) => stages::read_world(cfg, w, &mut out),
        None => stages::read(cfg, &mut out),
    };
    out.time("read", t0);

    let t1 = Instant::now();
    let cands = stages::filter(cfg, model, nthreads, cands, &mut out);
    out.kept_trajectories = cands.len();
    out.kept_turns = cands.iter().map(|c| c.traj.num_turns()).collect();
    out.kept_records = cands
        .iter()
        .map(|c| KeptRecord {
            task_id: c.traj.task_id.clone(),
            resolved: c.traj.resolved,
            origin: c.traj.origin.clone(),
        })
        .collect();
    out.time("filter+count", t1);

    let t2 = Instant::now();
    std::fs::create_dir_all(&cfg.out).map_err(|source| CurateError::Io {
        path: cfg.out.clone(),
        source,
    })?;
    let mut rows = stages::rows(&cands, &mut out);
    let rendered = match (cfg.formats.tokens, model) {
        (true, Some(model)) => Some(stages::render_tokens(
            model,
            cfg.masking,
            nthreads,
            &mut rows,
            &mut out,
        )),
        _ => None,
    };
    let token_rows = rendered.as_ref().map_or(&[][..], |r| &r.0[..]);
    out.samples = rows.messages.len();
    out.sample_tokens = token_rows.iter().map(|r| r.input_ids.len()).collect();
    out.trained_tokens = token_rows
        .iter()
        .map(|r| r.assistant_masks.iter().filter(|&&m| m == 1).count())
        .sum();
    out.time("render", t2);

    let t3 = Instant::now();
    let fingerprints = rendered.as_ref().map(|r| &r.1);
    let mut files = output::write_exports(cfg, model, &rows.messages, rendered.as_ref(), &mut out)?;
    out.time("write", t3);
    if cfg.report {
        files.extend(report::write(&cfg.out, &out)?);
    }
    out.written = files;
    let manifest = cfg.out.join("manifest.json");
    output::write_manifest(&manifest, cfg, &out, fingerprints)?;
    out.written.push(manifest);
    out.time("total", t0);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::{self, EXPORT_SCHEMA_VERSION};
    use crate::render::tests::CharChatml;
    use dojo_trajectory::StopReason;
    use parquet::file::reader::{FileReader, SerializedFileReader};
    use serde_json::Value;
    use serde_json::json;
    use std::collections::BTreeMap;
    use std::io::Write;

    use crate::fixtures::record;

    #[test]
    fn end_to_end_counts_every_trajectory_and_writes_every_export() {
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("rollouts");
        std::fs::create_dir_all(&input).unwrap();
        let mut f = std::fs::File::create(input.join("r.jsonl")).unwrap();
        let mut forced = record("mixed", 2, 1.0, 1);
        forced.forced_submission = true;
        forced.stop_reason = StopReason::MaxSteps;
        let recs = [
            record("mixed", 0, 1.0, 3),
            record("mixed", 1, 1.0, 1),
            forced,
            record("mixed", 3, 0.0, 2),
            record("mixed", 4, 1.0, 2),
            record("pass", 0, 1.0, 1),
            record("pass", 1, 1.0, 1),
            record("fail", 0, 0.0, 1),
        ];
        for r in &recs {
            writeln!(f, "{}", r.to_json_line()).unwrap();
        }
        writeln!(f, "{}", recs[0].to_json_line()).unwrap(); // exact duplicate
        let half = recs[1].to_json_line();
        write!(f, "{}", &half[..half.len() / 3]).unwrap(); // torn tail
        drop(f);
        let out_dir = dir.path().join("out");
        let mut cfg = Config::new(vec![input], out_dir.clone());
        cfg.formats.sharegpt = true;
        cfg.threads = 2;
        let out = run(&cfg, Some(&CharChatml)).unwrap();
        assert_eq!(out.trajectories, 9);
        assert_eq!(out.problem_counts["truncated_last_line"], 1);
        let stages: Vec<(&str, usize, usize)> = out
            .stages
            .iter()
            .map(|s| (s.stage.as_str(), s.input, s.kept))
            .collect();
        assert_eq!(
            stages,
            vec![
                ("dedup_records", 9, 8),
                ("difficulty", 8, 5),
                ("dedup", 5, 5),
                ("format", 5, 3),
                ("tokenize", 3, 3),
                ("token_budget", 3, 3),
                ("cap", 3, 2),
            ]
        );
        for s in &out.stages {
            assert_eq!(s.input, s.kept + s.dropped_total(), "{s:?}");
        }
        // The cap keeps the two shortest: samples 1 (1 turn) and 4 (2 turns).
        let jsonl = std::fs::read_to_string(out_dir.join("messages.jsonl")).unwrap();
        let rows: Vec<Value> = jsonl
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let ids: Vec<&str> = rows
            .iter()
            .map(|r| r["traj_id"].as_str().unwrap())
            .collect();
        assert_eq!(ids, ["mixed#1", "mixed#4"]);
        assert_eq!(
            rows[0]["messages"][2]["tool_calls"][0]["function"]["arguments"],
            json!({"command": "ls 0"})
        );
        let file = std::fs::File::open(out_dir.join("tokens.parquet")).unwrap();
        let pq = SerializedFileReader::new(file).unwrap();
        let md = pq.metadata().file_metadata();
        assert_eq!(md.num_rows(), 2);
        let kv: BTreeMap<String, String> = md
            .key_value_metadata()
            .unwrap()
            .iter()
            .map(|k| (k.key.clone(), k.value.clone().unwrap_or_default()))
            .collect();
        assert_eq!(kv["dojo.schema_version"], EXPORT_SCHEMA_VERSION.to_string());
        assert_eq!(kv["dojo.tokenizer_sha"], "chars");
        let manifest: Value =
            serde_json::from_str(&std::fs::read_to_string(out_dir.join("manifest.json")).unwrap())
                .unwrap();
        assert_eq!(manifest["schema_version"], EXPORT_SCHEMA_VERSION);
        assert_eq!(manifest["samples"], 2);
        for f in [
            "messages.parquet",
            "sharegpt.jsonl",
            "report.html",
            "difficulty.svg",
            "tokens.svg",
            "turns.svg",
        ] {
            assert!(out_dir.join(f).exists(), "{f} missing");
        }
        let html = std::fs::read_to_string(out_dir.join("report.html")).unwrap();
        assert!(html.contains("truncated_last_line"));
        // Every kept trajectory's task row links to its page.
        assert!(html.contains("Kept trajectories by task"));
        let href = html
            .split("href=\"trajectories/")
            .nth(1)
            .and_then(|rest| rest.split('"').next())
            .unwrap();
        let page = std::fs::read_to_string(out_dir.join("trajectories").join(href)).unwrap();
        assert!(page.contains("Final diff"), "{href}");
    }

    #[test]
    fn tokenizer_mismatch_is_reported_and_counted() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("r.jsonl");
        let mut good = record("t", 0, 1.0, 1);
        let prompt: Vec<Value> = good.messages[..2]
            .iter()
            .map(|m| export::portable_message(&serde_json::to_value(m).unwrap()))
            .collect();
        good.steps[0].prompt_token_ids = Some(CharChatml.prompt_ids(&prompt, &[]).unwrap());
        let mut bad = record("t", 1, 1.0, 1);
        bad.steps[0].prompt_token_ids = Some(vec![1, 2, 3]);
        std::fs::write(
            &p,
            format!("{}\n{}\n", good.to_json_line(), bad.to_json_line()),
        )
        .unwrap();
        let mut cfg = Config::new(vec![p], dir.path().join("out"));
        cfg.filters = FilterSet::parse("format", 2).unwrap();
        let out = run(&cfg, Some(&CharChatml)).unwrap();
        assert_eq!(out.problem_counts["tokenizer_mismatch"], 1);
        assert!(
            out.problems[0].contains("r.jsonl:2: tokenizer_mismatch"),
            "{}",
            out.problems[0]
        );
        assert_eq!(out.samples, 1);
        cfg.allow_tokenizer_mismatch = true;
        assert_eq!(run(&cfg, Some(&CharChatml)).unwrap().samples, 2);
    }
}
