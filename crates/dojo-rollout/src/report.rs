//! The self-contained HTML report of a run (`dojo demo`): per-task outcomes, stop reasons, steps
//! and tokens, with inline SVG plots. No JavaScript and nothing fetched: it opens offline.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use crate::summary::{SampleOutcome, Summary};

/// One policy's part of the report.
pub struct PolicyRun<'a> {
    pub summary: &'a Summary,
    pub outcomes: &'a [SampleOutcome],
    /// Where its trajectories are (shown as text; relative to the report is best).
    pub trajectories: String,
}

fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

const PALETTE: [&str; 6] = [
    "#2b6cb0", "#dd6b20", "#38a169", "#805ad5", "#d53f8c", "#718096",
];

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

/// Horizontal stacked bars: one row per label, segments (name, value, color).
/// One bar: its label and its (segment name, value, colour) parts.
type BarRow = (String, Vec<(String, f64, String)>);

fn stacked_bars(title: &str, rows: &[BarRow]) -> String {
    let (w, row_h, left, top) = (720.0, 26.0, 190.0, 30.0);
    let legend: BTreeMap<&str, &str> = rows
        .iter()
        .flat_map(|(_, segs)| segs.iter().map(|(n, _, c)| (n.as_str(), c.as_str())))
        .collect();
    let h = top + rows.len() as f64 * (row_h + 8.0) + 40.0;
    let max = rows
        .iter()
        .map(|(_, s)| s.iter().map(|x| x.1).sum::<f64>())
        .fold(0.0, f64::max)
        .max(1.0);
    let scale = (w - left - 60.0) / max;
    let mut s = format!(
        r#"<svg class="plot" viewBox="0 0 {w} {h}" width="{w}" height="{h}" role="img" aria-label="{t}"><text x="0" y="18" class="pt">{t}</text>"#,
        t = esc(title)
    );
    for (i, (label, segs)) in rows.iter().enumerate() {
        let y = top + i as f64 * (row_h + 8.0);
        let _ = write!(
            s,
            r#"<text x="{}" y="{}" text-anchor="end" class="pl">{}</text>"#,
            left - 8.0,
            y + row_h * 0.68,
            esc(label)
        );
        let mut x = left;
        for (name, v, color) in segs {
            if *v <= 0.0 {
                continue;
            }
            let bw = v * scale;
            let _ = write!(
                s,
                r#"<rect x="{x:.1}" y="{y:.1}" width="{bw:.1}" height="{row_h}" fill="{color}"><title>{}: {v}</title></rect>"#,
                esc(name)
            );
            if bw > 18.0 {
                let _ = write!(
                    s,
                    r#"<text x="{:.1}" y="{:.1}" text-anchor="middle" class="pv">{v}</text>"#,
                    x + bw / 2.0,
                    y + row_h * 0.68
                );
            }
            x += bw;
        }
    }
    let mut lx = left;
    let ly = h - 14.0;
    for (name, color) in legend {
        let _ = write!(
            s,
            r#"<rect x="{lx:.1}" y="{:.1}" width="12" height="12" fill="{color}"/><text x="{:.1}" y="{ly:.1}" class="pl">{}</text>"#,
            ly - 10.0,
            lx + 16.0,
            esc(name)
        );
        lx += 24.0 + 7.5 * name.len() as f64;
    }
    s.push_str("</svg>");
    s
}

