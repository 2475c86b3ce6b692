//! `str_replace_editor` (SWE-Master, OpenHands) / `file_editor` (R2E-Gym): view, create,
//! str_replace, insert, undo_edit. Implemented host-side over the workspace's file operations, so
//! an edit costs no process spawn; directory listings use `find` in the sandbox.

use std::collections::HashMap;

use dojo_llm::BoxFuture;
use dojo_rundir::clip::{self, Keep, Unit};
use dojo_sandbox::{ExecRequest, SandboxError};
use serde_json::{Map, Value, json};

use super::{Args, Tool, ToolContext, ToolError, ToolOutput, clip_chars, env_err, function_schema};

/// Which editor variant to offer.
#[derive(Debug, Clone)]
pub struct EditorConfig {
    pub name: String,
    /// Allowed commands, in schema order.
    pub commands: Vec<&'static str>,
    /// Offer R2E's `concise` flag.
    pub concise_param: bool,
    /// File extensions `view` accepts (None = any file).
    pub view_extensions: Option<Vec<&'static str>>,
    /// Python files longer than this, viewed without a range, get the condensed view.
    pub condense_above_lines: Option<usize>,
    /// Output longer than this many characters is clipped with a note.
    pub max_chars: usize,
}

impl EditorConfig {
    pub fn r2e() -> Self {
        EditorConfig {
            name: "file_editor".into(),
            commands: vec!["view", "create", "str_replace", "insert", "undo_edit"],
            concise_param: true,
            view_extensions: Some(vec!["py"]),
            condense_above_lines: Some(110),
            max_chars: 10_000,
        }
    }
    pub fn swe_master() -> Self {
        EditorConfig {
            name: "str_replace_editor".into(),
            commands: vec!["view", "create", "str_replace", "insert"],
            concise_param: false,
            view_extensions: Some(vec!["py", "rst", "md", "txt"]),
            condense_above_lines: Some(110),
            max_chars: 10_000,
        }
    }
    pub fn dojo() -> Self {
        EditorConfig {
            name: "str_replace_editor".into(),
            commands: vec!["view", "create", "str_replace", "insert", "undo_edit"],
            concise_param: false,
            view_extensions: None,
            condense_above_lines: Some(110),
            max_chars: 10_000,
        }
    }
}

/// Per-rollout undo history: previous contents per path (`None` = the file did not exist).
#[derive(Default)]
struct History(HashMap<String, Vec<Option<Vec<u8>>>>);

pub struct EditorTool {
    cfg: EditorConfig,
}

const SNIPPET_CONTEXT: usize = 4;

/// R2E's marker of a clipped editor output (its tool contract, kept verbatim).
const CLIPPED: &str = "<response clipped><NOTE>Only part of this output is shown to save context. Search the file \
                       with `grep -n` to find the line numbers you need, then view that range.</NOTE>";

impl EditorTool {
    pub fn new(cfg: EditorConfig) -> Self {
        EditorTool { cfg }
    }

    /// The head of `text` within `max_chars` bytes, after which R2E's note says it was clipped.
    fn clip(&self, text: String) -> (String, bool) {
        let c = clip::cut(&text, self.cfg.max_chars, Unit::Bytes, Keep::Head);
        if !c.is_cut() {
            return (text, false);
        }
        (c.marked_with(CLIPPED), true)
    }

    async fn run(
        &self,
        ctx: &mut ToolContext<'_>,
        args: &Map<String, Value>,
    ) -> Result<ToolOutput, ToolError> {
        let a = Args(args);
        let (command, path) = match (a.required_str("command"), a.required_str("path")) {
            (Ok(c), Ok(p)) => (c, p),
            (Err(e), _) | (_, Err(e)) => {
                return Ok(ToolOutput::error(super::wrap(
                    &self.cfg.name,
                    &format!("ERROR: {e}"),
                )));
            }
        };
        if !self.cfg.commands.contains(&command.as_str()) {
            let msg = format!(
                "ERROR: Unrecognized command '{command}'. Allowed commands for {}: {}.",
                self.cfg.name,
                self.cfg.commands.join(", ")
            );
            return Ok(ToolOutput::error(super::wrap(&self.cfg.name, &msg)));
        }
        if !path.starts_with('/') {
            let msg = format!(
                "ERROR: The path '{path}' is not an absolute path; it should start with '/', e.g. /testbed/{path}."
            );
            return Ok(ToolOutput::error(super::wrap(&self.cfg.name, &msg)));
        }
        let result = match command.as_str() {
            "view" => self.view(ctx, &path, &a).await,
            "create" => self.create(ctx, &path, &a).await,
            "str_replace" => self.str_replace(ctx, &path, &a).await,
            "insert" => self.insert(ctx, &path, &a).await,
            "undo_edit" => self.undo(ctx, &path).await,
            _ => unreachable!("checked against the allowed commands"),
        };
        match result {
            Ok(out) => Ok(out),
            Err(Fail::Agent(msg)) => Ok(ToolOutput::error(super::wrap(
                &self.cfg.name,
                &format!("ERROR: {msg}"),
            ))),
            Err(Fail::Env(e)) => Err(env_err(&self.cfg.name)(e)),
        }
    }

