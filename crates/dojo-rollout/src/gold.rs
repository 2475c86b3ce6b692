//! `gold-replay`: a successful trajectory built from a task's gold patch, run through the real tools.
//!
//! No model is involved. For every file the gold patch touches the script searches for the code
//! (the function named in the hunk header, else a distinctive token), views the lines the hunk
//! covers, makes one `str_replace` per hunk (old/new text taken from the hunk, widened with more of
//! the file until the old text is unique, as the editor requires), then runs the tests the failing
//! tests live in and submits. Each action is an OpenAI-shaped assistant message with a native tool
//! call, answered by the real agent loop and tools, so the record is a faithful SFT example.
//!
//! Tool and argument names come from the tool schemas the agent offers in the request (R2E's
//! `file_editor`/`execute_bash{cmd}`/`finish`, SWE-Master's `str_replace_editor`/`execute_bash
//! {command}`/`submit`, ...), so the script works with any configured tool set.

use dojo_patch::shell_quote;
use serde_json::{Value, json};

use dojo_llm::{ChatMessage, ToolSpec};

use dojo_patch::{Change, LineKind, Patch};
pub use dojo_patch::{FileDiff, Hunk};

#[derive(Debug, thiserror::Error)]
pub enum GoldError {
    #[error("task {task}: gold patch line {line}: {reason}")]
    Parse {
        task: String,
        line: usize,
        reason: String,
    },
    #[error("task {task}: gold patch has no file changes")]
    Empty { task: String },
    #[error("task {task}: {path}: cannot read the file the gold patch changes: {source}")]
    Read {
        task: String,
        path: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("task {task}: {path}: hunk at line {line} does not match the file")]
    NoMatch {
        task: String,
        path: String,
        line: usize,
    },
    #[error("task {task}: binary gold patches cannot be replayed through the editor")]
    Binary { task: String },
}

/// Read a gold patch ([`dojo_patch::Patch`]); anything that does not parse is an error, since
/// the replay must reproduce the patch exactly.
pub fn parse_patch(task: &str, patch: &str) -> Result<Vec<FileDiff>, GoldError> {
    let parsed = Patch::parse(patch);
    if parsed.is_binary() {
        return Err(GoldError::Binary { task: task.into() });
    }
    if let Some(p) = parsed.problems.first() {
        return Err(GoldError::Parse {
            task: task.into(),
            line: p.line,
            reason: p.message.clone(),
        });
    }
    if parsed.files.is_empty() {
        return Err(GoldError::Empty { task: task.into() });
    }
    Ok(parsed.files)
}

fn count(h: &Hunk, kind: LineKind) -> usize {
    h.lines.iter().filter(|l| l.kind == kind).count()
}

/// One planned action: tool kind + arguments in our neutral form.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    Search {
        term: String,
        path: String,
    },
    View {
        path: String,
        range: Option<(usize, usize)>,
    },
    Replace {
        path: String,
        old: String,
        new: String,
    },
    Create {
        path: String,
        text: String,
    },
    Bash {
        command: String,
    },
    Submit,
}

/// The thought written before each action (kept short and factual).
fn thought(a: &Action) -> String {
    match a {
        Action::Search { term, .. } => format!("Let me find where `{term}` is defined."),
        Action::View { path, .. } => format!("Let me look at the relevant code in {path}."),
        Action::Replace { path, .. } => format!("I'll fix the faulty logic in {path}."),
        Action::Create { path, .. } => format!("I'll create {path}."),
        Action::Bash { .. } => "Now let me run the relevant tests to check the fix.".into(),
        Action::Submit => "The fix is in place; submitting.".into(),
    }
}

/// A name worth searching for: the function or class in the hunk heading, else the longest
/// identifier on a removed line.
fn search_term(h: &Hunk, path: &str) -> String {
    let heading = h.heading.trim_start();
    for kw in ["def ", "async def ", "class "] {
        if let Some(rest) = heading.strip_prefix(kw) {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                return name;
            }
        }
    }
    let removed = h
        .lines
        .iter()
        .filter(|l| l.kind == LineKind::Removed)
        .map(|l| &l.text);
    let mut best = String::new();
    for l in removed {
        for w in l.split(|c: char| !(c.is_alphanumeric() || c == '_')) {
            if w.len() > best.len() && !w.chars().next().is_some_and(|c| c.is_ascii_digit()) {
                best = w.to_string();
            }
        }
    }
    if best.len() >= 3 {
        best
    } else {
        path.rsplit('/')
            .next()
            .unwrap_or(path)
            .trim_end_matches(".py")
            .to_string()
    }
}

