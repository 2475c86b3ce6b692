//! The self-contained HTML report of a run (`dojo demo`): per-task outcomes, stop reasons, steps
//! and tokens, with inline SVG plots. No JavaScript and nothing fetched: it opens offline. The
//! page, its escaping and its charts are `dojo-report`'s, shared with every stage's report; this
//! module says what a rollout report shows.

use std::collections::BTreeSet;

use dojo_report::{Page, StackedRow, Table, escape, grouped_bars, stacked_bars};

use crate::summary::{SampleOutcome, Summary};

/// One policy's part of the report.
pub struct PolicyRun<'a> {
    pub summary: &'a Summary,
    pub outcomes: &'a [SampleOutcome],
    /// Where its trajectories are (shown as text; relative to the report is best).
    pub trajectories: String,
    /// The directory (relative to the report) holding one page per trajectory, named by
    /// [`dojo_report::trajectory::page_name`]; each sample in the per-task table links there.
    pub pages: Option<String>,
}

fn stop_color(reason: &str) -> &'static str {
    match reason {
        "submitted" => "#38a169",
        "max_steps" => "#dd6b20",
        "max_tokens" => "#d69e2e",
        "timeout" => "#c05621",
        "format_errors" => "#805ad5",
        "llm_error" | "env_error" => "#e53e3e",
        _ => "#718096",
    }
}

