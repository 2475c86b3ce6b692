//! SWE-World's prompt layout for the transition model (SWT) and the reward model (SWR).
//!
//! Both prompts are one system message and one user message made of numbered `###` sections, in
//! the order SWE-World uses: initial analysis, problem, (hints,) command, executed code,
//! (original files,) agent patch, gold patch, and for SWR the FAIL_TO_PASS / PASS_TO_PASS lists.
//! Each section has a cap ([`Caps`]). The rule when a section is over its cap: keep its first
//! `cap` characters (cut on a character boundary) and append the workspace's one marker line,
//! `[… N characters cut]` ([`dojo_rundir::clip`]), so the model sees that text is missing and
//! how much; every cut is reported in [`Rendered::truncations`] so curation and runs can count
//! them.
//!
//! Caps are in characters, not tokens: prompts are rendered without a tokenizer (the simulated
//! environment may talk to any remote model). [`Caps::swe_world`] converts SWE-World's token caps
//! at [`CHARS_PER_TOKEN`] characters per token, about what BPE tokenizers average on code and
//! English.

use dojo_llm::ChatMessage;
use dojo_rundir::clip::{self, Keep, Unit};
use serde::{Deserialize, Serialize};

use crate::context::{FileView, SwrContext, SwtContext};

/// Characters per token assumed when converting SWE-World's token caps ([`Caps::swe_world`]).
pub const CHARS_PER_TOKEN: usize = 4;

/// Per-section caps in characters (see the module documentation for the truncation rule).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Caps {
    pub analysis: usize,
    pub problem: usize,
    pub command: usize,
    /// The executed files (SWT) or test files (SWR), all blocks together.
    pub executed_code: usize,
    /// Base versions of the executed files the agent modified. SWE-World sends none ("No original
    /// files provided."), so the default is 0, which keeps that wording.
    pub original_files: usize,
    pub agent_patch: usize,
    pub gold_patch: usize,
    pub fail_to_pass: usize,
    pub pass_to_pass: usize,
    /// Files shown at most; later ones are dropped (and counted in [`Rendered::dropped_files`]).
    pub max_files: usize,
    /// Training targets only (`dojo curate --world`): keep the last this many characters of
    /// SWR's test report and of SWT's stdout and stderr, where a test run's summary is, after a
    /// marker line (`[… N characters cut]`, [`dojo_rundir::clip`] keeping the tail). `None`
    /// (SWE-World, the default) keeps them whole; a small model with a short context needs
    /// short answers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_output: Option<usize>,
}

impl Caps {
    /// SWE-World's caps (tokens: analysis 5,120, problem 10,240, command 5,120, executed code
    /// 15,360, agent patch 15,360, gold patch 10,240, PASS_TO_PASS 5,120; at most 20 files),
    /// converted at [`CHARS_PER_TOKEN`]. FAIL_TO_PASS is uncapped there; here it gets the
    /// PASS_TO_PASS cap so one pathological task cannot blow up a prompt.
    pub fn swe_world() -> Caps {
        let t = |tokens: usize| tokens * CHARS_PER_TOKEN;
        Caps {
            analysis: t(5_120),
            problem: t(10_240),
            command: t(5_120),
            executed_code: t(15_360),
            original_files: 0,
            agent_patch: t(15_360),
            gold_patch: t(10_240),
            fail_to_pass: t(5_120),
            pass_to_pass: t(5_120),
            max_files: 20,
            target_output: None,
        }
    }
}

impl Default for Caps {
    fn default() -> Self {
        Caps::swe_world()
    }
}

/// Characters per token assumed when fitting caps into a context window ([`Caps::fit`]),
/// times two: 2.5, below what BPE tokenizers average on code, so that a fitted prompt holds.
const FIT_HALF_CHARS_PER_TOKEN: usize = 5;

/// Characters of a rendered prompt outside its capped sections, at most: the longer system
/// prompt, the section headings and instructions, a truncation marker per section.
fn fixed_chars() -> usize {
    SWT_SYSTEM_PROMPT.len().max(SWR_SYSTEM_PROMPT.len()) + 2_000
}

impl Caps {
    fn sections(&self) -> [usize; 9] {
        [
            self.analysis,
            self.problem,
            self.command,
            self.executed_code,
            self.original_files,
            self.agent_patch,
            self.gold_patch,
            self.fail_to_pass,
            self.pass_to_pass,
        ]
    }

