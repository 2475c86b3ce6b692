//! `search`: find a term in the `.py` files of a directory (per-file match counts) or in one file
//! (matching lines with numbers), R2E-Gym style. Runs `grep` in the sandbox.

use dojo_llm::BoxFuture;
use dojo_sandbox::{ExecRequest, WORKSPACE};
use serde_json::{Map, Value, json};

use super::{Args, Tool, ToolContext, ToolError, ToolOutput, env_err, function_schema, wrap};

/// More matching files than this and the agent is asked to narrow the search.
const MAX_FILES: usize = 100;

pub struct SearchTool;

const SCRIPT: &str = r#"
if [ -d "$DOJO_P" ]; then
  echo DIR
  grep -rcF --include='*.py' --exclude='.*' --exclude-dir='.*' -e "$DOJO_T" -- "$DOJO_P" 2>/dev/null | grep -v ':0$'
elif [ -f "$DOJO_P" ]; then
  echo FILE
  grep -nF -e "$DOJO_T" -- "$DOJO_P" 2>/dev/null
else
  echo MISSING
fi
exit 0
"#;

/// Resolve `path` against `/testbed` and drop `.` segments and trailing slashes (grep treats a
/// command-line `.` as hidden).
fn resolve(path: &str) -> String {
    let abs = if path.starts_with('/') {
        path.to_string()
    } else {
        format!("{WORKSPACE}/{path}")
    };
    let parts: Vec<&str> = abs
        .split('/')
        .filter(|p| !p.is_empty() && *p != ".")
        .collect();
    format!("/{}", parts.join("/"))
}

impl SearchTool {
    async fn run(
        &self,
        ctx: &mut ToolContext<'_>,
        args: &Map<String, Value>,
    ) -> Result<ToolOutput, ToolError> {
        let a = Args(args);
        let term = match a.required_str("search_term") {
            Ok(t) if !t.is_empty() => t,
            Ok(_) => {
                return Ok(ToolOutput::error(wrap(
                    "search",
                    "ERROR: search_term must not be empty.",
                )));
            }
            Err(e) => return Ok(ToolOutput::error(wrap("search", &format!("ERROR: {e}")))),
        };
        let path = match a.str("path") {
            Ok(p) => resolve(p.as_deref().unwrap_or(".")),
            Err(e) => return Ok(ToolOutput::error(wrap("search", &format!("ERROR: {e}")))),
        };
        let mut req = ExecRequest::shell(SCRIPT).timeout(ctx.command_timeout);
        req.env.insert("DOJO_P".into(), path.clone());
        req.env.insert("DOJO_T".into(), term.clone());
        let out = ctx.ws.exec(&req).await.map_err(env_err("search"))?;
        let stdout = out.stdout_lossy();
        let mut lines = stdout.lines();
        let body = match lines.next() {
            Some("DIR") => {
                let mut files: Vec<(String, u64)> = lines
                    .filter_map(|l| l.rsplit_once(':'))
                    .filter_map(|(f, n)| Some((f.to_string(), n.parse().ok()?)))
                    .collect();
                files.sort();
                if files.is_empty() {
                    format!("No matches found for \"{term}\" in {path}")
                } else if files.len() > MAX_FILES {
                    format!(
                        "More than {MAX_FILES} files matched for \"{term}\" in {path}. Please narrow your search."
                    )
                } else {
                    let total: u64 = files.iter().map(|(_, n)| n).sum();
                    let mut s = format!("Found {total} matches for \"{term}\" in {path}:\n");
                    for (f, n) in &files {
                        let rel = f.strip_prefix(&path).unwrap_or(f).trim_start_matches('/');
                        s.push_str(&format!("./{rel} ({n} matches)\n"));
                    }
                    s.push_str(&format!("End of matches for \"{term}\" in {path}"));
                    s
                }
            }
            Some("FILE") => {
                let hits: Vec<&str> = lines.collect();
                if hits.is_empty() {
                    format!("No matches found for \"{term}\" in {path}")
                } else {
                    let (shown, _) = super::bash::truncate(&hits.join("\n"), 100, 0, 20_000);
                    format!("Matches for \"{term}\" in {path}:\n{shown}")
                }
            }
            _ => {
                return Ok(ToolOutput::error(wrap(
                    "search",
                    &format!("ERROR: Path '{path}' does not exist."),
                )));
            }
        };
        Ok(ToolOutput::ok(wrap("search", &body)))
    }
}

impl Tool for SearchTool {
    fn name(&self) -> &str {
        "search"
    }
    fn schema(&self) -> Value {
        function_schema(
            "search",
            "Search for a term in files.\n\
             * If `path` is a directory (default: the repository root), list the non-hidden .py files under it \
             that contain the term, with match counts.\n\
             * If `path` is a file, print the matching lines with their line numbers.\n\
             * The term is matched literally (no regular expressions).",
            json!({
                "search_term": {"type": "string", "description": "The text to search for."},
                "path": {"type": "string", "description": "Directory or file to search (default: /testbed)."},
            }),
            &["search_term"],
        )
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
    fn paths_resolve_against_the_workspace() {
        assert_eq!(resolve("."), "/testbed");
        assert_eq!(resolve("src/./pkg/"), "/testbed/src/pkg");
        assert_eq!(resolve("/testbed/."), "/testbed");
    }
}