    async fn view(
        &self,
        ctx: &mut ToolContext<'_>,
        path: &str,
        a: &Args<'_>,
    ) -> Result<ToolOutput, Fail> {
        let range = a.int_list("view_range").map_err(Fail::agent)?;
        let concise = if self.cfg.concise_param {
            a.bool("concise").map_err(Fail::agent)?
        } else {
            None
        };
        match kind_of(ctx, path).await? {
            Kind::Missing => Err(Fail::Agent(format!("The path '{path}' does not exist."))),
            Kind::Dir => {
                if range.is_some() {
                    return Err(Fail::Agent(
                        "view_range is not allowed when path points to a directory.".into(),
                    ));
                }
                let filter = match &self.cfg.view_extensions {
                    Some(exts) if exts == &["py"] => r" \( -type d -o -name '*.py' \)",
                    _ => "",
                };
                let script = format!(
                    "find \"$DOJO_P\" -maxdepth 2 -not -path '*/.*'{filter} | LC_ALL=C sort"
                );
                let mut req = ExecRequest::shell(script);
                req.env.insert("DOJO_P".into(), path.to_string());
                let out = ctx.ws.exec(&req).await.map_err(Fail::Env)?;
                let body = format!(
                    "Here's the files and directories up to 2 levels deep in {path}, excluding hidden:\n{}",
                    out.stdout_lossy()
                );
                let (text, truncated) = self.clip(body);
                Ok(ToolOutput {
                    text: super::wrap(&self.cfg.name, &text),
                    truncated,
                    ..Default::default()
                })
            }
            Kind::File(bytes) => {
                if let Some(exts) = &self.cfg.view_extensions {
                    let ext = path.rsplit_once('.').map(|(_, e)| e).unwrap_or("");
                    if !exts.contains(&ext) {
                        let list = exts
                            .iter()
                            .map(|e| format!(".{e}"))
                            .collect::<Vec<_>>()
                            .join(", ");
                        return Err(Fail::Agent(format!(
                            "Viewing '{path}' is not supported: only {list} files can be viewed. Use execute_bash (e.g. cat) for other files."
                        )));
                    }
                }
                let text = String::from_utf8_lossy(&bytes);
                let lines = split_lines(&text);
                let n = lines.len();
                let body = if let Some(r) = range {
                    let (start, end) = check_range(&r, n).map_err(Fail::agent)?;
                    format!(
                        "Here's the result of running `cat -n` on the file: {path}:\n{}",
                        numbered(&lines[start - 1..end], start)
                    )
                } else if path.ends_with(".py")
                    && concise != Some(false)
                    && (concise == Some(true)
                        || self.cfg.condense_above_lines.is_some_and(|max| n > max))
                {
                    format!(
                        "Here is a condensed view of the file: {path}. Function bodies of 4 or more lines are elided; \
                         view a line range (view_range) to see them in full.\n{}",
                        condensed(&lines)
                    )
                } else {
                    format!(
                        "Here's the result of running `cat -n` on the file: {path}:\n{}",
                        numbered(&lines, 1)
                    )
                };
                let (text, truncated) = self.clip(body);
                Ok(ToolOutput {
                    text: super::wrap(&self.cfg.name, &text),
                    truncated,
                    ..Default::default()
                })
            }
        }
    }