/// Widen `old`/`new` (a hunk's two sides, starting at 0-based `at` in `content`) with whole
/// lines of the file until `old` occurs exactly once.
fn unique_replacement(content: &str, h: &Hunk, at: usize) -> Option<(String, String)> {
    let file: Vec<&str> = content.split('\n').collect();
    let core_old = h.old_text();
    let core_new = h.new_text();
    let n_old = h.lines.len() - count(h, LineKind::Added);
    for extra in 0..=file.len() {
        let before_start = at.saturating_sub(extra);
        let after_end = (at + n_old + extra).min(file.len());
        let before = &file[before_start..at.min(file.len())];
        let after = &file[(at + n_old).min(file.len())..after_end];
        let wrap = |core: &str| {
            let mut parts: Vec<&str> = before.to_vec();
            if !(core.is_empty() && n_old == 0) {
                parts.push(core);
            }
            parts.extend_from_slice(after);
            parts.join("\n")
        };
        let (old, new) = (wrap(&core_old), wrap(&core_new));
        if !old.is_empty() && content.matches(old.as_str()).count() == 1 {
            return Some((old, new));
        }
        if before_start == 0 && after_end == file.len() {
            break;
        }
    }
    None
}

/// Where the hunk's old side starts in `content` (0-based line), near its stated position.
fn locate(content: &str, h: &Hunk, offset: isize) -> Option<usize> {
    let file: Vec<&str> = content.split('\n').collect();
    let old: Vec<&str> = h
        .lines
        .iter()
        .filter(|l| l.kind != LineKind::Added)
        .map(|l| l.text.as_str())
        .collect();
    let fits = |at: usize| at + old.len() <= file.len() && file[at..at + old.len()] == old[..];
    let guess = (h.old_start as isize - 1 + offset).max(0) as usize;
    (0..file.len().max(1))
        .flat_map(|d| [guess.checked_add(d), guess.checked_sub(d)])
        .flatten()
        .find(|&at| fits(at))
}

/// The whole gold script for a task. `read` gives a file's pristine contents (repo-relative path);
/// `test_command` is what to run before submitting (None: skip).
pub fn plan_actions<E: Into<Box<dyn std::error::Error + Send + Sync>>>(
    task: &str,
    patch: &str,
    workspace: &str,
    test_command: Option<&str>,
    read: impl Fn(&str) -> Result<String, E>,
) -> Result<Vec<Action>, GoldError> {
    let files = parse_patch(task, patch)?;
    let abs = |p: &str| format!("{}/{}", workspace.trim_end_matches('/'), p);
    let mut actions = Vec::new();
    for f in &files {
        let path = f.path().to_string();
        if f.change == Change::Create {
            let text = f.hunks.first().map(|h| h.new_text()).unwrap_or_default();
            actions.push(Action::Create {
                path: abs(&path),
                text: format!("{text}\n"),
            });
            continue;
        }
        if f.change == Change::Delete {
            actions.push(Action::Bash {
                command: format!("rm {}", abs(&path)),
            });
            continue;
        }
        let mut content = read(&path).map_err(|e| GoldError::Read {
            task: task.into(),
            path: path.clone(),
            source: e.into(),
        })?;
        if let Some(h) = f.hunks.first() {
            actions.push(Action::Search {
                term: search_term(h, &path),
                path: workspace.to_string(),
            });
        }
        // Line offset of later hunks after earlier replacements.
        let mut offset: isize = 0;
        for h in &f.hunks {
            let nomatch = || GoldError::NoMatch {
                task: task.into(),
                path: path.clone(),
                line: h.old_start,
            };
            let at = locate(&content, h, offset).ok_or_else(nomatch)?;
            let lo = at.saturating_sub(4) + 1;
            let hi = at + h.old_len.max(1) + 4;
            // The editor counts lines as `str::lines` does (no phantom line after a final newline).
            let total = content.lines().count();
            actions.push(Action::View {
                path: abs(&path),
                range: Some((lo, hi.min(total.max(1)))),
            });
            let (old, new) = unique_replacement(&content, h, at).ok_or_else(nomatch)?;
            content = content.replacen(&old, &new, 1);
            offset += count(h, LineKind::Added) as isize - count(h, LineKind::Removed) as isize;
            actions.push(Action::Replace {
                path: abs(&path),
                old,
                new,
            });
        }
    }
    if let Some(cmd) = test_command {
        actions.push(Action::Bash {
            command: cmd.to_string(),
        });
    }
    actions.push(Action::Submit);
    Ok(actions)
}

