//! One curation run: read → dedup → difficulty → format → tokenize → lsp → cap → render → export
//! → report.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::Serialize;
use serde_json::json;

use crate::export::{
    self, EXPORT_SCHEMA_VERSION, ExportError, Fingerprints, MessagesRow, RowMeta, TokenRow,
};
use crate::filters::{self, Cand, DifficultyConfig, DifficultyStats, FormatConfig, StageReport};
use crate::input::{self, Problem};
use crate::render::{self, ChatModel, Masking, MessagesStyle};
use crate::report::{self, Histogram};
use crate::view::Traj;

/// Which filters run (their order is fixed, see [`crate::filters`]).
#[derive(Debug, Clone, Serialize)]
pub struct FilterSet {
    pub dedup: bool,
    pub difficulty: bool,
    pub format: bool,
    pub cap: bool,
    /// Minimum successful LSP-tool calls; `None` = filter off.
    pub lsp_min: Option<usize>,
}

impl Default for FilterSet {
    fn default() -> Self {
        FilterSet {
            dedup: true,
            difficulty: true,
            format: true,
            cap: true,
            lsp_min: None,
        }
    }
}

impl FilterSet {
    /// Parses `format,difficulty,cap,dedup,lsp` (`none` for no filter). `lsp` takes its minimum
    /// from `lsp_min` (default 2, SWE-Master's `limit_lsp`).
    pub fn parse(list: &str, lsp_min: usize) -> Result<FilterSet, String> {
        let mut f = FilterSet {
            dedup: false,
            difficulty: false,
            format: false,
            cap: false,
            lsp_min: None,
        };
        for name in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            match name {
                "dedup" => f.dedup = true,
                "difficulty" => f.difficulty = true,
                "format" => f.format = true,
                "cap" => f.cap = true,
                "lsp" => f.lsp_min = Some(lsp_min),
                "none" => {}
                other => {
                    return Err(format!(
                        "unknown filter {other:?} (known: dedup, difficulty, format, lsp, cap, none)"
                    ));
                }
            }
        }
        Ok(f)
    }
}

/// What to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Formats {
    /// `tokens.parquet` (needs a model).
    pub tokens: bool,
    /// `messages.jsonl` + `messages.parquet`.
    pub messages: bool,
    /// `sharegpt.jsonl`.
    pub sharegpt: bool,
}

/// A whole run's settings.
#[derive(Debug, Clone, Serialize)]
pub struct Config {
    pub inputs: Vec<PathBuf>,
    pub out: PathBuf,
    pub filters: FilterSet,
    pub difficulty: DifficultyConfig,
    pub format: FormatConfig,
    pub cap: usize,
    pub lsp_tool: String,
    pub masking: Masking,
    pub formats: Formats,
    /// Worker threads for rendering/tokenizing (0 = available parallelism).
    pub threads: usize,
    /// Write `report.html` and the SVG charts.
    pub report: bool,
    /// Keep trajectories whose recorded prompt ids differ from the target tokenizer's (e.g. to
    /// distil another model's rollouts); by default they are dropped as a tokenizer mismatch.
    pub allow_tokenizer_mismatch: bool,
    /// How the messages exports write tool calls.
    pub messages_style: MessagesStyle,
}

impl Config {
    pub fn new(inputs: Vec<PathBuf>, out: PathBuf) -> Config {
        Config {
            inputs,
            out,
            filters: FilterSet::default(),
            difficulty: DifficultyConfig::default(),
            format: FormatConfig::default(),
            cap: 2,
            lsp_tool: "lsp_tool".into(),
            masking: Masking::AllAssistant,
            formats: Formats {
                tokens: true,
                messages: true,
                sharegpt: false,
            },
            threads: 0,
            report: true,
            allow_tokenizer_mismatch: false,
            messages_style: MessagesStyle::Auto,
        }
    }
}

/// Errors that stop a run (bad input lines never do: they are [`Problem`]s).
#[derive(Debug, thiserror::Error)]
pub enum CurateError {
    #[error(transparent)]
    Export(#[from] ExportError),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Config(String),
}

/// What a run did.
#[derive(Debug, Default, Serialize)]
pub struct Outcome {
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
    pub written: Vec<PathBuf>,
    pub seconds: BTreeMap<String, f64>,
    /// How the messages exports wrote tool calls: `native` or `inline`.
    pub messages_style: &'static str,
}

fn threads(n: usize) -> usize {
    if n > 0 {
        n
    } else {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    }
}

/// Maps `f` over `items` on `n` threads, keeping order.
fn par_map<T: Sync, R: Send>(items: &[T], n: usize, f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    if n <= 1 || items.len() < 2 {
        return items.iter().map(f).collect();
    }
    let chunk = items.len().div_ceil(n);
    std::thread::scope(|s| {
        let handles: Vec<_> = items
            .chunks(chunk)
            .map(|c| s.spawn(|| c.iter().map(&f).collect::<Vec<R>>()))
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_default())
            .collect()
    })
}

