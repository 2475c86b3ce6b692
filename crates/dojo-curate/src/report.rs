//! The human-readable side of a curation run: a stage table for the terminal and an HTML report
//! with charts (difficulty histogram, token lengths, turns per trajectory). The page, its
//! escaping and its charts are `dojo-report`'s, shared with every stage's report. The charts are
//! inlined in `report.html` (also written as `*.svg` beside it), so the report opens standalone,
//! offline, with no external asset; that is why there is no PNG: any browser renders the inline
//! SVG.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use std::path::{Path, PathBuf};

use dojo_report::{BarChart, Page, Table, escape};

use crate::error::{CurateError, write_file};
use crate::filters::StageReport;
use crate::summary::{CurationSummary, KeptRecord};

/// The stage table as fixed-width text (for the terminal).
pub fn stage_table(stages: &[StageReport]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<12} {:>8} {:>8} {:>8}  dropped because",
        "stage", "in", "kept", "dropped"
    );
    for st in stages {
        let reasons: Vec<String> = st.dropped.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let _ = writeln!(
            s,
            "{:<12} {:>8} {:>8} {:>8}  {}",
            st.stage,
            st.input,
            st.kept,
            st.dropped_total(),
            reasons.join(", ")
        );
    }
    s
}

impl CurationSummary {
    /// What `dojo curate` prints on stdout after a run (`world`: its world-model settings, with
    /// `--world`; every line ends in a newline):
    /// what was read, the stage table, the task split, what the world prompt caps cut, what was
    /// kept, and the files written.
    pub fn report(&self, world: Option<&crate::world::WorldConfig>) -> String {
        let what = if world.is_some() {
            "world records"
        } else {
            "trajectories"
        };
        let mut s = String::new();
        let _ = writeln!(
            s,
            "read {} {what} from {} files ({} bytes, {} unusable lines)",
            self.trajectories,
            self.files_read,
            self.bytes_read,
            self.problems.len()
        );
        s.push_str(&stage_table(&self.stages));
        if let Some(d) = &self.difficulty {
            let _ = writeln!(
                s,
                "tasks: {} always fail, {} always pass, {} mixed",
                d.always_fail, d.always_pass, d.mixed
            );
        }
        if let Some(w) = &self.world {
            let counts = |m: &BTreeMap<String, usize>| {
                m.iter()
                    .map(|(k, n)| format!("{k} {n}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let sections = if w.truncated_sections.is_empty() {
                "no section".to_string()
            } else {
                counts(&w.truncated_sections)
            };
            let _ = writeln!(
                s,
                "prompt caps: {} samples cut ({sections}), {} files left out",
                w.truncated_samples, w.dropped_files
            );
            if !w.truncated_targets.is_empty() {
                let _ = writeln!(
                    s,
                    "target caps: tails kept ({})",
                    counts(&w.truncated_targets)
                );
            }
            if world.is_some_and(|c| c.analysis.is_some()) {
                let _ = writeln!(
                    s,
                    "initial analysis: {} samples given one, {} without (none cached for their task)",
                    w.analysis_attached, w.analysis_missing
                );
            }
        }
        let _ = writeln!(
            s,
            "kept {} {what} -> {} samples, {} trained tokens",
            self.kept_trajectories, self.samples, self.trained_tokens
        );
        for f in &self.written {
            let _ = writeln!(s, "wrote {}", f.display());
        }
        s
    }
}

/// At most this many problems are listed in the report; all of them are in `manifest.json`.
const MAX_LISTED_PROBLEMS: usize = 500;

/// At most this many trajectory pages are written (the report says when more were kept).
const MAX_PAGES: usize = 2_000;

/// Writes one page per kept trajectory under `out/trajectories/` (re-read from its input line,
/// a full [`dojo_trajectory::Trajectory`]); returns per task the (link, resolved) of each page,
/// and how many records got no page (over [`MAX_PAGES`], or unreadable as a full record).
fn write_pages(
    out: &std::path::Path,
    kept: &[KeptRecord],
) -> (
    std::collections::BTreeMap<String, Vec<(String, bool)>>,
    usize,
) {
    let mut by_task: std::collections::BTreeMap<String, Vec<(String, bool)>> = Default::default();
    let mut missed = kept.len().saturating_sub(MAX_PAGES);
    let mut files: Vec<&str> = Vec::new();
    let mut cache: std::collections::HashMap<&str, Vec<String>> = Default::default();
    for r in kept.iter().take(MAX_PAGES) {
        let file = r.origin.file.as_str();
        let index = files.iter().position(|f| *f == file).unwrap_or_else(|| {
            files.push(file);
            files.len() - 1
        });
        let lines = cache.entry(file).or_insert_with(|| {
            std::fs::read_to_string(file)
                .map(|t| t.lines().map(str::to_string).collect())
                .unwrap_or_default()
        });
        let record = lines
            .get(r.origin.line.saturating_sub(1))
            .and_then(|l| dojo_trajectory::Trajectory::from_json(l).ok());
        let Some(t) = record else {
            missed += 1;
            continue;
        };
        // One directory per input file: two runs can hold the same task and sample.
        let rel = format!(
            "trajectories/f{index}/{}",
            dojo_report::trajectory::page_name(&t.task_id, t.sample_index)
        );
        let path = out.join(&rel);
        let written = path
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| std::fs::write(&path, dojo_report::trajectory::trajectory_page(&t)));
        if written.is_err() {
            missed += 1;
            continue;
        }
        by_task
            .entry(r.task_id.clone())
            .or_default()
            .push((rel, r.resolved));
    }
    (by_task, missed)
}

/// The HTML report: stage table, summary, the charts inline and the input problems.
pub fn html(
    title: &str,
    stages: &[StageReport],
    summary: &[(String, String)],
    problems: &[String],
    charts: &[BarChart],
) -> String {
    html_with_links(
        title,
        stages,
        summary,
        problems,
        charts,
        &Default::default(),
        0,
    )
}

fn html_with_links(
    title: &str,
    stages: &[StageReport],
    summary: &[(String, String)],
    problems: &[String],
    charts: &[BarChart],
    pages: &std::collections::BTreeMap<String, Vec<(String, bool)>>,
    missed: usize,
) -> String {
    let mut page = Page::new(title);
    let mut table = Table::new(["stage", "in", "kept", "dropped", "why"]).numeric(1..4);
    for st in stages {
        let reasons: Vec<String> = st
            .dropped
            .iter()
            .map(|(k, v)| format!("{k}: {v}"))
            .collect();
        table.row([
            st.stage.clone(),
            st.input.to_string(),
            st.kept.to_string(),
            st.dropped_total().to_string(),
            reasons.join(", "),
        ]);
    }
    page.heading("Stages").table(&table);
    let mut table = Table::new(["figure", "value"]);
    for (k, v) in summary {
        table.row([k, v]);
    }
    page.heading("Summary").table(&table);
    for c in charts {
        page.heading(&c.title).chart(&c.svg());
    }
    if !pages.is_empty() {
        page.heading("Kept trajectories by task");
        let mut table = Table::new(["task", "trajectories (✓ resolved)"]);
        for (task, links) in pages {
            let cells = links
                .iter()
                .enumerate()
                .map(|(i, (href, resolved))| {
                    format!(
                        "<a href=\"{}\">{}{}</a>",
                        escape(href),
                        i,
                        if *resolved { " ✓" } else { "" }
                    )
                })
                .collect::<Vec<_>>()
                .join(" ");
            table.row_html([format!("<code>{}</code>", escape(task)), cells]);
        }
        page.table(&table);
    }
    if missed > 0 {
        page.note(&format!(
            "{missed} kept trajectories have no page (more than {MAX_PAGES}, or not readable as a full record)."
        ));
    }
    page.heading(&format!("Input problems ({})", problems.len()));
    if !problems.is_empty() {
        let mut lines: Vec<String> = problems.iter().take(MAX_LISTED_PROBLEMS).cloned().collect();
        if problems.len() > MAX_LISTED_PROBLEMS {
            lines.push(format!(
                "… {} more in manifest.json",
                problems.len() - MAX_LISTED_PROBLEMS
            ));
        }
        page.preformatted(lines);
    }
    page.finish()
}

/// Writes `report.html` and one standalone `.svg` per chart into the output directory `dir`;
/// returns the files written.
pub fn write(dir: &Path, out: &CurationSummary) -> Result<Vec<PathBuf>, CurateError> {
    let mut charts = Vec::new();
    if let Some(d) = &out.difficulty {
        charts.push((
            "difficulty",
            BarChart::new(
                "Tasks by mean reward over their rollouts",
                "mean reward",
                d.histogram
                    .iter()
                    .enumerate()
                    .map(|(i, &c)| {
                        (
                            format!("{:.1}–{:.1}", i as f64 / 10.0, (i + 1) as f64 / 10.0),
                            c as f64,
                        )
                    })
                    .collect(),
            ),
        ));
    }
    charts.push((
        "tokens",
        BarChart::histogram(
            "Tokens per exported sample",
            "tokens",
            &out.sample_tokens,
            20,
        ),
    ));
    charts.push((
        "turns",
        BarChart::histogram(
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
    let hists: Vec<BarChart> = charts.iter().map(|c| c.1.clone()).collect();
    let (pages, missed) = write_pages(dir, &out.kept_records);
    let html = html_with_links(
        "dojo curate",
        &out.stages,
        &summary,
        &out.problems,
        &hists,
        &pages,
        missed,
    );
    let mut files = Vec::new();
    let p = dir.join("report.html");
    write_file(&p, &html)?;
    files.push(p);
    for (name, c) in &charts {
        let p = dir.join(format!("{name}.svg"));
        write_file(&p, &c.svg().standalone())?;
        files.push(p);
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_holds_every_stage_and_escapes_problems() {
        let mut st = StageReport {
            stage: "format".into(),
            input: 5,
            kept: 3,
            ..Default::default()
        };
        st.dropped.insert("not_resolved".into(), 2);
        let html = html(
            "dojo curate",
            &[st],
            &[("kept trajectories".into(), "3".into())],
            &["r.jsonl:7: truncated_last_line: <cut>".into()],
            &[BarChart::histogram("Turns", "turns", &[1, 2], 4)],
        );
        assert!(html.contains("<td>format</td><td class=\"n\">5</td>"));
        assert!(html.contains("not_resolved: 2"));
        assert!(html.contains("truncated_last_line: &lt;cut&gt;"));
        assert_eq!(html.matches("<svg").count(), 1);
    }

    #[test]
    fn report_lines() {
        let mut cfg = crate::Config::new(vec![], PathBuf::from("/out"));
        let mut s = CurationSummary {
            files_read: 2,
            bytes_read: 300,
            trajectories: 4,
            problems: vec!["p1".into()],
            kept_trajectories: 3,
            samples: 3,
            trained_tokens: 90,
            written: vec![PathBuf::from("/out/tokens.parquet")],
            ..Default::default()
        };
        let table = stage_table(&[]);
        assert_eq!(
            s.report(cfg.world.as_ref()),
            format!(
                "read 4 trajectories from 2 files (300 bytes, 1 unusable lines)\n{table}\
                 kept 3 trajectories -> 3 samples, 90 trained tokens\nwrote /out/tokens.parquet\n"
            )
        );
        let mut w = crate::world::WorldConfig::new(crate::world::WorldKind::Swt);
        w.analysis = Some((PathBuf::from("/cache"), "m".into()));
        cfg.world = Some(w);
        s.written.clear();
        s.world = Some(crate::world::WorldStats {
            truncated_samples: 2,
            truncated_sections: [("diff".to_string(), 2)].into(),
            dropped_files: 1,
            truncated_targets: [("stdout".to_string(), 1)].into(),
            analysis_attached: 2,
            analysis_missing: 1,
        });
        assert_eq!(
            s.report(cfg.world.as_ref()),
            format!(
                "read 4 world records from 2 files (300 bytes, 1 unusable lines)\n{table}\
                 prompt caps: 2 samples cut (diff 2), 1 files left out\n\
                 target caps: tails kept (stdout 1)\n\
                 initial analysis: 2 samples given one, 1 without (none cached for their task)\n\
                 kept 3 world records -> 3 samples, 90 trained tokens\n"
            )
        );
    }
}