/// The concrete tool names and argument keys of the tool set the agent offers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolNames {
    pub editor: String,
    pub bash: String,
    pub bash_arg: String,
    pub search: Option<String>,
    pub submit: String,
    /// `finish{command: "submit"}` (R2E) vs a bare `submit{}`.
    pub submit_has_command: bool,
}

impl Default for ToolNames {
    /// R2E-Gym's names.
    fn default() -> Self {
        ToolNames {
            editor: "file_editor".into(),
            bash: "execute_bash".into(),
            bash_arg: "cmd".into(),
            search: Some("search".into()),
            submit: "finish".into(),
            submit_has_command: true,
        }
    }
}

impl ToolNames {
    /// Read the names from the tool schemas of a request; R2E's names where one is missing.
    pub fn from_specs(tools: &[ToolSpec]) -> ToolNames {
        let mut n = ToolNames::default();
        let props = |t: &ToolSpec| -> Vec<String> {
            t.function
                .parameters
                .as_ref()
                .and_then(|p| p.get("properties"))
                .and_then(Value::as_object)
                .map(|m| m.keys().cloned().collect())
                .unwrap_or_default()
        };
        let mut saw_search = false;
        for t in tools {
            let name = t.function.name.as_str();
            let ps = props(t);
            if ps.iter().any(|p| p == "old_str") {
                n.editor = name.to_string();
            } else if name.contains("bash") || ps.iter().any(|p| p == "cmd") {
                n.bash = name.to_string();
                if let Some(p) = ps.iter().find(|p| *p == "cmd" || *p == "command") {
                    n.bash_arg = p.clone();
                }
            } else if name.contains("search") {
                n.search = Some(name.to_string());
                saw_search = true;
            } else if name == "submit" || name == "finish" {
                n.submit = name.to_string();
                n.submit_has_command = ps.iter().any(|p| p == "command");
            }
        }
        if !tools.is_empty() && !saw_search {
            n.search = None;
        }
        n
    }

    /// (tool name, JSON arguments) of an action; `None` when the tool set lacks the tool.
    pub fn call(&self, a: &Action) -> Option<(String, Value)> {
        Some(match a {
            Action::Search { term, path } => match &self.search {
                Some(tool) => (tool.clone(), json!({"search_term": term, "path": path})),
                // Tool sets without `search` (SWE-Master's): grep, as an agent would.
                None => (
                    self.bash.clone(),
                    json!({ self.bash_arg.clone(): format!("grep -rn --include='*.py' {} {path}", shell_quote(term)) }),
                ),
            },
            Action::View { path, range } => {
                let mut v = json!({"command": "view", "path": path});
                if let Some((lo, hi)) = range {
                    v["view_range"] = json!([lo, hi]);
                }
                (self.editor.clone(), v)
            }
            Action::Replace { path, old, new } => (
                self.editor.clone(),
                json!({"command": "str_replace", "path": path, "old_str": old, "new_str": new}),
            ),
            Action::Create { path, text } => (
                self.editor.clone(),
                json!({"command": "create", "path": path, "file_text": text}),
            ),
            Action::Bash { command } => {
                (self.bash.clone(), json!({ self.bash_arg.clone(): command }))
            }
            Action::Submit => {
                let args = if self.submit_has_command {
                    json!({"command": "submit"})
                } else {
                    json!({})
                };
                (self.submit.clone(), args)
            }
        })
    }

    /// The assistant message for step `i` (0-based) of a script.
    pub fn message(&self, i: usize, a: &Action) -> Option<ChatMessage> {
        let (name, args) = self.call(a)?;
        let mut m = ChatMessage::assistant(thought(a));
        m.tool_calls = Some(vec![dojo_llm::ToolCall::function(
            format!("call_gold_{i}"),
            name,
            args.to_string(),
        )]);
        Some(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PATCH: &str = "diff --git a/pkg/mod.py b/pkg/mod.py\nindex 1..2 100644\n--- a/pkg/mod.py\n+++ b/pkg/mod.py\n@@ -2,5 +2,5 @@ def f(x):\n     a = 1\n     b = 2\n-    return x + a\n+    return x + b\n     # end\n \n@@ -9,3 +9,3 @@ def g(y):\n     a = 1\n-    return y\n+    return -y\n     # end\n";

    fn file() -> String {
        "def f(x):\n    a = 1\n    b = 2\n    return x + a\n    # end\n\n\ndef g(y):\n    a = 1\n    return y\n    # end\n".into()
    }

    #[test]
    fn parses_hunks() {
        let f = parse_patch("t", PATCH).unwrap();
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].path(), "pkg/mod.py");
        assert_eq!(f[0].hunks.len(), 2);
        assert_eq!(f[0].hunks[0].heading, "def f(x):");
        assert_eq!(
            f[0].hunks[1].old_text(),
            "    a = 1\n    return y\n    # end"
        );
    }