/// The trajectory with portable messages (arguments as objects; see
/// [`export::portable_message`]): rendering uses the same messages the messages export holds, so
/// both exports describe one conversation.
fn portable(t: &Traj) -> Traj {
    let mut p = t.clone();
    p.messages = t.messages.iter().map(export::portable_message).collect();
    p.summaries = t.summaries.iter().map(export::portable_message).collect();
    p
}

/// Token count of the longest window (what must fit the training context), after checking the
/// recorded prompt ids (if any) against the target tokenizer.
fn count_tokens(
    model: &dyn ChatModel,
    t: &Traj,
    check_ids: bool,
) -> Result<usize, (&'static str, String)> {
    let p = portable(t);
    if check_ids && let Some((k, ids)) = &t.recorded_prompt {
        let prompt = render::prompt_of(&p, *k).map_err(|e| ("invalid_record", e))?;
        let ours = model
            .prompt_ids(&prompt, &p.tools)
            .map_err(|e| ("unrenderable", e))?;
        if &ours != ids {
            let at = ours
                .iter()
                .zip(ids)
                .position(|(a, b)| a != b)
                .unwrap_or(ours.len().min(ids.len()));
            return Err((
                "tokenizer_mismatch",
                format!(
                    "the policy ({}) was sent {} prompt tokens at step {}, the target model {} renders {} (first difference at token {at}): trajectories and --model do not share a tokenizer/template",
                    t.source,
                    ids.len(),
                    k + 1,
                    model.name(),
                    ours.len()
                ),
            ));
        }
    }
    let mut max = 0;
    for w in render::windows(&p).map_err(|e| ("invalid_record", e))? {
        max = max.max(
            model
                .count(&w.messages, &p.tools)
                .map_err(|e| ("unrenderable", e))?,
        );
    }
    Ok(max)
}

fn record_problem(out: &mut Outcome, p: Problem) {
    *out.problem_counts.entry(p.kind.clone()).or_default() += 1;
    out.problems.push(p.to_string());
}

/// Drops candidates whose conversation cannot be rendered/tokenized, counting them.
fn tokenize_stage(
    cands: Vec<Cand>,
    model: &dyn ChatModel,
    check_ids: bool,
    nthreads: usize,
    out: &mut Outcome,
) -> Vec<Cand> {
    let mut rep = StageReport {
        stage: "tokenize".into(),
        input: cands.len(),
        ..Default::default()
    };
    let counts = par_map(&cands, nthreads, |c| {
        count_tokens(model, &c.traj, check_ids)
    });
    let mut kept = Vec::with_capacity(cands.len());
    for (mut c, n) in cands.into_iter().zip(counts) {
        match n {
            Ok(n) => {
                c.n_tokens = Some(n);
                kept.push(c);
            }
            Err((kind, e)) => {
                *rep.dropped.entry(kind.into()).or_default() += 1;
                record_problem(
                    out,
                    Problem {
                        file: c.traj.origin.file.clone(),
                        line: c.traj.origin.line,
                        kind: kind.into(),
                        reason: format!("task {}: {e}", c.traj.task_id),
                    },
                );
            }
        }
    }
    rep.kept = kept.len();
    out.stages.push(rep);
    kept
}

/// The rows with tools, calls and results written into the text ([`render::hermes_inline`]).
/// The token export rendered these very messages, so a failure here is a bug, not bad input.
fn inline_rows(rows: &[MessagesRow]) -> Result<Vec<MessagesRow>, CurateError> {
    rows.iter()
        .map(|r| {
            let messages = render::hermes_inline(&r.messages, &r.tools)
                .map_err(|e| CurateError::Config(format!("{}: {e}", r.meta.traj_id)))?;
            Ok(MessagesRow {
                meta: r.meta.clone(),
                messages,
                tools: Vec::new(),
            })
        })
        .collect()
}

