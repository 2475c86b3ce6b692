//! `OUT/report.html`: a training run at a glance, from the files the run leaves.
//!
//! Built only from `run.json`, `metrics.jsonl` and (after the evaluation hook) `eval.json`, so
//! it can be rewritten at any time and always shows what is on disk: written at every
//! checkpoint and at the end, atomically (a reader never sees half a page). Charts are
//! dojo-report's line charts: loss, learning rate, gradient norm and tokens/s over optimizer
//! steps; the evaluation table shows base vs trained resolve rates with 95% Wilson intervals.
//! A metrics line that does not parse (one cut short by a kill) is left out of the curves and
//! named in a note on the page.

use std::path::{Path, PathBuf};

use dojo_report::{LineChart, Page, Table, number};
use dojo_rundir::BadLine;
use serde_json::Value as Json;

use crate::TrainError;

/// The report's file name inside `OUT`.
pub const REPORT_FILE: &str = "report.html";
/// The evaluation hook's result file inside `OUT`.
pub const EVAL_FILE: &str = "eval.json";

fn read_json(path: &Path) -> Result<Option<Json>, TrainError> {
    match std::fs::read_to_string(path) {
        Ok(s) => serde_json::from_str(&s)
            .map(Some)
            .map_err(|source| TrainError::Json {
                path: path.to_path_buf(),
                source,
            }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(TrainError::file(path, e)),
    }
}

fn series(metrics: &[Json], key: &str) -> Vec<(f64, f64)> {
    metrics
        .iter()
        .filter_map(|m| Some((m.get("step")?.as_f64()?, m.get(key)?.as_f64()?)))
        .collect()
}

fn text(v: Option<&Json>) -> String {
    match v {
        None | Some(Json::Null) => "-".into(),
        Some(Json::String(s)) => s.clone(),
        Some(v) => v.to_string(),
    }
}

/// The run directory's files as the report reads them: [`load`] reads, [`render_files`] draws.
#[derive(Debug, Default)]
pub struct RunFiles {
    /// `run.json` (`Null` before the run wrote it).
    pub run: Json,
    /// The lines of `metrics.jsonl` that parse.
    pub metrics: Vec<Json>,
    /// The lines of `metrics.jsonl` that do not (a tail cut short by a kill): shown on the page,
    /// not dropped.
    pub bad_metrics: Vec<BadLine>,
    /// `eval.json`, after the evaluation hook.
    pub eval: Option<Json>,
}

/// Read the files of the run in `out`; a file not written yet reads as empty.
pub fn load(out: &Path) -> Result<RunFiles, TrainError> {
    let run = read_json(&out.join("run.json"))?.unwrap_or(Json::Null);
    let metrics = dojo_rundir::read_records(out.join("metrics.jsonl"))?.unwrap_or_default();
    let eval = read_json(&out.join(EVAL_FILE))?;
    Ok(RunFiles {
        run,
        metrics: metrics.records,
        bad_metrics: metrics.bad,
        eval,
    })
}

/// Render the report of the run in `out` (as HTML text).
pub fn render(out: &Path) -> Result<String, TrainError> {
    Ok(render_files(&load(out)?))
}

/// The page of `files`: the same files give the same bytes.
pub fn render_files(files: &RunFiles) -> String {
    let mut page = Page::new("dojo train sft");
    page.subtitle(&subtitle(&files.run));
    cards(&mut page, &files.metrics);
    if let Some(e) = &files.eval {
        eval_table(&mut page, e);
    }
    curves(&mut page, &files.metrics, &files.bad_metrics);
    settings(&mut page, &files.run);
    page.finish()
}

/// The source model, the data and the kind of fine-tuning.
fn subtitle(run: &Json) -> String {
    let lora = run.pointer("/config/lora").filter(|v| !v.is_null());
    format!(
        "{} on {} ({})",
        text(run.get("source")),
        text(run.pointer("/data/path")),
        match lora {
            Some(l) => format!(
                "LoRA r={} alpha={} on {}",
                text(l.get("rank")),
                text(l.get("alpha")),
                l.get("targets")
                    .and_then(Json::as_array)
                    .map(|a| a
                        .iter()
                        .map(|t| text(Some(t)))
                        .collect::<Vec<_>>()
                        .join(","))
                    .unwrap_or_default()
            ),
            None => "full fine-tuning".into(),
        }
    )
}

/// Steps, loss and throughput at a glance.
fn cards(page: &mut Page, metrics: &[Json]) {
    let last = metrics.last();
    let steps = last.and_then(|m| m.get("step")).and_then(Json::as_u64);
    let loss = |m: Option<&Json>| {
        m.and_then(|m| m.get("loss")?.as_f64())
            .map_or("-".into(), |l| number(l, 4))
    };
    let mut tps: Vec<f64> = metrics
        .iter()
        .filter_map(|m| m.get("tokens_per_s")?.as_f64())
        .collect();
    tps.sort_by(f64::total_cmp);
    let median_tps = tps
        .get(tps.len() / 2)
        .map_or("-".into(), |t| number(t.round(), 0));
    let steps_s = steps.map_or("0".into(), |s| s.to_string());
    let first_loss = loss(metrics.first());
    let last_loss = loss(last);
    let elapsed = last
        .and_then(|m| m.get("elapsed_s")?.as_f64())
        .map_or("-".into(), |s| format!("{s:.0} s"));
    let first_detail = format!("first step: {first_loss}");
    page.cards([
        ("optimizer steps", steps_s.as_str(), elapsed.as_str()),
        ("last loss", last_loss.as_str(), first_detail.as_str()),
        (
            "tokens/s (median step)",
            median_tps.as_str(),
            "forward + backward",
        ),
    ]);
}

/// Base vs trained resolve rates of the evaluation hook's `eval.json`.
fn eval_table(page: &mut Page, e: &Json) {
    page.heading("Evaluation: base vs trained");
    page.note(&format!(
        "{} held-out tasks from {}, rolled out through dojo rollout's path with the embedded \
         engine ({} steps at most per rollout) and graded. Resolved with its 95% Wilson \
         interval; valid tool calls: the share of agent turns whose action parsed into a \
         tool call.",
        text(e.get("n_tasks")),
        text(e.get("tasks")),
        text(e.get("max_steps")),
    ));
    let mut t = Table::new([
        "model",
        "resolved",
        "rate",
        "95% CI",
        "valid tool calls",
        "turns",
        "infra errors",
    ])
    .numeric(1..7);
    for m in e
        .get("models")
        .and_then(Json::as_array)
        .into_iter()
        .flatten()
    {
        let pct = |v: Option<f64>| v.map_or("-".into(), |x| format!("{:.1}%", 100.0 * x));
        let f = |k: &str| m.get(k).and_then(Json::as_f64);
        t.row([
            text(m.get("label")),
            format!("{}/{}", text(m.get("resolved")), text(m.get("n"))),
            pct(f("resolve_rate")),
            match (f("ci95_low"), f("ci95_high")) {
                (Some(a), Some(b)) => format!("{:.1}–{:.1}%", 100.0 * a, 100.0 * b),
                _ => "-".into(),
            },
            pct(f("valid_tool_call_share")),
            text(m.get("turns")),
            text(m.get("infra_errors")),
        ]);
    }
    page.table(&t);
}

/// Loss, learning rate, gradient norm and throughput over optimizer steps, and the metrics
/// lines that could not be read.
fn curves(page: &mut Page, metrics: &[Json], bad: &[BadLine]) {
    page.heading("Training curves");
    if metrics.is_empty() {
        page.note("No optimizer step yet.");
    }
    if let Some(note) = dojo_rundir::lines::bad_lines_note("metrics.jsonl", bad) {
        page.note(&note);
    }
    for (title, key, y) in [
        ("Loss", "loss", "mean cross-entropy"),
        ("Learning rate", "lr", "lr"),
        (
            "Gradient norm (before clipping)",
            "grad_norm",
            "global L2 norm",
        ),
        ("Throughput", "tokens_per_s", "tokens/s"),
    ] {
        let pts = series(metrics, key);
        if !pts.is_empty() {
            page.chart(
                &LineChart::new(title, "optimizer step", y)
                    .series(key, pts)
                    .svg(),
            );
        }
    }
}

/// The configuration, the data report and the model, as `run.json` has them.
fn settings(page: &mut Page, run: &Json) {
    page.heading("Settings");
    let mut t = Table::new(["setting", "value"]);
    if let Some(Json::Object(c)) = run.get("config") {
        for (k, v) in c {
            t.row([k.clone(), text(Some(v))]);
        }
    }
    if let Some(r) = run.pointer("/data/report") {
        t.row(["data".to_string(), r.to_string()]);
    }
    if let Some(m) = run.get("model") {
        t.row(["model".to_string(), m.to_string()]);
    }
    page.table(&t);
}

/// Write `OUT/report.html` atomically; returns its path.
pub fn write(out: &Path) -> Result<PathBuf, TrainError> {
    let html = render(out)?;
    let p = out.join(REPORT_FILE);
    dojo_rundir::write_atomic(&p, html.as_bytes()).map_err(|e| TrainError::file(&p, e))?;
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_curves_settings_and_eval_escaped() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path();
        std::fs::write(
            out.join("run.json"),
            serde_json::json!({
                "source": "/models/<script>alert(1)</script>",
                "data": {"path": "a&b/tokens.parquet", "report": {"rows": 3}},
                "config": {"lr": 0.01, "lora": {"rank": 4, "alpha": 8.0, "targets": ["q", "v"]}},
            })
            .to_string(),
        )
        .unwrap();
        let lines: String = (1..=5)
            .map(|s| {
                format!(
                    "{}\n",
                    serde_json::json!({"step": s, "loss": 3.0 / s as f64, "lr": 0.01,
                        "grad_norm": 1.5, "tokens_per_s": 100.0 * s as f64, "elapsed_s": s})
                )
            })
            .collect();
        // A line cut short by a kill is skipped.
        std::fs::write(out.join("metrics.jsonl"), lines + "{\"step\": 6, \"lo").unwrap();
        std::fs::write(
            out.join(EVAL_FILE),
            serde_json::json!({"tasks": "t.jsonl", "n_tasks": 2, "max_steps": 3, "models": [
                {"label": "base <b>", "resolved": 0, "n": 2, "resolve_rate": 0.0,
                 "ci95_low": 0.0, "ci95_high": 0.658, "valid_tool_call_share": 0.25, "turns": 4},
                {"label": "trained", "resolved": 1, "n": 2, "resolve_rate": 0.5,
                 "ci95_low": 0.095, "ci95_high": 0.905, "valid_tool_call_share": 1.0, "turns": 3},
            ]})
            .to_string(),
        )
        .unwrap();
        let p = write(out).unwrap();
        let html = std::fs::read_to_string(p).unwrap();
        assert!(html.starts_with("<!doctype html>"));
        assert!(
            !html.contains("<script>") && !html.contains("<b>"),
            "escaped"
        );
        assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
        assert!(html.contains("a&amp;b/tokens.parquet"));
        assert!(html.contains("base &lt;b&gt;"));
        assert_eq!(
            html.matches("<svg").count(),
            4,
            "loss, lr, grad norm, tokens/s"
        );
        assert!(html.contains("Loss") && html.contains("Throughput"));
        assert!(html.contains("LoRA r=4 alpha=8.0 on q,v"));
        assert!(html.contains("1/2") && html.contains("9.5–90.5%"));
        assert!(html.contains("0.6000"), "last loss");
        // No leftover temporary file.
        let names: Vec<_> = std::fs::read_dir(out).unwrap().collect();
        assert_eq!(names.len(), 4);
    }

    #[test]
    fn a_bad_line_is_shown_not_dropped() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path();
        std::fs::write(
            out.join("metrics.jsonl"),
            "{\"step\": 1, \"loss\": 2.0}\n{\"step\": 2, \"loss\"\n{\"step\": 3, \"loss\": 0.75}\n",
        )
        .unwrap();
        let files = load(out).unwrap();
        assert_eq!(files.metrics.len(), 2, "the whole lines around it are read");
        assert_eq!(files.bad_metrics.len(), 1);
        assert_eq!(files.bad_metrics[0].number, 2);
        assert!(!files.bad_metrics[0].torn);
        let html = render_files(&files);
        assert!(
            html.contains("1 line of metrics.jsonl not shown: line 2: "),
            "the bad line is named"
        );
        assert!(html.contains("0.7500"), "the line after it is read");
    }

    #[test]
    fn an_empty_run_renders() {
        let tmp = tempfile::tempdir().unwrap();
        let html = render(tmp.path()).unwrap();
        assert!(html.contains("No optimizer step yet."));
    }
}