/// Grouped vertical bars: x = task, one bar per policy.
fn grouped_bars(
    title: &str,
    unit: &str,
    tasks: &[String],
    series: &[(String, Vec<f64>)],
) -> String {
    // Task labels are drawn rotated by 40° and end under their bar, so a long first label
    // reaches left of the plot: widen the left margin to fit it (≈6 px a character at this size).
    let label = |t: &str| -> String {
        if t.chars().count() > 28 {
            t.chars().take(27).chain(['…']).collect()
        } else {
            t.to_string()
        }
    };
    let first_label = tasks.first().map_or(0, |t| label(t).chars().count()) as f64;
    let (w, h, bottom, top) = (900.0, 345.0, 135.0, 30.0);
    let group_w0 = (w - 70.0) / tasks.len().max(1) as f64;
    let left = f64::max(60.0, 6.0 * first_label * 0.77 - group_w0 * 0.5 + 8.0);
    let max = series
        .iter()
        .flat_map(|(_, v)| v.iter().copied())
        .fold(0.0, f64::max)
        .max(1.0);
    let plot_h = h - bottom - top;
    let group_w = (w - left - 10.0) / tasks.len().max(1) as f64;
    let bar_w = (group_w * 0.8) / series.len().max(1) as f64;
    let mut s = format!(
        r#"<svg class="plot" viewBox="0 0 {w} {h}" width="{w}" height="{h}" role="img" aria-label="{t}"><text x="0" y="18" class="pt">{t}</text>"#,
        t = esc(title)
    );
    for k in 0..=4 {
        let v = max * k as f64 / 4.0;
        let y = top + plot_h - plot_h * k as f64 / 4.0;
        let _ = write!(
            s,
            r##"<line x1="{left}" x2="{}" y1="{y:.1}" y2="{y:.1}" stroke="#e2e8f0"/><text x="{}" y="{:.1}" text-anchor="end" class="pl">{}</text>"##,
            w - 10.0,
            left - 6.0,
            y + 4.0,
            if max >= 100.0 {
                format!("{v:.0}")
            } else {
                format!("{v:.1}")
            }
        );
    }
    let _ = write!(
        s,
        r#"<text x="12" y="{:.1}" class="pl" transform="rotate(-90 12 {:.1})">{}</text>"#,
        top + plot_h / 2.0,
        top + plot_h / 2.0,
        esc(unit)
    );
    for (ti, task) in tasks.iter().enumerate() {
        let gx = left + ti as f64 * group_w + group_w * 0.1;
        for (si, (name, vals)) in series.iter().enumerate() {
            let v = vals.get(ti).copied().unwrap_or(0.0);
            let bh = plot_h * v / max;
            let _ = write!(
                s,
                r#"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="{bh:.1}" fill="{}"><title>{} · {}: {v}</title></rect>"#,
                gx + si as f64 * bar_w,
                top + plot_h - bh,
                bar_w.max(1.0),
                PALETTE[si % PALETTE.len()],
                esc(task),
                esc(name)
            );
        }
        let cx = gx + group_w * 0.4;
        let _ = write!(
            s,
            r#"<text x="{cx:.1}" y="{:.1}" class="pl tick" transform="rotate(-40 {cx:.1} {:.1})" text-anchor="end">{}</text>"#,
            top + plot_h + 14.0,
            top + plot_h + 14.0,
            esc(&label(task))
        );
    }
    let mut lx = left;
    for (si, (name, _)) in series.iter().enumerate() {
        let _ = write!(
            s,
            r#"<rect x="{lx:.1}" y="{:.1}" width="12" height="12" fill="{}"/><text x="{:.1}" y="{:.1}" class="pl">{}</text>"#,
            h - 16.0,
            PALETTE[si % PALETTE.len()],
            lx + 16.0,
            h - 6.0,
            esc(name)
        );
        lx += 30.0 + 7.5 * name.len() as f64;
    }
    s.push_str("</svg>");
    s
}