/// Runs the pipeline. `model` is the target chat template + tokenizer; without one, token
/// budgets use the recorded usage and no token export is written.
pub fn run(cfg: &Config, model: Option<&dyn ChatModel>) -> Result<Outcome, CurateError> {
    let t0 = Instant::now();
    let nthreads = threads(cfg.threads);
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
    let loaded = input::load(&cfg.inputs);
    let mut out = Outcome {
        files_read: loaded.files.len(),
        bytes_read: loaded.bytes,
        lines: loaded.lines,
        trajectories: loaded.trajs.len(),
        ..Default::default()
    };
    for p in loaded.problems {
        record_problem(&mut out, p);
    }
    out.seconds
        .insert("read".into(), t0.elapsed().as_secs_f64());
    let t1 = Instant::now();
    let mut cands: Vec<Cand> = loaded
        .trajs
        .into_iter()
        .map(|t| Cand {
            n_tokens: None,
            traj: t,
        })
        .collect();
    if cfg.filters.dedup {
        let (k, rep) = filters::dedup(cands, true);
        cands = k;
        out.stages.push(rep);
    }
    if cfg.filters.difficulty {
        let (k, rep, st) = filters::difficulty(cands, &cfg.difficulty);
        cands = k;
        out.stages.push(rep);
        out.difficulty = Some(st);
    } else {
        out.difficulty = Some(filters::difficulty_stats(&cands));
    }
    if cfg.filters.dedup {
        let (k, rep) = filters::dedup(cands, false);
        cands = k;
        out.stages.push(rep);
    }
    if cfg.filters.format {
        // Cheap checks first, so only plausible trajectories pay for rendering.
        let (k, rep) = filters::format(
            cands,
            &FormatConfig {
                max_tokens: None,
                ..cfg.format.clone()
            },
        );
        cands = k;
        let mut rep = rep;
        rep.stage = "format".into();
        out.stages.push(rep);
    }
    if let Some(model) = model {
        cands = tokenize_stage(
            cands,
            model,
            !cfg.allow_tokenizer_mismatch,
            nthreads,
            &mut out,
        );
    } else {
        for c in &mut cands {
            c.n_tokens = c.traj.recorded_tokens.map(|n| n as usize);
        }
    }
    if cfg.filters.format && cfg.format.max_tokens.is_some() {
        let mut rep = StageReport {
            stage: "token_budget".into(),
            input: cands.len(),
            ..Default::default()
        };
        let max = cfg.format.max_tokens.unwrap_or(usize::MAX);
        cands.retain(|c| {
            let over = c.n_tokens.is_some_and(|n| n > max);
            if over {
                *rep.dropped.entry("over_token_budget".into()).or_default() += 1;
            }
            !over
        });
        rep.kept = cands.len();
        out.stages.push(rep);
    }
    if let Some(min) = cfg.filters.lsp_min {
        let (k, rep) = filters::lsp(cands, &cfg.lsp_tool, min);
        cands = k;
        out.stages.push(rep);
    }
    if cfg.filters.cap {
        let (k, rep) = filters::cap(cands, cfg.cap);
        cands = k;
        out.stages.push(rep);
    }
    out.kept_trajectories = cands.len();
    out.kept_turns = cands.iter().map(|c| c.traj.num_turns()).collect();
    out.seconds
        .insert("filter+count".into(), t1.elapsed().as_secs_f64());

    let t2 = Instant::now();
    std::fs::create_dir_all(&cfg.out).map_err(|source| CurateError::Io {
        path: cfg.out.clone(),
        source,
    })?;
    // Windows → rows.
    let mut msg_rows = Vec::new();
    let mut windows_of = Vec::new();
    for c in &cands {
        let t = &portable(&c.traj);
        // Windows were computed without error while counting tokens, or no model is set and this
        // is the first time: a failure here is counted like any other.
        let ws = match render::windows(t) {
            Ok(ws) => ws,
            Err(e) => {
                record_problem(
                    &mut out,
                    Problem {
                        file: t.origin.file.clone(),
                        line: t.origin.line,
                        kind: "invalid_record".into(),
                        reason: format!("task {}: {e}", t.task_id),
                    },
                );
                continue;
            }
        };
        let multi = ws.len() > 1;
        for mut w in ws {
            // Every export ends with the window's last assistant turn (see
            // `export::through_last_assistant`).
            let keep = crate::export::through_last_assistant(&w.messages).len();
            w.messages.truncate(keep);
            let traj_id = if multi {
                format!("{}#{}/{}", t.task_id, t.sample, w.part)
            } else {
                format!("{}#{}", t.task_id, t.sample)
            };
            let meta = RowMeta {
                task_id: t.task_id.clone(),
                traj_id,
                sample: t.sample,
                part: w.part as i32,
                source: t.source.clone(),
                reward: t.reward,
                num_turns: w.messages[w.first_new..]
                    .iter()
                    .filter(|m| crate::view::role(m) == "assistant")
                    .count() as i32,
            };
            msg_rows.push(MessagesRow {
                meta,
                messages: w.messages.clone(),
                tools: t.tools.clone(),
            });
            windows_of.push((w, t.origin.clone(), t.tools.clone()));
        }
    }
    let mut token_rows: Vec<TokenRow> = Vec::new();
    let mut fingerprints = None;
    if let (true, Some(model)) = (cfg.formats.tokens, model) {
        let rendered = par_map(&windows_of, nthreads, |(w, _, tools)| {
            render::render_window(model, w, tools, cfg.masking)
        });
        let mut keep = vec![true; msg_rows.len()];
        for (i, r) in rendered.into_iter().enumerate() {
            match r {
                Ok(r) => token_rows.push(TokenRow {
                    meta: msg_rows[i].meta.clone(),
                    input_ids: r.input_ids,
                    assistant_masks: r.assistant_masks,
                }),
                Err(e) => {
                    keep[i] = false;
                    let o = &windows_of[i].1;
                    record_problem(
                        &mut out,
                        Problem {
                            file: o.file.clone(),
                            line: o.line,
                            kind: "unrenderable".into(),
                            reason: format!("{}: {e}", msg_rows[i].meta.traj_id),
                        },
                    );
                }
            }
        }
        // Every export holds the same samples.
        let mut k = keep.iter();
        msg_rows.retain(|_| *k.next().unwrap_or(&true));
        fingerprints = Some(Fingerprints {
            model: model.name(),
            tokenizer_sha: model.tokenizer_fingerprint(),
            template_sha: model.template_fingerprint(),
        });
    }
    out.samples = msg_rows.len();
    out.sample_tokens = token_rows.iter().map(|r| r.input_ids.len()).collect();
    out.trained_tokens = token_rows
        .iter()
        .map(|r| r.assistant_masks.iter().filter(|&&m| m == 1).count())
        .sum();
    out.seconds
        .insert("render".into(), t2.elapsed().as_secs_f64());

    let t3 = Instant::now();
    let mut files = Vec::new();
    if let Some(fp) = &fingerprints {
        let p = cfg.out.join("tokens.parquet");
        export::write_tokens_parquet(&p, &token_rows, fp)?;
        files.push(p);
    }
    if cfg.formats.messages {
        let inline = match (cfg.messages_style, model) {
            (MessagesStyle::Inline, Some(_)) => true,
            (MessagesStyle::Auto, Some(m)) => !m.supports_tools(),
            _ => false,
        };
        let inline = if inline {
            Some(inline_rows(&msg_rows)?)
        } else {
            None
        };
        out.messages_style = if inline.is_some() { "inline" } else { "native" };
        let rows = inline.as_ref().unwrap_or(&msg_rows);
        let p = cfg.out.join("messages.jsonl");
        export::write_messages_jsonl(&p, rows)?;
        files.push(p);
        let p = cfg.out.join("messages.parquet");
        export::write_messages_parquet(&p, rows)?;
        files.push(p);
    }
    if cfg.formats.sharegpt {
        let p = cfg.out.join("sharegpt.jsonl");
        let bad = export::write_sharegpt(&p, &msg_rows)?;
        for (i, reason) in bad {
            let r = &msg_rows[i];
            record_problem(
                &mut out,
                Problem {
                    file: p.display().to_string(),
                    line: 0,
                    kind: "sharegpt_unconvertible".into(),
                    reason: format!("{}: {reason}", r.meta.traj_id),
                },
            );
        }
        files.push(p);
    }
    out.seconds
        .insert("write".into(), t3.elapsed().as_secs_f64());
    if cfg.report {
        files.extend(write_report(cfg, &out)?);
    }
    out.written = files;
    let manifest = cfg.out.join("manifest.json");
    write_manifest(&manifest, cfg, &out, fingerprints.as_ref())?;
    out.written.push(manifest);
    out.seconds
        .insert("total".into(), t0.elapsed().as_secs_f64());
    Ok(out)
}