    async fn create(
        &self,
        ctx: &mut ToolContext<'_>,
        path: &str,
        a: &Args<'_>,
    ) -> Result<ToolOutput, Fail> {
        let Some(text) = a.str("file_text").map_err(Fail::agent)? else {
            return Err(Fail::Agent(
                "Parameter `file_text` is required for command: create.".into(),
            ));
        };
        match kind_of(ctx, path).await? {
            Kind::Missing => {}
            Kind::Dir => {
                return Err(Fail::Agent(format!(
                    "'{path}' is a directory; create needs a file path."
                )));
            }
            Kind::File(_) => {
                return Err(Fail::Agent(format!(
                    "File already exists at: {path}. Cannot overwrite it with create; use str_replace to edit it."
                )));
            }
        }
        ctx.ws
            .write_file(path, text.as_bytes())
            .await
            .map_err(Fail::Env)?;
        push_history(ctx, path, None);
        Ok(ToolOutput::ok(super::wrap(
            &self.cfg.name,
            &format!("File created successfully at: {path}"),
        )))
    }

    async fn str_replace(
        &self,
        ctx: &mut ToolContext<'_>,
        path: &str,
        a: &Args<'_>,
    ) -> Result<ToolOutput, Fail> {
        let Some(old) = a.str("old_str").map_err(Fail::agent)? else {
            return Err(Fail::Agent(
                "Parameter `old_str` is required for command: str_replace.".into(),
            ));
        };
        let new = a.str("new_str").map_err(Fail::agent)?.unwrap_or_default();
        let bytes = read_existing(ctx, path).await?;
        let text = String::from_utf8_lossy(&bytes).into_owned();
        if old.is_empty() {
            return Err(Fail::Agent("old_str must not be empty.".into()));
        }
        let hits: Vec<usize> = text.match_indices(&old).map(|(i, _)| i).collect();
        match hits.len() {
            0 => Err(Fail::Agent(format!(
                "No occurrences of old_str `{}` found in {path}. No replacement was performed; old_str must match \
                 the file exactly, including whitespace and indentation.",
                clip_chars(&old, 500)
            ))),
            1 => {
                let at = hits[0];
                let updated = format!("{}{}{}", &text[..at], new, &text[at + old.len()..]);
                ctx.ws
                    .write_file(path, updated.as_bytes())
                    .await
                    .map_err(Fail::Env)?;
                push_history(ctx, path, Some(bytes));
                let first = text[..at].matches('\n').count() + 1;
                let last = first + new.matches('\n').count();
                let lines = split_lines(&updated);
                let out = format!(
                    "The file {path} has been edited. Here's the result of running `cat -n` on a snippet of {path}:\n{}\n\
                     Review the changes and make sure they are as expected. Edit the file again if necessary.",
                    snippet(&lines, first, last)
                );
                Ok(ToolOutput::ok(super::wrap(
                    &self.cfg.name,
                    &self.clip(out).0,
                )))
            }
            _ => {
                let lines: Vec<usize> = hits
                    .iter()
                    .map(|&i| text[..i].matches('\n').count() + 1)
                    .collect();
                Err(Fail::Agent(format!(
                    "Multiple occurrences of old_str `{}` found in lines {lines:?}. No replacement was performed. \
                     Include more surrounding lines so old_str is unique.",
                    clip_chars(&old, 500)
                )))
            }
        }
    }

    async fn insert(
        &self,
        ctx: &mut ToolContext<'_>,
        path: &str,
        a: &Args<'_>,
    ) -> Result<ToolOutput, Fail> {
        let Some(line) = a.int("insert_line").map_err(Fail::agent)? else {
            return Err(Fail::Agent(
                "Parameter `insert_line` is required for command: insert.".into(),
            ));
        };
        let Some(new) = a.str("new_str").map_err(Fail::agent)? else {
            return Err(Fail::Agent(
                "Parameter `new_str` is required for command: insert.".into(),
            ));
        };
        let bytes = read_existing(ctx, path).await?;
        let text = String::from_utf8_lossy(&bytes).into_owned();
        let lines = split_lines(&text);
        let n = lines.len();
        if line < 0 || line as usize > n {
            return Err(Fail::Agent(format!(
                "Invalid insert_line {line}: it must be within [0, {n}] (0 inserts at the top of the file)."
            )));
        }
        let k = line as usize;
        let new_lines = split_lines(&new);
        let mut out_lines: Vec<&str> = Vec::with_capacity(n + new_lines.len());
        out_lines.extend_from_slice(&lines[..k]);
        out_lines.extend(new_lines.iter().copied());
        out_lines.extend_from_slice(&lines[k..]);
        let mut updated = out_lines.join("\n");
        if text.ends_with('\n') || (text.is_empty() && !new.is_empty()) {
            updated.push('\n');
        }
        ctx.ws
            .write_file(path, updated.as_bytes())
            .await
            .map_err(Fail::Env)?;
        push_history(ctx, path, Some(bytes));
        let all = split_lines(&updated);
        let out = format!(
            "The file {path} has been edited. Here's the result of running `cat -n` on a snippet of the edited file:\n{}\n\
             Review the changes and make sure they are as expected (correct indentation, no duplicate lines, etc). \
             Edit the file again if necessary.",
            snippet(&all, k + 1, (k + new_lines.len()).max(k + 1))
        );
        Ok(ToolOutput::ok(super::wrap(
            &self.cfg.name,
            &self.clip(out).0,
        )))
    }

