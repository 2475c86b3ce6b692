//! One page per trajectory, so every report's task rows can link to what actually happened: the
//! conversation in order (the agent's text and tool calls, each observation), the final diff,
//! how it stopped, and the grading report. A user sees why a candidate won or lost without
//! reading JSONL.

use std::fmt::Write as _;
use std::path::Path;

use dojo_rundir::clip::{self, Keep, Unit};
use dojo_trajectory::Trajectory;

use crate::{Page, Table, escape};

/// Bytes of one message shown before it is cut on a char boundary (the record keeps everything).
pub const MAX_MESSAGE_CHARS: usize = 20_000;

/// The page's file name: the task id with anything outside `[A-Za-z0-9._-]` replaced, plus the
/// sample index. Distinct ids that sanitize alike get a short hash of the id, so no page
/// overwrites another.
pub fn page_name(task_id: &str, sample: u32) -> String {
    let clean: String = task_id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    let clean = clean.trim_start_matches('.');
    if clean == task_id {
        format!("{clean}.{sample}.html")
    } else {
        // FNV-1a: stable across runs and platforms, no dependency for eight hex digits.
        let hash = task_id.bytes().fold(0x811c_9dc5u32, |h, b| {
            (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
        });
        format!("{clean}-{hash:08x}.{sample}.html")
    }
}

fn clip(text: &str) -> String {
    clip::clip(text, MAX_MESSAGE_CHARS, Unit::Bytes, Keep::Head).0
}

/// The whole page of one trajectory.
pub fn trajectory_page(t: &Trajectory) -> String {
    let mut page = Page::new(&format!("{} · sample {}", t.task_id, t.sample_index));
    let outcome = if t.is_infrastructure_failure() {
        "infrastructure failure (not scored)"
    } else if t.is_resolved() {
        "resolved"
    } else if t.is_graded() {
        "unresolved"
    } else {
        "not graded"
    };
    page.subtitle(&format!(
        "{outcome} · stopped by {}{} · {} steps · {} tokens · {:.1} s · policy {}",
        t.stop_reason.as_str(),
        if t.forced_submission {
            " (forced submission)"
        } else {
            ""
        },
        t.steps.len(),
        t.usage.total_tokens,
        t.wall_ms as f64 / 1000.0,
        t.policy.model.as_deref().unwrap_or(&t.policy.kind)
    ));
    if let Some(d) = &t.stop_detail {
        page.note(d);
    }

    page.heading("Conversation");
    let mut table = Table::new(["#", "role", "content"]);
    for (i, m) in t.messages.iter().enumerate() {
        let mut cell = format!(
            "<pre>{}</pre>",
            escape(&clip(
                &m.content.as_ref().map(|c| c.text()).unwrap_or_default()
            ))
        );
        for call in m.tool_calls.iter().flatten() {
            let _ = write!(
                cell,
                "<div>→ <code>{}</code></div><pre>{}</pre>",
                escape(&call.function.name),
                escape(&clip(&call.function.arguments))
            );
        }
        let role = format!("{:?}", m.role).to_lowercase();
        table.row_html([i.to_string(), escape(&role), cell]);
    }
    page.table(&table);

    page.heading("Final diff");
    match t.patch.as_deref() {
        Some(p) if !p.trim().is_empty() => page.preformatted(clip(p).lines()),
        Some(_) => page.note("Empty: the agent changed nothing."),
        None => page.note("Not extracted (the environment failed)."),
    };
    if !t.events.is_empty() {
        page.heading("Events");
        page.preformatted(
            t.events
                .iter()
                .map(|e| format!("{} [{:?}] {}", e.kind, e.blame, e.message)),
        );
    }
    page.heading("Grading");
    match &t.grading {
        Some(g) => page.preformatted(
            serde_json::to_string_pretty(g)
                .unwrap_or_default()
                .lines()
                .map(str::to_string)
                .collect::<Vec<_>>(),
        ),
        None => page.note("Not graded."),
    };
    page.finish()
}

/// Writes a page for each trajectory into `dir`; returns the file names written, in order.
pub fn write_pages<'a>(
    dir: &Path,
    trajectories: impl IntoIterator<Item = &'a Trajectory>,
) -> std::io::Result<Vec<String>> {
    std::fs::create_dir_all(dir)?;
    let mut names = Vec::new();
    for t in trajectories {
        let name = page_name(&t.task_id, t.sample_index);
        std::fs::write(dir.join(&name), trajectory_page(t))?;
        names.push(name);
    }
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;
    use dojo_trajectory::{ChatMessage, StopReason};

    #[test]
    fn names_are_safe_and_distinct() {
        assert_eq!(page_name("gweis__isodate-1", 3), "gweis__isodate-1.3.html");
        let a = page_name("../x/y", 0);
        let b = page_name("__x_y", 0);
        assert!(!a.contains('/') && !a.starts_with('.'), "{a}");
        assert_ne!(a, b);
        assert_eq!(page_name("<b>", 1), page_name("<b>", 1));
    }

    #[test]
    fn page_shows_the_conversation_diff_and_grade_escaped() {
        let mut t = Trajectory::new("task<1>", 2);
        t.messages = vec![
            ChatMessage::system("sys"),
            ChatMessage::new(dojo_llm::Role::User, "fix <script>"),
        ];
        t.patch = Some("diff --git a/m.py b/m.py\n+x = '<&>'\n".into());
        t.stop_reason = StopReason::Submitted;
        t.set_grade(true);
        t.grading = Some(serde_json::json!({"resolved": true, "log": "PASSED t::a"}));
        let html = trajectory_page(&t);
        assert!(html.contains("task&lt;1&gt; · sample 2"));
        assert!(html.contains("resolved · stopped by submitted"));
        assert!(html.contains("fix &lt;script&gt;") && !html.contains("<script>"));
        assert!(html.contains("+x = &#39;&lt;&amp;&gt;&#39;"));
        assert!(html.contains("PASSED t::a"));
    }
}
