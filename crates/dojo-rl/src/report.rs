//! `OUT/report.html` of an RL run: every number that decided a gradient, per step, at a glance.
//!
//! Built only from the run directory's files (`rl_run.json`, `metrics.jsonl`, `eval.jsonl`), so
//! it can be rewritten at any time and shows what is on disk; the loop rewrites it atomically
//! after every step. Charts are dojo-report's: reward and resolved rate, masked share and
//! zero-variance groups, advantage moments, clip fractions, the approximate KL between the
//! sampling and the current policy, entropy, response length, and the time split of each step
//! (generation with grading, shaping, training). A line that does not parse (one cut short by a
//! kill) is left out of the figures and named in a note on the page.

use std::path::{Path, PathBuf};

use dojo_report::{LineChart, PALETTE, Page, StackedRow, Svg, Table, number, stacked_bars};
use dojo_rundir::BadLine;
use serde_json::Value as Json;

use crate::RlError;
use crate::metrics::{EVAL_FILE, METRICS_FILE, RUN_FILE, RlRunManifest, StepMetrics};

/// The report's file name inside `OUT`.
pub const REPORT_FILE: &str = "report.html";

/// Mean of `f` over a step's mini-batch updates (`None` when nothing was trained).
fn update_mean(m: &StepMetrics, f: impl Fn(&crate::update::UpdateReport) -> f64) -> Option<f64> {
    (!m.updates.is_empty()).then(|| m.updates.iter().map(f).sum::<f64>() / m.updates.len() as f64)
}

/// The run directory's files as the report reads them: [`load`] reads, [`render_files`] draws.
#[derive(Debug, Default)]
pub struct RunFiles {
    /// `rl_run.json` (`None` before the run wrote it; one that does not parse is an error).
    pub manifest: Option<RlRunManifest>,
    /// The lines of `metrics.jsonl` that parse as a step's metrics.
    pub metrics: Vec<StepMetrics>,
    /// The lines of `metrics.jsonl` that do not (a tail cut short by a kill): shown on the page,
    /// not dropped.
    pub bad_metrics: Vec<BadLine>,
    /// The lines of `eval.jsonl` that parse.
    pub evals: Vec<Json>,
    /// The lines of `eval.jsonl` that do not.
    pub bad_evals: Vec<BadLine>,
}

