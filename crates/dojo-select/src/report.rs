//! `report.html` of `dojo select`: the selector table, the pass@k / best@k curves and every
//! task's choice with the scores that made it.

use dojo_report::{LineChart, Page, Table, escape, number};

use crate::output::{CurvePoint, SelectOutput, SelectorResult};

fn pct(v: f64) -> String {
    format!("{:.1}%", 100.0 * v)
}

fn with_interval(p: &CurvePoint) -> String {
    format!(
        "{} [{}, {}]",
        pct(p.estimate.mean),
        pct(p.estimate.low),
        pct(p.estimate.high)
    )
}

fn points(curve: &[CurvePoint]) -> Vec<(f64, f64)> {
    curve
        .iter()
        .map(|p| (p.k as f64, 100.0 * p.estimate.mean))
        .collect()
}

/// The page of `out`: the same output gives the same bytes. It reads no file: `out` is the
/// selection [`crate::run`] just computed, so there is nothing to load or to find unreadable here
/// (records it could not read are already in `out.problems`, shown at the end).
pub fn render(out: &SelectOutput) -> String {
    let mut page = Page::new("dojo select");
    page.subtitle(&subtitle(out));
    cards(&mut page, out);
    notes(&mut page, out);
    selectors(&mut page, out);
    sequential(&mut page, out);
    for s in &out.selectors {
        choices(&mut page, s);
    }
    if !out.problems.is_empty() {
        page.heading("Unreadable records");
        page.preformatted(&out.problems);
    }
    page.finish()
}

/// Tasks, k, seed, and whether a run directory was still being written.
fn subtitle(out: &SelectOutput) -> String {
    format!(
        "{} tasks, k = {}, seed {}{}",
        out.tasks,
        out.k,
        out.seed,
        if out.partial {
            " — PARTIAL: a run directory was still being written or was interrupted"
        } else {
            ""
        }
    )
}

/// pass@1, pass@k and the candidates left out, at a glance.
fn cards(page: &mut Page, out: &SelectOutput) {
    let pass1 = out.pass_at_k.first().map(with_interval).unwrap_or_default();
    let pass_k = out.pass_at_k.last().map(with_interval).unwrap_or_default();
    let left_out = format!(
        "{} infrastructure failures left out, {} ungraded",
        out.infra_left_out, out.ungraded
    );
    page.cards([
        (
            "pass@1",
            pass1.as_str(),
            "unbiased estimator, 95% bootstrap",
        ),
        ("pass@k", pass_k.as_str(), "any candidate resolves"),
        ("candidates", &out.k.to_string(), left_out.as_str()),
    ]);
}