fn write_report(cfg: &Config, out: &Outcome) -> Result<Vec<PathBuf>, CurateError> {
    let mut charts = Vec::new();
    if let Some(d) = &out.difficulty {
        charts.push((
            "difficulty",
            Histogram {
                title: "Tasks by mean reward over their rollouts".into(),
                x_label: "mean reward".into(),
                bins: d
                    .histogram
                    .iter()
                    .enumerate()
                    .map(|(i, &c)| {
                        (
                            format!("{:.1}–{:.1}", i as f64 / 10.0, (i + 1) as f64 / 10.0),
                            c,
                        )
                    })
                    .collect(),
            },
        ));
    }
    charts.push((
        "tokens",
        Histogram::of(
            "Tokens per exported sample",
            "tokens",
            &out.sample_tokens,
            20,
        ),
    ));
    charts.push((
        "turns",
        Histogram::of(
            "Assistant turns per kept trajectory",
            "turns",
            &out.kept_turns,
            20,
        ),
    ));
    let mut summary = vec![
        ("files read".to_string(), out.files_read.to_string()),
        ("bytes read".to_string(), out.bytes_read.to_string()),
        (
            "trajectories read".to_string(),
            out.trajectories.to_string(),
        ),
        (
            "kept trajectories".to_string(),
            out.kept_trajectories.to_string(),
        ),
        ("exported samples".to_string(), out.samples.to_string()),
        ("trained tokens".to_string(), out.trained_tokens.to_string()),
    ];
    if let Some(d) = &out.difficulty {
        summary.push((
            "tasks: always fail / always pass / mixed".into(),
            format!("{} / {} / {}", d.always_fail, d.always_pass, d.mixed),
        ));
    }
    for (k, v) in &out.problem_counts {
        summary.push((format!("problems: {k}"), v.to_string()));
    }
    let hists: Vec<Histogram> = charts.iter().map(|c| c.1.clone()).collect();
    let html = report::html("dojo curate", &out.stages, &summary, &out.problems, &hists);
    let mut files = Vec::new();
    let p = cfg.out.join("report.html");
    write(&p, &html)?;
    files.push(p);
    for (name, c) in &charts {
        let p = cfg.out.join(format!("{name}.svg"));
        write(&p, &report::bar_svg(c))?;
        files.push(p);
    }
    Ok(files)
}