const CSS: &str = r#"
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:2rem auto;max-width:1000px;color:#1a202c;padding:0 1rem}
h1{font-size:1.6rem;margin-bottom:.2rem}h2{font-size:1.2rem;margin-top:2rem;border-bottom:1px solid #e2e8f0;padding-bottom:.3rem}
.sub{color:#4a5568;margin-top:0}
table{border-collapse:collapse;width:100%;font-size:.9rem;margin:.6rem 0}
th,td{border-bottom:1px solid #e2e8f0;padding:.35rem .5rem;text-align:left;vertical-align:top}
th{background:#f7fafc;font-weight:600}td.n{text-align:right;font-variant-numeric:tabular-nums}
.b{display:inline-block;padding:.05rem .45rem;border-radius:.6rem;font-size:.8rem;font-weight:600;color:#fff}
.ok{background:#38a169}.no{background:#a0aec0}.inf{background:#e53e3e}
.plot{display:block;margin:1rem 0;max-width:100%;height:auto}
.pt{font-weight:600;font-size:14px}.pl{font-size:12px;fill:#2d3748}.pv{font-size:11px;fill:#fff;font-weight:600}
.note{color:#4a5568;font-size:.85rem}code{background:#f7fafc;padding:0 .2rem}
.cards{display:flex;gap:1rem;flex-wrap:wrap}.card{border:1px solid #e2e8f0;border-radius:.5rem;padding:.7rem 1rem;min-width:200px}
.card .big{font-size:1.8rem;font-weight:700}
"#;

/// Render the report. `title` and `notes` (one paragraph each) go at the top.
pub fn render_html(title: &str, notes: &[String], runs: &[PolicyRun<'_>]) -> String {
    let mut h = String::new();
    let _ = write!(
        h,
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width,initial-scale=1\"><title>{t}</title><style>{CSS}</style></head><body><h1>{t}</h1>",
        t = esc(title)
    );
    for n in notes {
        let _ = write!(h, "<p class=\"sub\">{}</p>", esc(n));
    }

    h.push_str("<div class=\"cards\">");
    for r in runs {
        let s = r.summary;
        let _ = write!(
            h,
            "<div class=\"card\"><div>{}</div><div class=\"big\">{}/{}</div><div class=\"note\">resolved · {:.0}% · {} infra error(s)</div></div>",
            esc(&s.policy),
            s.resolved,
            s.trajectories,
            100.0 * s.resolve_rate,
            s.infra_errors
        );
    }
    h.push_str("</div><h2>Summary</h2><table><tr><th>policy</th><th>trajectories</th><th>resolved</th><th>resolve rate</th><th>pass@k</th><th>infra errors</th><th>forced</th><th>mean steps</th><th>tokens</th><th>mean wall s</th><th>stop reasons</th></tr>");
    for r in runs {
        let s = r.summary;
        let _ = write!(
            h,
            "<tr><td>{}</td><td class=n>{}</td><td class=n>{}</td><td class=n>{:.1}%</td><td class=n>{:.1}%</td><td class=n>{}</td><td class=n>{}</td><td class=n>{:.1}</td><td class=n>{}</td><td class=n>{:.1}</td><td>{}</td></tr>",
            esc(&s.policy),
            s.trajectories,
            s.resolved,
            100.0 * s.resolve_rate,
            100.0 * s.pass_at_k,
            s.infra_errors,
            s.forced,
            s.mean_steps,
            s.total_tokens,
            s.mean_wall_secs,
            esc(&s.stop_reasons_text())
        );
    }
    h.push_str("</table><p class=\"note\">Resolve rate = resolved / (trajectories − infrastructure errors). Infrastructure errors (sandbox, environment, endpoint, grader) are never counted as the model's failures. Forced = submitted on the agent's behalf when a budget ran out, then graded.</p>");

    // Outcomes and stop reasons per policy.
    let outcome_rows: Vec<_> = runs
        .iter()
        .map(|r| {
            let s = r.summary;
            (
                s.policy.clone(),
                vec![
                    (
                        "resolved".to_string(),
                        s.resolved as f64,
                        "#38a169".to_string(),
                    ),
                    (
                        "unresolved".to_string(),
                        s.unresolved as f64,
                        "#a0aec0".to_string(),
                    ),
                    (
                        "infra error".to_string(),
                        s.infra_errors as f64,
                        "#e53e3e".to_string(),
                    ),
                ],
            )
        })
        .collect();
    h.push_str("<h2>Outcomes</h2>");
    h.push_str(&stacked_bars("Trajectories by outcome", &outcome_rows));
    let stop_rows: Vec<_> = runs
        .iter()
        .map(|r| {
            (
                r.summary.policy.clone(),
                r.summary
                    .stop_reasons
                    .iter()
                    .map(|(k, v)| (k.clone(), *v as f64, stop_color(k).to_string()))
                    .collect(),
            )
        })
        .collect();
    h.push_str(&stacked_bars("Stop reasons", &stop_rows));

    // Steps and tokens per task.
    let tasks: Vec<String> = runs
        .iter()
        .flat_map(|r| r.outcomes.iter().map(|o| o.task_id.clone()))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let per_task = |r: &PolicyRun<'_>, f: &dyn Fn(&SampleOutcome) -> f64| -> Vec<f64> {
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
    };
    let steps: Vec<_> = runs
        .iter()
        .map(|r| (r.summary.policy.clone(), per_task(r, &|o| o.steps as f64)))
        .collect();
    h.push_str("<h2>Steps and tokens per task</h2>");
    h.push_str(&grouped_bars(
        "Agent steps per task (mean over samples)",
        "steps",
        &tasks,
        &steps,
    ));
    let token_runs: Vec<_> = runs
        .iter()
        .filter(|r| r.summary.total_tokens > 0)
        .map(|r| (r.summary.policy.clone(), per_task(r, &|o| o.tokens as f64)))
        .collect();
    if token_runs.is_empty() {
        h.push_str("<p class=\"note\">No policy used tokens (scripted policies only).</p>");
    } else {
        h.push_str(&grouped_bars(
            "Tokens per task (prompt + completion, mean over samples)",
            "tokens",
            &tasks,
            &token_runs,
        ));
        h.push_str("<p class=\"note\">Scripted policies (gold-replay, replay) call no model and use no tokens.</p>");
    }

    // Per-task table.
    h.push_str("<h2>Per task</h2><table><tr><th>task</th>");
    for r in runs {
        let _ = write!(h, "<th>{}</th>", esc(&r.summary.policy));
    }
    h.push_str("</tr>");
    for t in &tasks {
        let _ = write!(h, "<tr><td><code>{}</code></td>", esc(t));
        for r in runs {
            h.push_str("<td>");
            for o in r.outcomes.iter().filter(|o| &o.task_id == t) {
                let (cls, word) = if o.infra_error {
                    ("inf", "infra error")
                } else if o.resolved {
                    ("ok", "resolved")
                } else {
                    ("no", "unresolved")
                };
                let _ = write!(
                    h,
                    "<div><span class=\"b {cls}\">{word}</span> {}{} · {} steps · {} tok · {:.1}s</div>",
                    esc(&o.stop_reason),
                    if o.forced { " (forced)" } else { "" },
                    o.steps,
                    o.tokens,
                    o.wall_secs
                );
            }
            h.push_str("</td>");
        }
        h.push_str("</tr>");
    }
    h.push_str("</table><h2>Files</h2><ul>");
    for r in runs {
        let _ = write!(
            h,
            "<li>{}: <code>{}</code></li>",
            esc(&r.summary.policy),
            esc(&r.trajectories)
        );
    }
    h.push_str("</ul></body></html>\n");
    h
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
                },
                PolicyRun {
                    summary: &sm,
                    outcomes: &model,
                    trajectories: "m/trajectories.jsonl".into(),
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
    }
}