    fn sections_mut(&mut self) -> [&mut usize; 9] {
        [
            &mut self.analysis,
            &mut self.problem,
            &mut self.command,
            &mut self.executed_code,
            &mut self.original_files,
            &mut self.agent_patch,
            &mut self.gold_patch,
            &mut self.fail_to_pass,
            &mut self.pass_to_pass,
        ]
    }

    /// The most characters a prompt rendered with these caps can have.
    pub fn max_prompt_chars(&self) -> usize {
        self.sections().iter().sum::<usize>() + fixed_chars()
    }

    /// These caps scaled down, section by section in proportion, so that any prompt rendered
    /// with them leaves `reply_tokens` of a `context_tokens` window free (at 2.5 characters
    /// per token); `None` when they fit already. A model trained with SWE-World's caps loses
    /// the most text where its window is small: every cut is still marked in the prompt and
    /// counted in [`Rendered::truncations`]. Files shown drop to at most 5 with the budget.
    pub fn fit(&self, context_tokens: usize, reply_tokens: usize) -> Result<Option<Caps>, NoRoom> {
        let room = context_tokens.saturating_sub(reply_tokens) * FIT_HALF_CHARS_PER_TOKEN / 2;
        if self.max_prompt_chars() <= room {
            return Ok(None);
        }
        let budget = room
            .checked_sub(fixed_chars())
            .filter(|b| *b >= 2_000)
            .ok_or(NoRoom {
                context_tokens,
                reply_tokens,
            })?;
        let total: usize = self.sections().iter().sum();
        let mut c = self.clone();
        for v in c.sections_mut() {
            *v = (*v as u128 * budget as u128 / total as u128) as usize;
        }
        c.max_files = c.max_files.min(5);
        Ok(Some(c))
    }
}

/// A context window too small for any world-model prompt ([`Caps::fit`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "a {context_tokens}-token context leaves no room for a world-model prompt after a {reply_tokens}-token reply"
)]
pub struct NoRoom {
    pub context_tokens: usize,
    pub reply_tokens: usize,
}

/// One section that was cut to its cap.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Truncation {
    /// The section's short name (`analysis`, `problem`, `command`, `executed_code`, …).
    pub section: String,
    /// Length of the section before the cut, in characters.
    pub original_chars: usize,
    /// Characters kept (the cap).
    pub kept_chars: usize,
}

/// A rendered prompt and what rendering had to leave out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rendered {
    /// `[system, user]`.
    pub messages: Vec<ChatMessage>,
    pub truncations: Vec<Truncation>,
    /// Files beyond [`Caps::max_files`] that were not shown.
    pub dropped_files: usize,
}

impl Rendered {
    /// Whether anything was cut or dropped.
    pub fn is_truncated(&self) -> bool {
        !self.truncations.is_empty() || self.dropped_files > 0
    }
}

/// SWT's system prompt.
pub const SWT_SYSTEM_PROMPT: &str = "\
You are an expert Python code execution simulator working inside a software repository \
(checked out at /testbed). You are given a task, the agent's current modifications to the \
repository, and one shell command. Predict exactly what that command would print to stdout and \
stderr, and its exit code.

Rules:
- Simulate the code as it is now, with the agent's patch applied. The gold patch is a reference: \
where the agent's changes are functionally equivalent to it, the output should be that of the \
fixed code; where they are not, simulate the agent's code, including its bugs.
- Never invent output the code would not produce: no made-up test results, values or files. \
Tracebacks, test summaries and paths must look like the real tools' output.
- A command that fails (syntax error, missing file, failing test) has a non-zero exit code.