/// The selection's notes and the tasks with fewer than k candidates.
fn notes(page: &mut Page, out: &SelectOutput) {
    for n in &out.notes {
        page.note(n);
    }
    if !out.tasks_short.is_empty() {
        page.note(&format!(
            "{} task(s) have fewer than k = {} candidates and are left out of the points they \
             cannot reach: {}",
            out.tasks_short.len(),
            out.k,
            out.tasks_short
                .iter()
                .map(|(t, n)| format!("{t} ({n})"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
}

/// The selector table (pass@k as the first row) and the pass@k / best@k chart.
fn selectors(page: &mut Page, out: &SelectOutput) {
    page.heading("Selectors");
    let mut header = vec!["selector".to_string()];
    header.extend((1..=out.k).map(|k| format!("k={k}")));
    header.extend([
        "gap closed".into(),
        "scoring s / task".into(),
        "selection ms / task".into(),
    ]);
    let mut table = Table::new(header).numeric(1..out.k + 4);
    let mut pass_row = vec!["pass@k".to_string()];
    pass_row.extend(out.pass_at_k.iter().map(with_interval));
    pass_row.extend(["100%".into(), "–".into(), "–".into()]);
    table.row(pass_row);
    for s in &out.selectors {
        let mut row = vec![if s.reference {
            format!("{} (reference)", s.name)
        } else {
            s.name.clone()
        }];
        row.extend(s.best_at_k.iter().map(with_interval));
        row.push(s.gap_closed.map_or("–".into(), pct));
        row.push(if s.precompute_seconds_per_task > 0.0 {
            number(s.precompute_seconds_per_task, 2)
        } else {
            "–".into()
        });
        row.push(number(1000.0 * s.seconds_per_task, 2));
        table.row(row);
    }
    page.table(&table);
    page.note(
        "best@k: the expected resolve rate when the selector sees k of a task's candidates \
         (every k-subset, or 256 seeded ones), ties at the exact expectation. Gap closed: \
         (best@K − pass@1) / (pass@K − pass@1). Scoring: computing the scores beforehand \
         (model calls, sandboxed test runs); selection: the choices and every best@k point.",
    );
    let mut chart = LineChart::new("Resolved by number of candidates", "k", "resolved %")
        .series("pass@k", points(&out.pass_at_k));
    for s in &out.selectors {
        if !s.reference {
            chart = chart.series(&s.name, points(&s.best_at_k));
        }
    }
    page.chart(&chart.svg());
}

/// pass@1 and pass@k by turn budget, as a chart and a table.
fn sequential(page: &mut Page, out: &SelectOutput) {
    page.heading("Sequential scaling: resolved by turn budget");
    let seq = &out.sequential;
    if seq.points.is_empty() {
        page.note("No candidate has recorded steps (predictions files carry none).");
    } else {
        let chart = LineChart::new(
            "Resolved by turn budget",
            "agent steps allowed",
            "resolved %",
        )
        .series(
            "pass@1",
            seq.points
                .iter()
                .map(|p| (p.budget as f64, 100.0 * p.pass_at_1.mean))
                .collect(),
        )
        .series(
            &format!("pass@{}", out.k),
            seq.points
                .iter()
                .map(|p| (p.budget as f64, 100.0 * p.pass_at_k))
                .collect(),
        );
        page.chart(&chart.svg());
        let mut t = Table::new(["steps allowed", "pass@1", "pass@k"]).numeric(1..3);
        for p in &seq.points {
            t.row([
                p.budget.to_string(),
                format!(
                    "{} [{}, {}]",
                    pct(p.pass_at_1.mean),
                    pct(p.pass_at_1.low),
                    pct(p.pass_at_1.high)
                ),
                pct(p.pass_at_k),
            ]);
        }
        page.table(&t);
        page.note(
            "A resolved rollout counts from the last step that could have changed its workspace \
             (an edit, or a shell command naming a changed file): trajectories record actions, \
             not the workspace after each step, so this is a lower bound, exact at the full \
             budget.",
        );
    }
    if seq.without_steps > 0 {
        page.note(&format!(
            "{} candidate(s) without recorded steps are left out of this curve.",
            seq.without_steps
        ));
    }
}

/// Every task's choice by selector `s`, with the scores that made it.
fn choices(page: &mut Page, s: &SelectorResult) {
    page.heading(&format!("Choices of {}", s.name));
    let mut t = Table::new([
        "task",
        "chosen",
        "resolved",
        "ties",
        "scores (label: score ✓ resolved)",
    ]);
    for c in &s.choices {
        let scores = c
            .candidates
            .iter()
            .map(|x| {
                format!(
                    "<a href=\"{}\">{}</a>: {}{}{}",
                    escape(&x.page),
                    escape(&x.label),
                    number(x.score, 3),
                    if x.resolved { " ✓" } else { "" },
                    if x.empty { " (empty)" } else { "" }
                )
            })
            .collect::<Vec<_>>()
            .join(", ");
        t.row_html([
            escape(&c.task_id),
            escape(&c.chosen),
            if c.resolved {
                "yes".into()
            } else {
                "no".into()
            },
            c.ties.to_string(),
            scores,
        ]);
    }
    page.table(&t);
}