/// Read the files of the run in `out`; a file not written yet reads as empty.
pub fn load(out: &Path) -> Result<RunFiles, RlError> {
    let run_path = out.join(RUN_FILE);
    let manifest: Option<RlRunManifest> = match std::fs::read_to_string(&run_path) {
        // The manifest is written whole (atomically) before the first step: text that does
        // not parse is a damaged run directory, which the report says rather than hides.
        Ok(s) => Some(
            serde_json::from_str(&s).map_err(|source| RlError::InvalidState {
                path: run_path.clone(),
                source,
            })?,
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(RlError::io(&run_path)(e)),
    };
    let metrics = dojo_rundir::read_records(out.join(METRICS_FILE))?.unwrap_or_default();
    let evals = dojo_rundir::read_records(out.join(EVAL_FILE))?.unwrap_or_default();
    Ok(RunFiles {
        manifest,
        metrics: metrics.records,
        bad_metrics: metrics.bad,
        evals: evals.records,
        bad_evals: evals.bad,
    })
}

/// Render the report of the run in `out` (as HTML text).
pub fn render(out: &Path) -> Result<String, RlError> {
    Ok(render_files(&load(out)?))
}

/// The page of `files`: the same files give the same bytes.
pub fn render_files(files: &RunFiles) -> String {
    let mut page = Page::new("dojo rl");
    if let Some(m) = &files.manifest {
        page.subtitle(&subtitle(m));
    }
    cards(&mut page, &files.metrics);
    evaluation(&mut page, &files.evals, &files.bad_evals);
    page.heading("Per step");
    if files.metrics.is_empty() {
        page.note("No step finished yet.");
    }
    if let Some(note) = dojo_rundir::lines::bad_lines_note(METRICS_FILE, &files.bad_metrics) {
        page.note(&note);
    }
    for chart in step_charts(&files.metrics) {
        page.chart(&chart);
    }
    step_table(&mut page, &files.metrics);
    if let Some(m) = &files.manifest {
        settings(&mut page, m);
    }
    page.finish()
}

/// Model, task count and the settings that shape a step.
fn subtitle(m: &RlRunManifest) -> String {
    let c = &m.config;
    format!(
        "{} · {} tasks · G = {} · {} tasks per step · {} · {} · {}",
        m.model,
        m.tasks.len(),
        c.group,
        c.tasks_per_step,
        c.advantage.estimator.as_str(),
        match c.lora_rank {
            Some(r) => format!("LoRA r={r}"),
            None => "full fine-tuning".into(),
        },
        format_args!("clip {}/{}", c.loss.clip_low, c.loss.clip_high),
    )
}

/// Steps, reward of the first and last steps, and episodes per hour.
fn cards(page: &mut Page, metrics: &[StepMetrics]) {
    let episodes: usize = metrics.iter().map(|m| m.batch.episodes).sum();
    let seconds: f64 = metrics
        .iter()
        .map(|m| m.generation_s + m.shaping_s + m.training_s)
        .sum();
    let steps = metrics.last().map_or("0".into(), |m| m.step.to_string());
    let reward = |ms: &[StepMetrics]| {
        let n: usize = ms.iter().map(|m| m.batch.episodes).sum();
        let r: f64 = ms
            .iter()
            .map(|m| m.batch.reward_mean * m.batch.episodes as f64)
            .sum();
        if n == 0 {
            "-".into()
        } else {
            number(r / n as f64, 3)
        }
    };
    let k = metrics.len().min(3);
    let first = reward(&metrics[..k]);
    let last = reward(&metrics[metrics.len() - k..]);
    let per_hour = if seconds > 0.0 {
        number((episodes as f64 * 3600.0 / seconds).round(), 0)
    } else {
        "-".into()
    };
    let first_detail = format!("first {k} steps: {first}");
    let episodes_detail = format!("{episodes} episodes in {seconds:.0} s");
    page.cards([
        ("steps", steps.as_str(), ""),
        ("reward (last steps)", last.as_str(), first_detail.as_str()),
        (
            "episodes / hour",
            per_hour.as_str(),
            episodes_detail.as_str(),
        ),
    ]);
}

/// The held-out evaluations of `eval.jsonl` (nothing when there are none).
fn evaluation(page: &mut Page, evals: &[Json], bad: &[BadLine]) {
    if evals.is_empty() && bad.is_empty() {
        return;
    }
    page.heading("Held-out evaluation");
    if let Some(note) = dojo_rundir::lines::bad_lines_note(EVAL_FILE, bad) {
        page.note(&note);
    }
    if evals.is_empty() {
        return;
    }
    let mut t = Table::new(["step", "tasks", "resolved", "infrastructure failures"]).numeric(0..4);
    for e in evals {
        let f = |k: &str| {
            e.pointer(&format!("/eval/{k}"))
                .map_or("-".into(), Json::to_string)
        };
        t.row([
            e.get("step").map_or("-".into(), Json::to_string),
            f("tasks"),
            f("resolved"),
            f("infrastructure_failures"),
        ]);
    }
    page.table(&t);
}

/// (title, y axis, named series) of one line chart.
type Chart<'a> = (&'a str, &'a str, Vec<(&'a str, Vec<(f64, f64)>)>);

/// The SVG charts over steps: the line charts with any points, then the time split of each step.
fn step_charts(metrics: &[StepMetrics]) -> Vec<Svg> {
    let mut svgs = Vec::new();
    for (title, y, series) in line_charts(metrics) {
        let mut chart = LineChart::new(title, "step", y);
        let mut any = false;
        for (name, p) in series {
            if !p.is_empty() {
                chart = chart.series(name, p);
                any = true;
            }
        }
        if any {
            svgs.push(chart.svg());
        }
    }
    if !metrics.is_empty() {
        let rows: Vec<StackedRow> = metrics
            .iter()
            .map(|m| {
                StackedRow::new(&format!("step {}", m.step))
                    .segment("generation + grading", m.generation_s, PALETTE[0])
                    .segment("shaping", m.shaping_s, PALETTE[1])
                    .segment("training", m.training_s, PALETTE[2])
            })
            .collect();
        svgs.push(stacked_bars("Time per step (s)", &rows));
    }
    svgs
}

