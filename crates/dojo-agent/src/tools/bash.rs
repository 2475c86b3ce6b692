//! `execute_bash`: one shell command in `/testbed`, with blocked commands (interactive tools and
//! the git commands that would reveal the fix from repository history), a timeout, and R2E's
//! observation format with head/tail truncation.

use std::sync::LazyLock;

use dojo_llm::BoxFuture;
use dojo_rundir::clip::{self, Keep, Unit};
use dojo_sandbox::{ExecRequest, WORKSPACE};
use regex::Regex;
use serde_json::{Map, Value, json};

use super::{Args, Tool, ToolContext, ToolError, ToolOutput, env_err, function_schema};

/// How an `execute_bash` variant behaves.
#[derive(Debug, Clone)]
pub struct BashConfig {
    pub name: String,
    /// `cmd` (R2E) or `command` (SWE-Master).
    pub arg: String,
    /// Commands refused when they are the first word.
    pub blocked_first_words: Vec<String>,
    /// Commands refused anywhere in the command line.
    pub blocked_patterns: Vec<Regex>,
    /// Observations longer than `head_lines + tail_lines` lines keep only the ends.
    pub head_lines: usize,
    pub tail_lines: usize,
    /// Cap on observation characters after line truncation (one giant line still fits).
    pub max_chars: usize,
}