Respond with a single JSON object and nothing else:
{\"stdout\": \"...\", \"stderr\": \"...\", \"exit_code\": 0}";

/// SWR's system prompt.
pub const SWR_SYSTEM_PROMPT: &str = "\
You are an expert test runner simulator working inside a software repository (checked out at \
/testbed). You are given a task, the agent's final modifications to the repository, the test \
command and the tests that decide whether the task is solved. Simulate running the test command \
on the repository with the agent's patch applied and write the test report it would print.

Rules:
- Judge the agent's patch on its own behaviour. The gold patch is a reference for what a correct \
fix does; a different patch can be correct, and a similar-looking one can be wrong.
- reward = 1 if and only if every FAIL_TO_PASS test and every PASS_TO_PASS test passes; \
otherwise reward = 0.

Think step by step inside <think>...</think>, then give a single JSON object:
{\"test_report\": \"...\", \"reward\": 0}";

/// Renders SWT's prompt for one command.
pub fn swt_messages(ctx: &SwtContext, caps: &Caps) -> Rendered {
    let mut cut = Cutter::default();
    let analysis = cut.section("analysis", analysis_text(&ctx.analysis), caps.analysis);
    let problem = cut.section("problem", &ctx.problem_statement, caps.problem);
    let command = cut.section("command", &ctx.command, caps.command);
    let (files, dropped_files) = shown_files(&ctx.executed_files, caps.max_files);
    let code = cut.section("executed_code", &executed_blocks(files), caps.executed_code);
    let original = original_section(&mut cut, files, caps.original_files);
    let agent_patch = cut.section(
        "agent_patch",
        agent_patch_text(&ctx.agent_patch),
        caps.agent_patch,
    );
    let gold = cut.section("gold_patch", gold_text(&ctx.gold_patch), caps.gold_patch);
    let user = format!(
        "### 1. Initial Analysis of the Problem\n{analysis}\n\n\
         ### 2. Problem Description\n{problem}\n\n\
         ### 3. Human Discussion (Hints)\nNo hints provided.\n\n\
         ### 4. Command to Simulate\n```bash\n{command}\n```\n\n\
         ### 5. Content of Code to be Executed\n{code}\n\n\
         ### 6. Original Content of Modified Files\n{original}\n\n\
         ### 7. Agent's Current Code Modifications (Patch)\n```diff\n{agent_patch}\n```\n\n\
         ### 8. Gold Standard Patch (For Your Reference)\n```diff\n{gold}\n```\n\n\
         ### YOUR TASK\n\
         Based on all the context above, provide the simulated output of the command. Your \
         response must be only the JSON object {{\"stdout\", \"stderr\", \"exit_code\"}}, with no \
         other text.\n"
    );
    cut.finish(SWT_SYSTEM_PROMPT, user, dropped_files)
}

/// Renders SWR's prompt for one finished rollout.
pub fn swr_messages(ctx: &SwrContext, caps: &Caps) -> Rendered {
    let mut cut = Cutter::default();
    let analysis = cut.section("analysis", analysis_text(&ctx.analysis), caps.analysis);
    let problem = cut.section("problem", &ctx.problem_statement, caps.problem);
    let command = cut.section("command", &ctx.test_command, caps.command);
    let (files, dropped_files) = shown_files(&ctx.test_files, caps.max_files);
    let code = cut.section("executed_code", &executed_blocks(files), caps.executed_code);
    let agent_patch = cut.section(
        "agent_patch",
        agent_patch_text(&ctx.agent_patch),
        caps.agent_patch,
    );
    let gold = cut.section("gold_patch", gold_text(&ctx.gold_patch), caps.gold_patch);
    let f2p = cut.section(
        "fail_to_pass",
        &test_list(&ctx.fail_to_pass),
        caps.fail_to_pass,
    );
    let p2p = cut.section(
        "pass_to_pass",
        &test_list(&ctx.pass_to_pass),
        caps.pass_to_pass,
    );
    let user = format!(
        "### 1. Initial Analysis of the Problem\n{analysis}\n\n\
         ### 2. Problem Description\n{problem}\n\n\
         ### 3. Command to Simulate\n```bash\n{command}\n```\n\n\
         ### 4. Content of Code to be Executed\n{code}\n\n\
         ### 5. Agent's Current Code Modifications (Patch)\n```diff\n{agent_patch}\n```\n\n\
         ### 6. Gold Standard Patch (For Your Reference)\n```diff\n{gold}\n```\n\n\
         ### 7. FAIL_TO_PASS Tests (Must All Pass for reward=1)\n{f2p}\n\n\
         ### 8. PASS_TO_PASS Tests (Must All Pass for reward=1)\n{p2p}\n\n\
         ### YOUR TASK\n\
         Using all the context above, simulate running the command, focusing on the \
         FAIL_TO_PASS and PASS_TO_PASS tests. Write a concise test report saying which tests \
         pass or fail, then decide the reward: 1 if and only if all FAIL_TO_PASS and \
         PASS_TO_PASS tests pass, 0 otherwise. Give your reasoning inside <think>...</think>, \
         followed by a single JSON object with the keys \"test_report\" and \"reward\".\n"
    );
    cut.finish(SWR_SYSTEM_PROMPT, user, dropped_files)
}

fn analysis_text(a: &Option<String>) -> &str {
    match a.as_deref().map(str::trim) {
        Some(a) if !a.is_empty() => a,
        _ => "No initial analysis provided.",
    }
}

fn agent_patch_text(p: &str) -> &str {
    if p.trim().is_empty() {
        "No changes from the agent yet."
    } else {
        p
    }
}

fn gold_text(g: &Option<String>) -> &str {
    match g.as_deref() {
        Some(g) if !g.trim().is_empty() => g,
        _ => "No gold patch provided.",
    }
}

/// A JSON array, one test per line (SWE-World's `json.dumps(indent=2)`).
fn test_list(tests: &[String]) -> String {
    serde_json::to_string_pretty(tests).unwrap_or_else(|_| "[]".to_string())
}

fn shown_files(files: &[FileView], max: usize) -> (&[FileView], usize) {
    let n = files.len().min(max);
    (&files[..n], files.len() - n)
}

fn executed_blocks(files: &[FileView]) -> String {
    if files.is_empty() {
        return "No explicit execution code content provided.".to_string();
    }
    files
        .iter()
        .map(|f| {
            let body = f.current.as_deref().unwrap_or("(this file does not exist)");
            format!(
                "--- Content of `{}` (the file being executed) ---\n\n{body}\n",
                f.path
            )
        })
        .collect::<Vec<_>>()
        .join("\n\n")
}

fn original_section(cut: &mut Cutter, files: &[FileView], cap: usize) -> String {
    const NONE: &str = "No original files provided.";
    if cap == 0 {
        return NONE.to_string();
    }
    let blocks: Vec<String> = files
        .iter()
        .filter(|f| f.is_modified())
        .filter_map(|f| {
            // Files the agent created have no original content.
            let body = f.base.as_deref()?;
            Some(format!(
                "--- Original content of `{}` (before any changes) ---\n\n{body}\n",
                f.path
            ))
        })
        .collect();
    if blocks.is_empty() {
        return NONE.to_string();
    }
    cut.section("original_files", &blocks.join("\n"), cap)
}

/// Applies caps and remembers what it cut.
#[derive(Default)]
struct Cutter {
    truncations: Vec<Truncation>,
}

impl Cutter {
    fn section(&mut self, name: &str, text: &str, cap: usize) -> String {
        let c = clip::cut(text, cap, Unit::Chars, Keep::Head);
        if c.is_cut() {
            self.truncations.push(Truncation {
                section: name.to_string(),
                original_chars: cap + c.cut,
                kept_chars: cap,
            });
        }
        c.marked()
    }

    fn finish(self, system: &str, user: String, dropped_files: usize) -> Rendered {
        Rendered {
            messages: vec![ChatMessage::system(system), ChatMessage::user(user)],
            truncations: self.truncations,
            dropped_files,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PATCH: &str = "diff --git a/calc.py b/calc.py\n--- a/calc.py\n+++ b/calc.py\n@@ -1,2 +1,2 @@\n def add(a, b):\n-    return a - b\n+    return a + b\n";

    fn swt_ctx() -> SwtContext {
        SwtContext {
            task_id: "calc-1".into(),
            problem_statement: "add(2, 3) returns -1 instead of 5.".into(),
            command: "cd /testbed && python repro.py".into(),
            executed_files: vec![FileView {
                path: "repro.py".into(),
                base: None,
                current: Some("from calc import add\nprint(add(2, 3))\n".into()),
            }],
            agent_patch: PATCH.into(),
            gold_patch: Some(PATCH.into()),
            analysis: Some("- `add` subtracts instead of adding.".into()),
        }
    }

    fn swr_ctx() -> SwrContext {
        SwrContext {
            task_id: "calc-1".into(),
            problem_statement: "add(2, 3) returns -1 instead of 5.".into(),
            test_command: "pytest -rA tests/test_calc.py".into(),
            test_files: vec![FileView {
                path: "tests/test_calc.py".into(),
                base: None,
                current: Some(
                    "from calc import add\n\ndef test_add():\n    assert add(2, 3) == 5\n".into(),
                ),
            }],
            agent_patch: PATCH.into(),
            gold_patch: Some(PATCH.into()),
            fail_to_pass: vec!["tests/test_calc.py::test_add".into()],
            pass_to_pass: vec![],
            analysis: None,
        }
    }

    fn show(r: &Rendered) -> String {
        r.messages
            .iter()
            .map(|m| format!("=== {:?} ===\n{}", m.role, m.text()))
            .collect::<Vec<_>>()
            .join("\n")
    }

    #[test]
    fn swt_prompt_layout() {
        let r = swt_messages(&swt_ctx(), &Caps::default());
        assert!(!r.is_truncated());
        insta::assert_snapshot!("swt_prompt", show(&r));
    }

    #[test]
    fn swr_prompt_layout() {
        let r = swr_messages(&swr_ctx(), &Caps::default());
        assert!(!r.is_truncated());
        insta::assert_snapshot!("swr_prompt", show(&r));
    }

    /// Fitted caps keep the rendered prompt inside the window, whatever the sections hold.
    #[test]
    fn fitted_caps_fit_the_window() {
        let caps = Caps::swe_world();
        assert_eq!(caps.fit(200_000, 4_096), Ok(None));
        let fitted = caps.fit(8_192, 1_024).unwrap().unwrap();
        assert!(
            fitted.problem < caps.problem && fitted.problem > 1_000,
            "{fitted:?}"
        );
        assert_eq!(fitted.max_files, 5);
        assert!(fitted.max_prompt_chars() * 2 / 5 + 1_024 <= 8_192);
        let huge = "x".repeat(1 << 20);
        let mut ctx = swt_ctx();
        ctx.problem_statement = huge.clone();
        ctx.command = huge.clone();
        ctx.agent_patch = huge.clone();
        let r = swt_messages(&ctx, &fitted);
        let chars: usize = r.messages.iter().map(|m| m.text().chars().count()).sum();
        assert!(chars <= fitted.max_prompt_chars(), "{chars}");
        assert!(r.truncations.len() >= 3);
        assert!(caps.fit(2_048, 1_024).is_err());
    }

    /// Over-cap sections keep their head and a marker, and are counted; extra files are dropped
    /// and counted; original files appear when their cap allows.
    #[test]
    fn caps_truncate_by_the_stated_rule() {
        let mut ctx = swt_ctx();
        ctx.problem_statement = "é".repeat(50);
        ctx.executed_files.push(FileView {
            path: "calc.py".into(),
            base: Some("def add(a, b):\n    return a - b\n".into()),
            current: Some("def add(a, b):\n    return a + b\n".into()),
        });
        let caps = Caps {
            problem: 10,
            max_files: 1,
            original_files: 1000,
            ..Caps::default()
        };
        let r = swt_messages(&ctx, &caps);
        assert_eq!(r.dropped_files, 1);
        assert_eq!(
            r.truncations,
            vec![Truncation {
                section: "problem".into(),
                original_chars: 50,
                kept_chars: 10
            }]
        );
        let user = r.messages[1].text();
        assert!(user.contains(&format!("{}\n[… 40 characters cut]", "é".repeat(10))));
        // calc.py was dropped (max_files 1), so no original content is shown for it.
        assert!(user.contains("No original files provided."));
        let caps = Caps {
            original_files: 1000,
            ..Caps::default()
        };
        let user = swt_messages(&ctx, &caps).messages[1].text();
        assert!(user.contains("--- Original content of `calc.py` (before any changes) ---"));
    }

    #[test]
    fn missing_parts_are_said_not_invented() {
        let mut ctx = swt_ctx();
        ctx.gold_patch = None;
        ctx.agent_patch = String::new();
        ctx.analysis = None;
        ctx.executed_files[0].current = None;
        let user = swt_messages(&ctx, &Caps::default()).messages[1].text();
        assert!(user.contains("No gold patch provided."));
        assert!(user.contains("No changes from the agent yet."));
        assert!(user.contains("No initial analysis provided."));
        assert!(user.contains("(this file does not exist)"));
    }
}