    async fn undo(&self, ctx: &mut ToolContext<'_>, path: &str) -> Result<ToolOutput, Fail> {
        let previous = ctx
            .state::<History>(HISTORY_KEY)
            .0
            .get_mut(path)
            .and_then(Vec::pop);
        let Some(previous) = previous else {
            return Err(Fail::Agent(format!("No edit history found for {path}.")));
        };
        match previous {
            Some(bytes) => {
                ctx.ws.write_file(path, &bytes).await.map_err(Fail::Env)?;
                let text = String::from_utf8_lossy(&bytes);
                let out = format!(
                    "Last edit to {path} undone successfully. Here's the result of running `cat -n` on {path}:\n{}",
                    numbered(&split_lines(&text), 1)
                );
                let (text, truncated) = self.clip(out);
                Ok(ToolOutput {
                    text: super::wrap(&self.cfg.name, &text),
                    truncated,
                    ..Default::default()
                })
            }
            None => {
                let mut req = ExecRequest::shell("rm -f -- \"$DOJO_P\"");
                req.env.insert("DOJO_P".into(), path.to_string());
                ctx.ws.exec(&req).await.map_err(Fail::Env)?;
                Ok(ToolOutput::ok(super::wrap(
                    &self.cfg.name,
                    &format!(
                        "Last edit to {path} undone successfully: the file it created was removed."
                    ),
                )))
            }
        }
    }
}

const HISTORY_KEY: &str = "editor.history";

fn push_history(ctx: &mut ToolContext<'_>, path: &str, previous: Option<Vec<u8>>) {
    ctx.state::<History>(HISTORY_KEY)
        .0
        .entry(path.to_string())
        .or_default()
        .push(previous);
}

enum Fail {
    Agent(String),
    Env(SandboxError),
}

impl Fail {
    /// The agent's mistake, told to it as `e` reads.
    fn agent(e: impl std::fmt::Display) -> Fail {
        Fail::Agent(e.to_string())
    }
}

enum Kind {
    Missing,
    Dir,
    File(Vec<u8>),
}

/// Read a path, telling files, directories and missing paths apart. Read errors the sandbox
/// reports in its own way fall back to asking the shell, so only a broken sandbox is an
/// infrastructure failure.
async fn kind_of(ctx: &ToolContext<'_>, path: &str) -> Result<Kind, Fail> {
    match ctx.ws.read_file(path).await {
        Ok(bytes) => return Ok(Kind::File(bytes)),
        Err(SandboxError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            return Ok(Kind::Missing);
        }
        Err(SandboxError::Io { source, .. })
            if source.kind() == std::io::ErrorKind::IsADirectory
                || source.raw_os_error() == Some(21) =>
        {
            return Ok(Kind::Dir);
        }
        Err(SandboxError::PathEscape(p)) => {
            return Err(Fail::Agent(format!(
                "The path '{p}' is outside the repository workspace."
            )));
        }
        Err(_) => {}
    }
    let mut req = ExecRequest::shell(
        "if [ -d \"$DOJO_P\" ]; then echo dir; elif [ -e \"$DOJO_P\" ]; then echo unreadable; else echo missing; fi",
    );
    req.env.insert("DOJO_P".into(), path.to_string());
    let out = ctx.ws.exec(&req).await.map_err(Fail::Env)?;
    match out.stdout_lossy().trim() {
        "dir" => Ok(Kind::Dir),
        "missing" => Ok(Kind::Missing),
        _ => Err(Fail::Agent(format!(
            "The file '{path}' exists but cannot be read."
        ))),
    }
}

async fn read_existing(ctx: &ToolContext<'_>, path: &str) -> Result<Vec<u8>, Fail> {
    match kind_of(ctx, path).await? {
        Kind::File(b) => Ok(b),
        Kind::Missing => Err(Fail::Agent(format!("The path '{path}' does not exist."))),
        Kind::Dir => Err(Fail::Agent(format!("'{path}' is a directory, not a file."))),
    }
}