fn write(p: &Path, s: &str) -> Result<(), CurateError> {
    std::fs::write(p, s).map_err(|source| CurateError::Io {
        path: p.to_path_buf(),
        source,
    })
}

fn write_manifest(
    p: &Path,
    cfg: &Config,
    out: &Outcome,
    fp: Option<&Fingerprints>,
) -> Result<(), CurateError> {
    let m = json!({
        "schema_version": EXPORT_SCHEMA_VERSION,
        "kind": "dojo-curate-export",
        "writer": format!("dojo-curate {}", env!("CARGO_PKG_VERSION")),
        "files": out.written.iter().filter_map(|f| f.file_name()).map(|f| f.to_string_lossy()).collect::<Vec<_>>(),
        "model": fp,
        "masking": cfg.masking,
        "messages_style": out.messages_style,
        "config": cfg,
        "input": {
            "files": out.files_read, "bytes": out.bytes_read, "lines": out.lines,
            "trajectories": out.trajectories,
        },
        "stages": out.stages,
        "difficulty": out.difficulty.as_ref().map(|d| json!({
            "always_fail": d.always_fail, "always_pass": d.always_pass, "mixed": d.mixed,
            "histogram": d.histogram,
        })),
        "kept_trajectories": out.kept_trajectories,
        "samples": out.samples,
        "trained_tokens": out.trained_tokens,
        "problem_counts": out.problem_counts,
        "problems": out.problems,
    });
    let text = serde_json::to_string_pretty(&m).unwrap_or_default();
    write(p, &text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::tests::CharChatml;
    use dojo_trajectory::StopReason;
    use parquet::file::reader::{FileReader, SerializedFileReader};
    use serde_json::Value;
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

    #[test]
    fn filter_list_parses_and_rejects_unknown_names() {
        let f = FilterSet::parse("format, cap,lsp", 3).unwrap();
        assert!(f.format && f.cap && !f.dedup && !f.difficulty);
        assert_eq!(f.lsp_min, Some(3));
        assert!(
            FilterSet::parse("format,fancy", 2)
                .unwrap_err()
                .contains("fancy")
        );
    }
}