/// Reward, advantages, clipping, KL, entropy, response length and gradient norm per step.
fn line_charts(metrics: &[StepMetrics]) -> [Chart<'static>; 7] {
    let pts = |f: &dyn Fn(&StepMetrics) -> Option<f64>| -> Vec<(f64, f64)> {
        metrics
            .iter()
            .filter_map(|m| Some((m.step as f64, f(m)?)))
            .collect()
    };
    [
        (
            "Reward",
            "share",
            vec![
                ("reward mean", pts(&|m| Some(m.batch.reward_mean))),
                ("resolved rate", pts(&|m| Some(m.batch.resolved_rate))),
                ("masked share", pts(&|m| Some(m.batch.masked_share))),
            ],
        ),
        (
            "Advantages",
            "value",
            vec![
                ("mean", pts(&|m| Some(m.batch.advantage.mean))),
                ("std", pts(&|m| Some(m.batch.advantage.std))),
                (
                    "zero-variance groups dropped",
                    pts(&|m| Some(m.batch.advantage.dropped_zero_variance as f64)),
                ),
            ],
        ),
        (
            "Clipped tokens",
            "fraction",
            vec![
                (
                    "low (1 − ε_low)",
                    pts(&|m| update_mean(m, |u| u.metrics.clip_frac_low)),
                ),
                (
                    "high (1 + ε_high)",
                    pts(&|m| update_mean(m, |u| u.metrics.clip_frac_high)),
                ),
            ],
        ),
        (
            "Approximate KL, sampling → current policy",
            "nats per token",
            vec![(
                "approx KL",
                pts(&|m| update_mean(m, |u| u.metrics.approx_kl)),
            )],
        ),
        (
            "Entropy",
            "nats per token",
            vec![("entropy", pts(&|m| update_mean(m, |u| u.metrics.entropy)))],
        ),
        (
            "Response length",
            "loss tokens per episode",
            vec![("mean", pts(&|m| Some(m.batch.response_len_mean)))],
        ),
        (
            "Gradient norm",
            "global L2 (before clipping)",
            vec![("grad norm", pts(&|m| update_mean(m, |u| u.grad_norm)))],
        ),
    ]
}

/// One row per step: episodes, reward, stop reasons, updates and where the time went.
fn step_table(page: &mut Page, metrics: &[StepMetrics]) {
    if metrics.is_empty() {
        return;
    }
    let mut t = Table::new([
        "step",
        "episodes",
        "reward",
        "resolved",
        "masked",
        "stop reasons",
        "updates",
        "generation s",
        "training s",
        "LLM s (summed)",
        "tests s (summed)",
    ])
    .numeric([0, 1, 2, 3, 4, 6, 7, 8, 9, 10]);
    for m in metrics {
        let stops: Vec<String> = m
            .batch
            .stop_reasons
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        t.row([
            m.step.to_string(),
            m.batch.episodes.to_string(),
            number(m.batch.reward_mean, 3),
            number(m.batch.resolved_rate, 3),
            number(m.batch.masked_share, 3),
            stops.join(", "),
            m.updates.len().to_string(),
            format!("{:.1}", m.generation_s),
            format!("{:.1}", m.training_s),
            format!("{:.1}", m.rollout_time.llm_s),
            format!("{:.1}", m.rollout_time.grading_tests_s),
        ]);
    }
    page.table(&t);
}

/// The configuration and environment the run was started with.
fn settings(page: &mut Page, m: &RlRunManifest) {
    page.heading("Settings");
    page.note(&format!("configuration hash {}", m.config_hash));
    let mut t = Table::new(["setting", "value"]);
    if let Ok(Json::Object(c)) = serde_json::to_value(&m.config) {
        for (k, v) in c {
            t.row([k, v.to_string()]);
        }
    }
    if !m.environment.is_null() {
        t.row(["environment".to_string(), m.environment.to_string()]);
    }
    page.table(&t);
}