/// Lines as `cat -n` sees them: a final newline does not start another line.
pub(crate) fn split_lines(text: &str) -> Vec<&str> {
    if text.is_empty() {
        return Vec::new();
    }
    let body = text.strip_suffix('\n').unwrap_or(text);
    body.split('\n').collect()
}

/// `{n:6}\t{line}` for each line, numbering from `first`.
pub(crate) fn numbered(lines: &[&str], first: usize) -> String {
    let mut out = String::with_capacity(lines.iter().map(|l| l.len() + 8).sum());
    for (i, l) in lines.iter().enumerate() {
        out.push_str(&format!("{:6}\t{}\n", first + i, l));
    }
    out
}

/// Lines `first..=last` (1-based) with [`SNIPPET_CONTEXT`] lines around.
fn snippet(lines: &[&str], first: usize, last: usize) -> String {
    if lines.is_empty() {
        return String::new();
    }
    let start = first.saturating_sub(SNIPPET_CONTEXT).max(1);
    let end = (last + SNIPPET_CONTEXT).min(lines.len());
    if start > end {
        return String::new();
    }
    numbered(&lines[start - 1..end], start)
}

/// A `view_range` that does not fit the file (`lines` long); the text is what the model sees.
#[derive(Debug, thiserror::Error)]
enum RangeError {
    #[error("view_range must be a list of two integers, got {0:?}.")]
    Shape(Vec<i64>),
    #[error("Invalid view_range {range:?}: the first element must be within [1, {lines}].")]
    Start { range: Vec<i64>, lines: usize },
    #[error(
        "Invalid view_range {range:?}: the second element must be -1 or within [{start}, {lines}]."
    )]
    End {
        range: Vec<i64>,
        start: i64,
        lines: usize,
    },
}

fn check_range(r: &[i64], n: usize) -> Result<(usize, usize), RangeError> {
    let [start, end] = r else {
        return Err(RangeError::Shape(r.to_vec()));
    };
    let (start, end) = (*start, *end);
    if start < 1 || start as usize > n.max(1) {
        return Err(RangeError::Start {
            range: r.to_vec(),
            lines: n,
        });
    }
    let end = if end == -1 { n as i64 } else { end };
    if end < start || end as usize > n {
        return Err(RangeError::End {
            range: r.to_vec(),
            start,
            lines: n,
        });
    }
    Ok((start as usize, (end as usize).max(start as usize).min(n)))
}

/// A condensed view of a Python file: every `def` whose body spans 4 or more lines keeps its
/// signature and gets `... eliding lines a-b ...` instead of the body. Function extents come from
/// indentation (R2E uses Python's `ast`; indentation agrees for ordinary code and needs no
/// interpreter in the sandbox).
pub(crate) fn condensed(lines: &[&str]) -> String {
    let mut out = String::new();
    let mut i = 0;
    while i < lines.len() {
        if let Some((header_end, body_end)) = function_extent(lines, i) {
            let body_start = header_end + 1;
            if body_end + 1 - body_start >= 4 {
                out.push_str(&numbered(&lines[i..=header_end], i + 1));
                let indent: String = lines[body_start]
                    .chars()
                    .take_while(|c| c.is_whitespace())
                    .collect();
                out.push_str(&format!(
                    "{:6}\t{indent}... eliding lines {}-{} ...\n",
                    body_start + 1,
                    body_start + 1,
                    body_end + 1
                ));
                i = body_end + 1;
                continue;
            }
        }
        out.push_str(&numbered(&lines[i..=i], i + 1));
        i += 1;
    }
    out
}

fn indent_of(line: &str) -> usize {
    line.len() - line.trim_start().len()
}