/// Render the report. `title` and `notes` (one paragraph each) go at the top. A pure function of
/// what it is given: the caller ([`write_demo_report`]) has the runs' outcomes in memory, so
/// there is no file to load here.
pub fn render_html(title: &str, notes: &[String], runs: &[PolicyRun<'_>]) -> String {
    let mut page = Page::new(title);
    for n in notes {
        page.subtitle(n);
    }
    cards(&mut page, runs);
    summary_table(&mut page, runs);
    outcomes(&mut page, runs);
    let tasks: Vec<String> = runs
        .iter()
        .flat_map(|r| r.outcomes.iter().map(|o| o.task_id.clone()))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    steps_and_tokens(&mut page, runs, &tasks);
    per_task_table(&mut page, runs, &tasks);
    page.heading("Files").list_html(runs.iter().map(|r| {
        format!(
            "{}: <code>{}</code>",
            escape(&r.summary.policy),
            escape(&r.trajectories)
        )
    }));
    page.finish()
}

/// Each policy's resolved count and rate at a glance.
fn cards(page: &mut Page, runs: &[PolicyRun<'_>]) {
    let cards: Vec<(String, String, String)> = runs
        .iter()
        .map(|r| {
            let s = r.summary;
            (
                s.policy.clone(),
                format!("{}/{}", s.resolved, s.trajectories),
                format!(
                    "resolved · {:.0}% · {} infra error(s)",
                    100.0 * s.resolve_rate,
                    s.infra_errors
                ),
            )
        })
        .collect();
    page.cards(
        cards
            .iter()
            .map(|(a, b, c)| (a.as_str(), b.as_str(), c.as_str())),
    );
}

/// One summary row per policy.
fn summary_table(page: &mut Page, runs: &[PolicyRun<'_>]) {
    let mut summary = Table::new(crate::summary::COLUMNS).numeric(1..10);
    for r in runs {
        summary.row(r.summary.cells());
    }
    page.heading("Summary").table(&summary).note(
        "Resolve rate = resolved / (trajectories − infrastructure errors). Infrastructure errors \
         (sandbox, environment, endpoint, grader) are never counted as the model's failures. \
         Forced = submitted on the agent's behalf when a budget ran out, then graded.",
    );
}

/// Outcomes and stop reasons per policy.
fn outcomes(page: &mut Page, runs: &[PolicyRun<'_>]) {
    let outcome_rows: Vec<StackedRow> = runs
        .iter()
        .map(|r| {
            let s = r.summary;
            StackedRow::new(&s.policy)
                .segment("resolved", s.resolved as f64, "#38a169")
                .segment("unresolved", s.unresolved as f64, "#a0aec0")
                .segment("infra error", s.infra_errors as f64, "#e53e3e")
        })
        .collect();
    let stop_rows: Vec<StackedRow> = runs
        .iter()
        .map(|r| {
            r.summary
                .stop_reasons
                .iter()
                .fold(StackedRow::new(&r.summary.policy), |row, (k, v)| {
                    row.segment(k, *v as f64, stop_color(k))
                })
        })
        .collect();
    page.heading("Outcomes")
        .chart(&stacked_bars("Trajectories by outcome", &outcome_rows))
        .chart(&stacked_bars("Stop reasons", &stop_rows));
}

/// The mean of `f` over `r`'s samples of each of `tasks` (0 for a task it has none of).
fn per_task(r: &PolicyRun<'_>, tasks: &[String], f: &dyn Fn(&SampleOutcome) -> f64) -> Vec<f64> {
    tasks
        .iter()
        .map(|t| {
            let v: Vec<f64> = r
                .outcomes
                .iter()
                .filter(|o| &o.task_id == t)
                .map(f)
                .collect();
            if v.is_empty() {
                0.0
            } else {
                v.iter().sum::<f64>() / v.len() as f64
            }
        })
        .collect()
}

/// Steps and tokens per task, one bar per policy.
fn steps_and_tokens(page: &mut Page, runs: &[PolicyRun<'_>], tasks: &[String]) {
    let steps: Vec<_> = runs
        .iter()
        .map(|r| {
            (
                r.summary.policy.clone(),
                per_task(r, tasks, &|o| o.steps as f64),
            )
        })
        .collect();
    page.heading("Steps and tokens per task")
        .chart(&grouped_bars(
            "Agent steps per task (mean over samples)",
            "steps",
            tasks,
            &steps,
        ));
    let token_runs: Vec<_> = runs
        .iter()
        .filter(|r| r.summary.total_tokens > 0)
        .map(|r| {
            (
                r.summary.policy.clone(),
                per_task(r, tasks, &|o| o.tokens as f64),
            )
        })
        .collect();
    if token_runs.is_empty() {
        page.note("No policy used tokens (scripted policies only).");
    } else {
        page.chart(&grouped_bars(
            "Tokens per task (prompt + completion, mean over samples)",
            "tokens",
            tasks,
            &token_runs,
        ))
        .note("Scripted policies (gold-replay, replay) call no model and use no tokens.");
    }
}

/// Per-task table: one cell per policy, one line per sample.
fn per_task_table(page: &mut Page, runs: &[PolicyRun<'_>], tasks: &[String]) {
    let mut table =
        Table::new(std::iter::once("task").chain(runs.iter().map(|r| r.summary.policy.as_str())));
    for t in tasks {
        let mut cells = vec![format!("<code>{}</code>", escape(t))];
        for r in runs {
            let mut cell = String::new();
            for o in r.outcomes.iter().filter(|o| &o.task_id == t) {
                cell.push_str(&sample_line(r, o));
            }
            cells.push(cell);
        }
        table.row_html(cells);
    }
    page.heading("Per task").table(&table);
}

/// One sample's line in the per-task table: its outcome badge (linked to its page when `r` has
/// pages), stop reason, steps, tokens and time.
fn sample_line(r: &PolicyRun<'_>, o: &SampleOutcome) -> String {
    let (cls, word) = if o.infra_error {
        ("inf", "infra error")
    } else if o.resolved {
        ("ok", "resolved")
    } else {
        ("no", "unresolved")
    };
    let badge = format!("<span class=\"b {cls}\">{word}</span>");
    let badge = match &r.pages {
        Some(dir) => format!(
            "<a href=\"{}/{}\">{badge}</a>",
            escape(dir),
            escape(&dojo_report::trajectory::page_name(
                &o.task_id,
                o.sample_index
            ))
        ),
        None => badge,
    };
    format!(
        "<div>{badge} {}{} · {} steps · {} tok · {:.1}s</div>",
        escape(&o.stop_reason),
        if o.forced { " (forced)" } else { "" },
        o.steps,
        o.tokens,
        o.wall_secs
    )
}

/// Write `dojo demo`'s report into `out`: one page per trajectory under `DIR/pages` for each
/// run (named by its directory `DIR` under `out`), and `report.html` with `notes` and every
/// run's table; returns the report's path (canonical where it can be).
pub fn write_demo_report(
    out: &std::path::Path,
    title: &str,
    runs: &[(&crate::run_dir::RolloutOutput, &str)],
    notes: &[String],
) -> Result<std::path::PathBuf, crate::error::RolloutError> {
    use crate::error::RolloutError;
    let io = |path: &std::path::Path, e: crate::error::BoxError| RolloutError::Io {
        path: path.to_path_buf(),
        source: e,
    };
    // One page per trajectory, linked from the report's per-task table.
    for (o, dir) in runs {
        let records =
            dojo_trajectory::read_jsonl(&o.store_path).map_err(|e| io(&o.store_path, e.into()))?;
        let pages = out.join(dir).join("pages");
        dojo_report::trajectory::write_pages(&pages, &records.trajectories)
            .map_err(|e| io(&pages, e.into()))?;
    }
    let parts: Vec<PolicyRun<'_>> = runs
        .iter()
        .map(|(o, dir)| PolicyRun {
            summary: &o.summary,
            outcomes: &o.outcomes,
            trajectories: format!("{dir}/trajectories.jsonl"),
            pages: Some(format!("{dir}/pages")),
        })
        .collect();
    let html = render_html(title, notes, &parts);
    let report = out.join("report.html");
    dojo_rundir::write_atomic(&report, html.as_bytes()).map_err(|e| io(&report, e.into()))?;
    Ok(std::fs::canonicalize(&report).unwrap_or(report))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn o(
        t: &str,
        resolved: bool,
        infra: bool,
        stop: &str,
        steps: u32,
        tokens: u64,
    ) -> SampleOutcome {
        SampleOutcome {
            task_id: t.into(),
            sample_index: 0,
            resolved,
            infra_error: infra,
            stop_reason: stop.into(),
            forced: stop == "max_steps",
            steps,
            tokens,
            wall_secs: 2.0,
            patch: String::new(),
        }
    }

    #[test]
    fn report_is_self_contained_and_escapes() {
        let gold = vec![
            o("a<b>", true, false, "submitted", 6, 0),
            o("c", true, false, "submitted", 5, 0),
        ];
        let model = vec![
            o("a<b>", false, false, "max_steps", 8, 5000),
            o("c", false, true, "env_error", 1, 10),
        ];
        let (sg, sm) = (
            Summary::new("gold-replay", &gold),
            Summary::new("embedded:default", &model),
        );
        let html = render_html(
            "dojo demo",
            &["note & more".into()],
            &[
                PolicyRun {
                    summary: &sg,
                    outcomes: &gold,
                    trajectories: "gold/trajectories.jsonl".into(),
                    pages: Some("gold/pages".into()),
                },
                PolicyRun {
                    summary: &sm,
                    outcomes: &model,
                    trajectories: "m/trajectories.jsonl".into(),
                    pages: None,
                },
            ],
        );
        assert!(html.contains("a&lt;b&gt;") && !html.contains("a<b>"));
        assert!(html.contains("note &amp; more"));
        assert!(
            !html.contains("<script") && !html.contains("http://") && !html.contains("https://")
        );
        assert_eq!(html.matches("<svg").count(), 4);
        assert!(html.contains("infra error"));
        // Gold samples link to their pages; the model's run has none.
        assert!(html.contains("<a href=\"gold/pages/c.0.html\">"));
        assert_eq!(html.matches("<a href=").count(), gold.len());
    }

    #[test]
    fn demo_report_is_written_with_a_page_dir_per_run() {
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().join("gold").join("trajectories.jsonl");
        std::fs::create_dir_all(store.parent().unwrap()).unwrap();
        std::fs::write(&store, "").unwrap();
        let o = crate::run_dir::RolloutOutput {
            summary: Summary::new("gold-replay", &[]),
            outcomes: vec![],
            stats: Default::default(),
            recovery: Default::default(),
            store_path: store,
            predictions: vec![],
            drift: None,
        };
        let notes = ["a note".to_string()];
        let report = write_demo_report(dir.path(), "t", &[(&o, "gold")], &notes).unwrap();
        assert!(report.ends_with("report.html"));
        assert!(std::fs::read_to_string(&report).unwrap().contains("a note"));
    }
}