/// Write `OUT/report.html` atomically; returns its path.
pub fn write(out: &Path) -> Result<PathBuf, RlError> {
    let html = render(out)?;
    let p = out.join(REPORT_FILE);
    dojo_rundir::write_atomic(&p, html.as_bytes()).map_err(RlError::io(&p))?;
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::RlConfig;
    use crate::metrics::RolloutTime;
    use dojo_reward::group::BatchStats;

    fn step(step: u64, reward: f64) -> StepMetrics {
        StepMetrics {
            schema_version: crate::RL_SCHEMA_VERSION,
            step,
            tasks: vec!["t<1>".into()],
            batch: BatchStats {
                episodes: 4,
                reward_mean: reward,
                resolved_rate: reward,
                stop_reasons: [("submitted".to_string(), 3), ("max_steps".to_string(), 1)]
                    .into_iter()
                    .collect(),
                ..BatchStats::default()
            },
            updates: Vec::new(),
            generation_s: 30.0,
            shaping_s: 0.1,
            training_s: 6.0,
            rollout_time: RolloutTime::default(),
            rollout_report: Json::Null,
        }
    }

    #[test]
    fn renders_what_the_run_directory_holds() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path();
        let manifest = RlRunManifest {
            schema_version: crate::RL_SCHEMA_VERSION,
            config_hash: "abc".into(),
            config: RlConfig::default(),
            model: "/models/<script>".into(),
            model_fingerprint: Json::Null,
            tasks: vec!["t<1>".into()],
            environment: Json::Null,
        };
        std::fs::write(
            out.join(RUN_FILE),
            serde_json::to_string(&manifest).unwrap(),
        )
        .unwrap();
        // Two whole lines and one cut short by a kill (skipped).
        let body = format!(
            "{}\n{}\n{{\"step\":3,\"epi",
            serde_json::to_string(&step(1, 0.25)).unwrap(),
            serde_json::to_string(&step(2, 0.75)).unwrap()
        );
        std::fs::write(out.join(METRICS_FILE), body).unwrap();
        std::fs::write(
            out.join(EVAL_FILE),
            "{\"schema_version\":1,\"step\":2,\"eval\":{\"tasks\":17,\"resolved\":3,\"infrastructure_failures\":0}}\n",
        )
        .unwrap();
        let p = write(out).unwrap();
        let html = std::fs::read_to_string(p).unwrap();
        assert!(
            html.contains("/models/&lt;script&gt;"),
            "the model path is escaped"
        );
        assert!(!html.contains("<script>"));
        assert!(html.contains("Held-out evaluation"));
        assert!(html.contains("Time per step (s)"));
        assert!(html.contains("Reward"));
        // 8 episodes in 2 × 36.1 s.
        assert!(html.contains("episodes / hour"));
        assert!(html.contains("399"), "8 episodes in 72.2 s is 399 per hour");
        assert!(html.contains("submitted 3"));
        assert!(!html.contains("step 3"), "the torn line is skipped");
    }

    #[test]
    fn a_bad_line_is_shown_not_dropped() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path();
        let body = format!(
            "{}\nnot json\n{{\"step\":\"two\"}}\n{}\n",
            serde_json::to_string(&step(1, 0.25)).unwrap(),
            serde_json::to_string(&step(4, 0.75)).unwrap()
        );
        std::fs::write(out.join(METRICS_FILE), body).unwrap();
        std::fs::write(out.join(EVAL_FILE), "{\"step\":2,\n").unwrap();
        let files = load(out).unwrap();
        assert_eq!(
            files.metrics.len(),
            2,
            "the whole lines around them are read"
        );
        let bad: Vec<_> = files.bad_metrics.iter().map(|b| b.number).collect();
        assert_eq!(bad, vec![2, 3]);
        assert_eq!(files.bad_evals.len(), 1);
        let html = render_files(&files);
        assert!(html.contains("2 lines of metrics.jsonl not shown: line 2: "));
        assert!(html.contains("; line 3: "));
        assert!(html.contains("Held-out evaluation"));
        assert!(html.contains("1 line of eval.jsonl not shown: line 1: "));
        assert!(html.contains("step 4"));
    }

    #[test]
    fn an_empty_run_directory_renders() {
        let tmp = tempfile::tempdir().unwrap();
        let html = render(tmp.path()).unwrap();
        assert!(html.contains("No step finished yet."));
    }

    #[test]
    fn a_manifest_that_does_not_parse_is_an_error_naming_it() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join(RUN_FILE), "{\"schema_version\": 1, \"conf").unwrap();
        let e = render(tmp.path()).unwrap_err();
        assert!(matches!(e, RlError::InvalidState { .. }), "{e:?}");
        assert!(e.to_string().contains(RUN_FILE), "{e}");
        assert!(
            std::error::Error::source(&e).is_some(),
            "the parse error is kept"
        );
    }
}