/// For a `def`/`async def` at line `i`: the last line of its signature and of its body.
fn function_extent(lines: &[&str], i: usize) -> Option<(usize, usize)> {
    let trimmed = lines[i].trim_start();
    if !(trimmed.starts_with("def ") || trimmed.starts_with("async def ")) {
        return None;
    }
    let indent = indent_of(lines[i]);
    // The signature ends at the first line where brackets balance and the line ends with ':'.
    let mut depth: i64 = 0;
    let mut header_end = None;
    for (j, line) in lines.iter().enumerate().skip(i) {
        let code = line.split('#').next().unwrap_or("");
        for c in code.chars() {
            match c {
                '(' | '[' | '{' => depth += 1,
                ')' | ']' | '}' => depth -= 1,
                _ => {}
            }
        }
        if depth <= 0 {
            if code.trim_end().ends_with(':') {
                header_end = Some(j);
            }
            break;
        }
        if j > i + 50 {
            break;
        }
    }
    let header_end = header_end?;
    let mut body_end = None;
    for (j, line) in lines.iter().enumerate().skip(header_end + 1) {
        if line.trim().is_empty() {
            continue;
        }
        if indent_of(line) <= indent {
            break;
        }
        body_end = Some(j);
    }
    body_end.map(|b| (header_end, b))
}

impl Tool for EditorTool {
    fn name(&self) -> &str {
        &self.cfg.name
    }

    fn schema(&self) -> Value {
        let mut props = json!({
            "command": {
                "type": "string",
                "enum": self.cfg.commands,
                "description": format!("The command to run: {}.", self.cfg.commands.join(", ")),
            },
            "path": {"type": "string", "description": "Absolute path to a file or directory, e.g. /testbed/src/module.py."},
            "file_text": {"type": "string", "description": "For `create`: the content of the new file."},
            "old_str": {"type": "string", "description": "For `str_replace`: the exact text to replace; it must occur exactly once."},
            "new_str": {"type": "string", "description": "For `str_replace`: the replacement text. For `insert`: the text to insert."},
            "insert_line": {"type": "integer", "description": "For `insert`: new_str is inserted after this line (0 = top of file)."},
            "view_range": {
                "type": "array", "items": {"type": "integer"},
                "description": "For `view` of a file: [start, end] lines, 1-based and inclusive; end -1 means end of file."
            },
        });
        if self.cfg.concise_param {
            props["concise"] = json!({"type": "boolean", "description": "For `view` of a .py file: show a condensed outline with long function bodies elided."});
        }
        let ext_note = match &self.cfg.view_extensions {
            Some(exts) => format!(
                " `view` accepts only {} files and directories.",
                exts.iter()
                    .map(|e| format!(".{e}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            None => String::new(),
        };
        let undo = if self.cfg.commands.contains(&"undo_edit") {
            "\n* `undo_edit` reverts the last edit made to a file."
        } else {
            ""
        };
        let description = format!(
            "View, create and edit files.\n\
             * `view` of a file prints it with line numbers (like `cat -n`); long Python files are shown condensed \
             unless a view_range is given. `view` of a directory lists files up to 2 levels deep.{ext_note}\n\
             * `create` writes a new file and refuses to overwrite an existing one.\n\
             * `str_replace` replaces old_str with new_str; old_str must match exactly one place in the file, \
             whitespace included.\n\
             * `insert` inserts new_str after line insert_line.{undo}\n\
             Long outputs are clipped."
        );
        function_schema(&self.cfg.name, &description, props, &["command", "path"])
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
    fn split_lines_matches_cat() {
        assert_eq!(split_lines("a\nb\n"), ["a", "b"]);
        assert_eq!(split_lines("a\nb"), ["a", "b"]);
        assert_eq!(split_lines("\n"), [""]);
        assert!(split_lines("").is_empty());
    }

    #[test]
    fn ranges_are_validated() {
        assert_eq!(check_range(&[2, -1], 5).unwrap(), (2, 5));
        assert_eq!(check_range(&[1, 5], 5).unwrap(), (1, 5));
        assert!(check_range(&[0, 3], 5).is_err());
        assert!(check_range(&[3, 2], 5).is_err());
        assert!(check_range(&[1, 6], 5).is_err());
        assert!(check_range(&[1], 5).is_err());
    }

    #[test]
    fn condensed_elides_long_bodies_only() {
        let src = "import os\n\nclass A:\n    def short(self):\n        return 1\n\n    def long(self,\n             x):\n        a = 1\n        b = 2\n        c = 3\n        return a + b + c + x\n\ndef top():\n    pass\n";
        let lines = split_lines(src);
        let out = condensed(&lines);
        assert!(
            out.contains("     9\t        ... eliding lines 9-12 ...\n"),
            "{out}"
        );
        assert!(out.contains("     5\t        return 1\n"), "{out}");
        assert!(out.contains("     8\t             x):\n"), "{out}");
        assert!(!out.contains("c = 3"), "{out}");
        assert!(out.contains("    15\t    pass"), "{out}");
    }
}