    #[test]
    fn plan_replays_to_the_gold_result() {
        let actions = plan_actions("t", PATCH, "/testbed", Some("pytest tests"), |_| {
            Ok::<_, String>(file())
        })
        .unwrap();
        let mut content = file();
        let mut replaces = 0;
        for a in &actions {
            if let Action::Replace { old, new, .. } = a {
                assert_eq!(
                    content.matches(old.as_str()).count(),
                    1,
                    "old_str unique: {old:?}"
                );
                content = content.replacen(old, new, 1);
                replaces += 1;
            }
        }
        assert_eq!(replaces, 2);
        assert!(content.contains("return x + b") && content.contains("return -y"));
        assert!(matches!(actions[0], Action::Search { ref term, .. } if term == "f"));
        assert_eq!(actions.last(), Some(&Action::Submit));
        // `    a = 1\n    return y\n    # end` is unique; the first hunk needed no widening.
        let names = ToolNames::default();
        let msgs: Vec<_> = actions
            .iter()
            .enumerate()
            .map(|(i, a)| names.message(i, a).unwrap())
            .collect();
        insta::assert_json_snapshot!("gold_script", msgs);
    }

    #[test]
    fn widens_ambiguous_old_text() {
        // The hunk's old side (`x = 1`) occurs twice: widen with file lines until unique.
        let content = "a()\nx = 1\nb()\nx = 1\nc()\n";
        let patch = "--- a/m.py\n+++ b/m.py\n@@ -4,1 +4,1 @@\n-x = 1\n+x = 2\n";
        let actions = plan_actions("t", patch, "/testbed", None, |_| {
            Ok::<_, String>(content.into())
        })
        .unwrap();
        let Some(Action::Replace { old, new, .. }) =
            actions.iter().find(|a| matches!(a, Action::Replace { .. }))
        else {
            panic!("no replace")
        };
        assert_eq!(content.matches(old.as_str()).count(), 1);
        assert_eq!(
            content.replacen(old, new, 1),
            "a()\nx = 1\nb()\nx = 2\nc()\n"
        );
    }

    #[test]
    fn tool_names_follow_the_offered_schemas() {
        let specs = vec![
            ToolSpec::function(
                "str_replace_editor",
                "",
                json!({"properties": {"command": {}, "old_str": {}}}),
            ),
            ToolSpec::function("execute_bash", "", json!({"properties": {"command": {}}})),
            ToolSpec::function("submit", "", json!({"properties": {}})),
        ];
        let n = ToolNames::from_specs(&specs);
        assert_eq!(n.editor, "str_replace_editor");
        assert_eq!(n.bash_arg, "command");
        assert_eq!(n.search, None);
        assert!(!n.submit_has_command);
        assert_eq!(n.call(&Action::Submit).unwrap().1, json!({}));
        let search = Action::Search {
            term: "it's".into(),
            path: "/testbed".into(),
        };
        assert_eq!(
            n.call(&search).unwrap(),
            (
                "execute_bash".into(),
                json!({"command": "grep -rn --include='*.py' 'it'\\''s' /testbed"})
            )
        );
    }

    #[test]
    fn truncated_and_garbage_patches_are_errors() {
        let cut = &PATCH[..PATCH.len() - 30];
        assert!(matches!(
            parse_patch("t", cut),
            Err(GoldError::Parse { .. })
        ));
        assert!(matches!(
            parse_patch("t", "hello"),
            Err(GoldError::Empty { .. })
        ));
        let e = plan_actions("t", PATCH, "/testbed", None, |_| {
            Ok::<_, String>("other".into())
        })
        .unwrap_err();
        assert!(e.to_string().contains("pkg/mod.py"), "{e}");
    }
}