/// `git` subcommands that read history (the fix may be in it).
static GIT_HISTORY: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?:^|[\s;&|()`$])git(?:\s+-[^\s]+(?:\s+[^-\s][^\s]*)?)*\s+(?:log|show|reflog|blame|clone|fetch|pull|rev-list|cat-file|whatchanged|shortlog|format-patch|bisect|archive|annotate)\b",
    )
    .unwrap_or_else(|e| unreachable!("static regex: {e}"))
});

/// SWE-Master's anti-git-hacking patterns.
static SM_GIT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"git\s+(?:show|log|clone)\b").unwrap_or_else(|e| unreachable!("static regex: {e}"))
});

static ANSI: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
        .unwrap_or_else(|e| unreachable!("static regex: {e}"))
});

impl BashConfig {
    fn base(arg: &str, first: &[&str], patterns: Vec<Regex>) -> Self {
        BashConfig {
            name: "execute_bash".into(),
            arg: arg.into(),
            blocked_first_words: first.iter().map(|s| s.to_string()).collect(),
            blocked_patterns: patterns,
            head_lines: 40,
            tail_lines: 40,
            max_chars: 20_000,
        }
    }
    /// R2E-Gym: refuses `ipython`, `jupyter`, `pip`, `nohup` (and history-revealing git).
    pub fn r2e() -> Self {
        Self::base(
            "cmd",
            &["ipython", "jupyter", "pip", "nohup"],
            vec![GIT_HISTORY.clone()],
        )
    }
    /// SWE-Master: refuses any command starting with `git`, `ipython`, `jupyter`, `nohup`, and
    /// `git show|log|clone` anywhere.
    pub fn swe_master() -> Self {
        Self::base(
            "command",
            &["git", "ipython", "jupyter", "nohup"],
            vec![SM_GIT.clone()],
        )
    }
    /// Ours: interactive tools and history-revealing git are refused; other git is allowed.
    pub fn dojo() -> Self {
        Self::base(
            "command",
            &["ipython", "jupyter", "nohup", "vim", "vi", "nano", "less"],
            vec![GIT_HISTORY.clone()],
        )
    }
}

pub struct BashTool {
    cfg: BashConfig,
}

impl BashTool {
    pub fn new(cfg: BashConfig) -> Self {
        BashTool { cfg }
    }

    /// Why `cmd` is refused, if it is.
    pub fn blocked_reason(&self, cmd: &str) -> Option<String> {
        let first = cmd.split_whitespace().next().unwrap_or("");
        let first_base = first.rsplit('/').next().unwrap_or(first);
        if self.cfg.blocked_first_words.iter().any(|b| b == first_base) {
            return Some(format!(
                "Bash command '{first_base}' is not allowed. Please use a different command or tool."
            ));
        }
        if self.cfg.blocked_patterns.iter().any(|re| re.is_match(cmd)) {
            return Some(
                "This command is not allowed: reading the repository's git history is blocked. Please use a \
                 different command or tool."
                    .into(),
            );
        }
        None
    }

    async fn run(
        &self,
        ctx: &mut ToolContext<'_>,
        args: &Map<String, Value>,
    ) -> Result<ToolOutput, ToolError> {
        let cmd = match Args(args).str(&self.cfg.arg) {
            Ok(Some(c)) if !c.trim().is_empty() => c,
            Ok(_) => {
                let msg = format!(
                    "ERROR: Parameter `{}` is required and must not be empty.",
                    self.cfg.arg
                );
                return Ok(ToolOutput::error(observation("-1", &msg)));
            }
            Err(e) => return Ok(ToolOutput::error(observation("-1", &format!("ERROR: {e}")))),
        };
        if let Some(reason) = self.blocked_reason(&cmd) {
            return Ok(ToolOutput {
                text: observation("Error: blocked", &reason),
                blocked: true,
                error: true,
                ..Default::default()
            });
        }
        let req = ExecRequest::shell(cmd)
            .timeout(ctx.command_timeout)
            .cwd(WORKSPACE);
        let out = ctx.ws.exec(&req).await.map_err(env_err(&self.cfg.name))?;
        if out.timed_out {
            return Ok(ToolOutput {
                text: observation(
                    "-1",
                    &format!(
                        "The command took too long to execute (>{}s)",
                        ctx.command_timeout.as_secs()
                    ),
                ),
                timed_out: true,
                error: true,
                ..Default::default()
            });
        }
        let stdout = clean(&out.stdout_lossy());
        let stderr = clean(&out.stderr_lossy());
        let failed = out.exit_code != Some(0);
        let code = match (out.exit_code, out.signal) {
            (Some(0), _) => "0".to_string(),
            (Some(c), _) => format!("Error: Exit code {c}"),
            (None, Some(s)) => format!("Error: Killed by signal {s}"),
            (None, None) => "Error: Exit code unknown".to_string(),
        };
        let mut body = format!("[STDOUT]\n\n{stdout}\n\n[STDERR]\n\n{stderr}");
        if failed {
            body = format!("Error executing command:\n\n{body}");
        }
        let (body, cut) = truncate(
            &body,
            self.cfg.head_lines,
            self.cfg.tail_lines,
            self.cfg.max_chars,
        );
        Ok(ToolOutput {
            text: observation(&code, &body),
            exit_code: out.exit_code,
            truncated: cut || out.stdout_truncated || out.stderr_truncated,
            error: failed,
            ..Default::default()
        })
    }
}

fn observation(code: &str, body: &str) -> String {
    format!("Exit code: {code}\nExecution output of [execute_bash]:\n{body}")
}

/// Strip ANSI escapes and carriage returns (progress bars).
fn clean(s: &str) -> String {
    ANSI.replace_all(s, "").replace('\r', "")
}

const CUT_MARK: &str = "<Observation truncated in middle for saving context>";

/// Keep the first `head` and last `tail` lines, then cap bytes the same way (the first and last
/// `max_chars / 2`, cut on char boundaries), with R2E's marker (its tool contract) in the middle.
pub(crate) fn truncate(s: &str, head: usize, tail: usize, max_chars: usize) -> (String, bool) {
    let lines: Vec<&str> = s.split('\n').collect();
    let mut cut = false;
    let out = if lines.len() > head + tail {
        cut = true;
        let mut v = lines[..head].to_vec();
        v.push(CUT_MARK);
        v.extend_from_slice(&lines[lines.len() - tail..]);
        v.join("\n")
    } else {
        s.to_string()
    };
    let ends = clip::cut(&out, max_chars, Unit::Bytes, Keep::Ends);
    if ends.is_cut() {
        return (ends.marked_with(CUT_MARK), true);
    }
    (out, cut)
}

impl Tool for BashTool {
    fn name(&self) -> &str {
        &self.cfg.name
    }
    fn schema(&self) -> Value {
        let description = "Run a bash command in the repository (working directory /testbed) and return its exit \
             code, stdout and stderr.\n\
             * Each call runs in a fresh shell: `cd` and environment changes do not persist between calls.\n\
             * Commands that run longer than the time limit are killed; do not start servers or interactive \
             programs.\n\
             * Long outputs keep only their beginning and end; redirect to a file and search it if needed.\n\
             * Reading the repository's git history is not allowed.";
        let props = json!({ self.cfg.arg.clone(): {"type": "string", "description": "The bash command to run."} });
        // SWE-Master declares no required parameter; we still report a missing command clearly.
        let required: &[&str] = if self.cfg.arg == "cmd" { &["cmd"] } else { &[] };
        function_schema(&self.cfg.name, description, props, required)
    }
    fn call<'a>(
        &'a self,
        ctx: &'a mut ToolContext<'_>,
        args: &'a Map<String, Value>,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(self.run(ctx, args))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_history_and_interactive_commands() {
        let dojo = BashTool::new(BashConfig::dojo());
        for bad in [
            "git log -p",
            "cd /testbed && git show HEAD~1",
            "git --no-pager log",
            "git -C /testbed reflog",
            "ipython",
            "/usr/bin/nohup x",
            "echo $(git blame a.py)",
        ] {
            assert!(dojo.blocked_reason(bad).is_some(), "{bad}");
        }
        for ok in [
            "git status",
            "git diff",
            "python -m pytest -x",
            "echo logging",
            "grep -rn 'git log' docs",
        ] {
            assert!(dojo.blocked_reason(ok).is_none(), "{ok}");
        }
        let sm = BashTool::new(BashConfig::swe_master());
        assert!(sm.blocked_reason("git status").is_some());
        assert!(sm.blocked_reason("cd x && git log").is_some());
        let r2e = BashTool::new(BashConfig::r2e());
        assert!(r2e.blocked_reason("pip install x").is_some());
        assert!(r2e.blocked_reason("python -m pip list").is_none());
    }

    #[test]
    fn truncation_keeps_head_and_tail() {
        let text: Vec<String> = (1..=100).map(|i| i.to_string()).collect();
        let (out, cut) = truncate(&text.join("\n"), 40, 40, 100_000);
        assert!(cut);
        let lines: Vec<&str> = out.split('\n').collect();
        assert_eq!(lines.len(), 81);
        assert_eq!(lines[39], "40");
        assert_eq!(lines[40], CUT_MARK);
        assert_eq!(lines[41], "61");
        let (out, cut) = truncate(&"x".repeat(50), 40, 40, 20);
        assert!(cut && out.contains(CUT_MARK) && out.len() < 80);
        assert_eq!(truncate("a\nb", 40, 40, 100), ("a\nb".to_string(), false));
        // Bytes, never splitting a char: 10 bytes each end is five two-byte chars.
        assert_eq!(
            truncate(&"é".repeat(30), 40, 40, 21),
            (
                format!("{}\n{CUT_MARK}\n{}", "é".repeat(5), "é".repeat(5)),
                true
            )
        );
    }

    #[test]
    fn ansi_and_carriage_returns_are_stripped() {
        assert_eq!(clean("\x1b[31mred\x1b[0m 50%\r100%"), "red 50%100%");
    }
}
