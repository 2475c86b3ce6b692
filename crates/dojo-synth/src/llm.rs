//! The optional second source of bugs: a language model rewrites one function with a subtle
//! bug (`llm_rewrite`), as SWE-smith's "LM Modify" strategy does.
//!
//! The model is any [`ChatBackend`] dojo already has (the OpenAI-compatible client, the embedded
//! engine); this module only builds the prompt ([`rewrite_messages`]), takes the first fenced
//! code block of the reply ([`code_block`]) and splices it over the function's byte span
//! ([`splice`]). What comes out is an ordinary [`Mutation`] (operator `llm_rewrite`, the model
//! recorded in it), validated exactly as the procedural ones are: it must parse, break a
//! baseline-passing test, pass the rerun, the duplicate check and the final `dojo validate`.
//!
//! A reply the run cannot use is not an error of the run: model failures (timeouts, 5xx,
//! refused connections) are infrastructure and counted as dropped (`llm_model_error`), and so
//! are replies without code, with code that does not parse, that rename the function, change
//! nothing, change its docstring, or point at the bug in a comment. Functions are chosen by a keyed hash of the seed,
//! like the procedural try order, so the same seed asks about the same functions.

use std::collections::BTreeMap;

use dojo_llm::{ChatBackend, ChatMessage, ChatRequest};
use futures::StreamExt;

use crate::SynthError;
use crate::operators::{Mutation, Operator};
use crate::options::{LlmSource, SynthOptions};
use crate::python;
use crate::state::{LlmRecord, State};

/// Functions longer than this are not offered to the model: the reply has to repeat the whole
/// function, and small models lose the thread on long ones.
pub const MAX_FUNCTION_LINES: usize = 60;

/// A function the model may rewrite.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FunctionSite {
    pub file: String,
    /// Qualified with its classes and outer functions (`Cache.get`).
    pub function: String,
    /// Bytes of the `def` (or `async def`) through the end of the body; decorators stay outside.
    pub start: usize,
    pub end: usize,
    /// 1-based line of `start`.
    pub line: usize,
    /// Column of `start` (the function's indentation).
    pub indent: usize,
}

impl FunctionSite {
    /// Stable key of the site (the progress record's).
    pub fn key(&self) -> String {
        format!("{}::{}@{}", self.file, self.function, self.start)
    }
}

/// Every function of `src` with a body of two statements or more and at most
/// [`MAX_FUNCTION_LINES`] lines, in file order (nested ones included).
pub fn functions_in(file: &str, src: &str) -> Vec<FunctionSite> {
    let Some(parsed) = python::parse(src) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut stack = vec![(parsed.tree.root_node(), Vec::<String>::new())];
    while let Some((n, scope)) = stack.pop() {
        let mut cur = n.walk();
        let kids: Vec<_> = n.children(&mut cur).collect();
        for k in kids.into_iter().rev() {
            let mut inner = scope.clone();
            if matches!(k.kind(), "function_definition" | "class_definition") {
                let name = k
                    .child_by_field_name("name")
                    .map_or("?", |x| &src[x.start_byte()..x.end_byte()]);
                inner.push(name.to_string());
            }
            if k.kind() == "function_definition" {
                let lines = k.end_position().row - k.start_position().row + 1;
                let statements = k
                    .child_by_field_name("body")
                    .map_or(0, |b| b.named_child_count());
                if lines <= MAX_FUNCTION_LINES && statements >= 2 {
                    out.push(FunctionSite {
                        file: file.to_string(),
                        function: inner.join("."),
                        start: k.start_byte(),
                        end: k.end_byte(),
                        line: k.start_position().row + 1,
                        indent: k.start_position().column,
                    });
                }
            }
            stack.push((k, inner));
        }
    }
    out.sort_by_key(|s| s.start);
    out
}

/// The sites to ask about for `seed`: a keyed hash of the seed and each site's key, so the
/// choice does not depend on the order files are read in.
pub fn choose(mut sites: Vec<FunctionSite>, seed: u64, n: usize) -> Vec<FunctionSite> {
    sites.sort_by_cached_key(|s| {
        dojo_cache::sha256_hex(format!("synth-llm-v1\0{seed}\0{}", s.key()))
    });
    sites.truncate(n);
    sites
}

/// The function's text, dedented to column 0 (the first line is already at its `def`).
fn function_text(src: &str, site: &FunctionSite) -> String {
    let text = &src[site.start..site.end];
    let mut out = String::new();
    for (i, line) in text.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
            let strip = line
                .char_indices()
                .take_while(|(j, c)| *j < site.indent && *c == ' ')
                .count();
            out.push_str(&line[strip..]);
        } else {
            out.push_str(line);
        }
    }
    out
}

/// The conversation sent for one function.
pub fn rewrite_messages(src: &str, site: &FunctionSite) -> Vec<ChatMessage> {
    let system = "You help build training tasks for software engineering agents. You are given one \
Python function from a real project. Rewrite it so that it contains exactly one subtle logic \
bug of the kind a developer could plausibly write: a wrong comparison or boundary, a wrong \
variable, a missed edge case, a wrong default or constant, a step done in the wrong order. \
The project's existing unit tests must be able to catch it.\n\
Rules: keep the function's name, parameters and decorators; keep the code style; do not add \
imports; do not add, change or remove comments or docstrings; never mention the bug. Reply \
with the complete rewritten function in a single ```python code block and nothing else.";
    let user = format!(
        "File `{}`, function `{}`:\n\n```python\n{}\n```",
        site.file,
        site.function,
        function_text(src, site)
    );
    vec![ChatMessage::system(system), ChatMessage::user(user)]
}

/// The first fenced code block of `reply` (```` ```python ````, ```` ```py ```` or a bare fence);
/// `None` when there is none or it is empty.
pub fn code_block(reply: &str) -> Option<String> {
    let start = reply.find("```")?;
    let after = &reply[start + 3..];
    let body_at = after.find('\n')? + 1;
    let info = after[..body_at].trim();
    if !info.is_empty() && !matches!(info, "python" | "py" | "python3") {
        return None;
    }
    let body = &after[body_at..];
    let end = body.find("```").unwrap_or(body.len());
    let code = body[..end].trim_end();
    (!code.trim().is_empty()).then(|| code.to_string())
}

/// Why a reply did not become a mutant (the `llm_*` dropped counts).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reject {
    /// The request failed (infrastructure).
    ModelError,
    NoCode,
    /// The block is not one function of the same name.
    WrongFunction,
    Unparseable,
    Unchanged,
    /// A new comment names the change (`# bug`, `# changed`, ...): it would leak the fix.
    CommentLeaks,
    /// The docstring changed: the task would be about documentation the gold patch restores,
    /// and a rewritten docstring misleads whoever reads the code for the intended behaviour.
    DocstringChanged,
}

impl Reject {
    pub fn reason(self) -> &'static str {
        match self {
            Reject::ModelError => "llm_model_error",
            Reject::NoCode => "llm_no_code",
            Reject::WrongFunction => "llm_wrong_function",
            Reject::Unparseable => "llm_unparseable",
            Reject::Unchanged => "llm_unchanged",
            Reject::CommentLeaks => "llm_comment_leaks",
            Reject::DocstringChanged => "llm_docstring_changed",
        }
    }
}

/// The docstring of the function defined by `text` (its body's leading string), whitespace
/// normalised so re-indentation does not count as a change.
fn docstring(text: &str) -> Option<String> {
    let parsed = python::parse(text)?;
    let f = parsed.tree.root_node().named_child(0)?;
    let body = f.child_by_field_name("body")?;
    let first = body.named_child(0)?;
    let s = first.named_child(0)?;
    if first.kind() != "expression_statement" || s.kind() != "string" {
        return None;
    }
    Some(
        text[s.start_byte()..s.end_byte()]
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" "),
    )
}

fn leaky_comment(line: &str) -> bool {
    let Some(i) = line.find('#') else {
        return false;
    };
    let c = line[i..].to_lowercase();
    [
        "bug",
        "changed",
        "modified",
        "introduc",
        "wrong",
        "error here",
        "subtle",
        "was ",
    ]
    .iter()
    .any(|w| c.contains(w))
}

/// Splice `code` (the model's function) over `site` in `src`: dedent it, re-indent it to the
/// function's column, and check that it is one function of the same name, changes something,
/// names no bug in a new comment, and that the whole file still parses.
pub fn splice(src: &str, site: &FunctionSite, code: &str, model: &str) -> Result<Mutation, Reject> {
    let lines: Vec<&str> = code.lines().collect();
    // Decorators the model repeated stay out: the original ones are outside the span.
    let first = lines
        .iter()
        .position(|l| {
            let t = l.trim_start();
            t.starts_with("def ") || t.starts_with("async def ")
        })
        .ok_or(Reject::WrongFunction)?;
    let lines = &lines[first..];
    let common = lines
        .iter()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.len() - l.trim_start_matches(' ').len())
        .min()
        .unwrap_or(0);
    let pad = " ".repeat(site.indent);
    let mut replacement = String::new();
    for (i, l) in lines.iter().enumerate() {
        let body = l
            .get(common.min(l.len() - l.trim_start_matches(' ').len())..)
            .unwrap_or("");
        if i > 0 {
            replacement.push('\n');
            if !body.is_empty() {
                replacement.push_str(&pad);
            }
        }
        replacement.push_str(body);
    }
    let name = site.function.rsplit('.').next().unwrap_or(&site.function);
    let head = replacement.trim_start_matches("async ").trim_start();
    if !head.starts_with(&format!("def {name}(")) && !head.starts_with(&format!("def {name} (")) {
        return Err(Reject::WrongFunction);
    }
    let original = &src[site.start..site.end];
    if replacement == original {
        return Err(Reject::Unchanged);
    }
    let old: std::collections::BTreeSet<&str> = original.lines().map(str::trim).collect();
    if replacement
        .lines()
        .filter(|l| !old.contains(l.trim()))
        .any(leaky_comment)
    {
        return Err(Reject::CommentLeaks);
    }
    let dedent = |t: &str| {
        let ws = " ".repeat(site.indent);
        t.lines()
            .map(|l| l.strip_prefix(ws.as_str()).unwrap_or(l))
            .collect::<Vec<_>>()
            .join("\n")
    };
    if docstring(&dedent(original)) != docstring(&dedent(&replacement)) {
        return Err(Reject::DocstringChanged);
    }
    let m = Mutation {
        operator: Operator::LlmRewrite,
        file: site.file.clone(),
        start: site.start,
        end: site.end,
        original: original.to_string(),
        replacement,
        line: site.line,
        function: site.function.clone(),
        function_line: site.line,
        model: Some(model.to_string()),
    };
    let new = m.apply(src);
    if !python::parses_cleanly(&new) {
        return Err(Reject::Unparseable);
    }
    // One function of that name where the old one was: the rest of the file is untouched by
    // construction; the span itself must hold exactly one top-level definition.
    let parsed = python::parse(&new).ok_or(Reject::Unparseable)?;
    let defs = parsed
        .tree
        .root_node()
        .descendant_for_byte_range(site.start, site.start + m.replacement.len())
        .map_or(0, |n| {
            let mut cur = n.walk();
            n.children(&mut cur)
                .filter(|k| {
                    k.kind() == "function_definition"
                        && k.start_byte() >= site.start
                        && k.end_byte() <= site.start + m.replacement.len()
                })
                .count()
        });
    if defs > 1 {
        return Err(Reject::WrongFunction);
    }
    Ok(m)
}

/// Ask the model about one site: the mutant, or why there is none.
pub async fn rewrite(llm: &LlmSource, src: &str, site: &FunctionSite) -> Result<Mutation, Reject> {
    let req = ChatRequest {
        model: llm.model.clone(),
        messages: rewrite_messages(src, site),
        temperature: llm.temperature,
        max_tokens: Some(llm.max_tokens.unwrap_or(2048)),
        seed: llm.seed,
        ..Default::default()
    };
    let resp = match llm.backend.complete(req).await {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!("llm_rewrite {}: {e}", site.key());
            return Err(Reject::ModelError);
        }
    };
    let text = resp
        .choices
        .first()
        .map(|c| c.message.text())
        .unwrap_or_default();
    let code = code_block(&text).ok_or(Reject::NoCode)?;
    splice(src, site, &code, &llm.label)
}

/// The model's rewrites of the functions the seed picks (asking only about those the progress
/// record does not hold yet), appended to `all`; returns (functions asked, mutants kept).
pub(crate) async fn llm_mutants(
    l: &LlmSource,
    state: &mut State,
    sources: &BTreeMap<String, String>,
    parsed_files: &[String],
    opts: &SynthOptions,
    all: &mut Vec<Mutation>,
) -> Result<(usize, usize), SynthError> {
    let sites: Vec<FunctionSite> = parsed_files
        .iter()
        .filter_map(|f| Some(functions_in(f, sources.get(f)?)))
        .flatten()
        .filter(|s| {
            opts.functions.is_empty()
                || opts
                    .functions
                    .iter()
                    .any(|f| s.function.contains(f.as_str()))
        })
        .collect();
    let chosen = choose(sites, opts.seed, l.rewrites);
    let todo: Vec<FunctionSite> = chosen
        .iter()
        .filter(|s| !state.llm.contains_key(&s.key()))
        .cloned()
        .collect();
    if !todo.is_empty() {
        opts.progress.line(&format!(
            "asking {} to rewrite {} function(s) with a bug",
            l.label,
            todo.len()
        ));
    }
    let mut stream = futures::stream::iter(todo)
        .map(|site| async move {
            let r = match sources.get(&site.file) {
                Some(src) => rewrite(l, src, &site).await,
                None => Err(Reject::ModelError),
            };
            (site, r)
        })
        .buffered(opts.workers.max(1));
    while let Some((site, r)) = stream.next().await {
        let rec = match r {
            Ok(m) => LlmRecord {
                site: site.key(),
                outcome: "ok".into(),
                mutation: Some(m),
            },
            Err(why) => LlmRecord {
                site: site.key(),
                outcome: why.reason().into(),
                mutation: None,
            },
        };
        state.record_llm(&rec)?;
    }
    let mut ok = 0;
    for site in &chosen {
        if let Some(m) = state.llm.get(&site.key()).and_then(|r| r.mutation.clone()) {
            ok += 1;
            all.push(m);
        }
    }
    Ok((chosen.len(), ok))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SRC: &str = r#"import functools


class Cache:
    @functools.lru_cache
    def get(self, key, default=None):
        """Look up key."""
        if key in self.data:
            return self.data[key]
        return default

    def size(self):
        return len(self.data)


def clamp(x, lo, hi):
    if x < lo:
        return lo
    return min(x, hi)
"#;

    fn site(function: &str) -> FunctionSite {
        functions_in("pkg/cache.py", SRC)
            .into_iter()
            .find(|s| s.function == function)
            .unwrap()
    }

    #[test]
    fn functions_are_found_with_their_spans() {
        let f = functions_in("pkg/cache.py", SRC);
        let names: Vec<&str> = f.iter().map(|s| s.function.as_str()).collect();
        // `size` has one statement: too small to hide a bug the model would not make obvious.
        assert_eq!(names, ["Cache.get", "clamp"]);
        assert!(SRC[f[0].start..f[0].end].starts_with("def get(self"));
        assert_eq!((f[0].line, f[0].indent), (6, 4));
        let chosen = choose(f.clone(), 3, 1);
        assert_eq!(chosen, choose(f.clone(), 3, 1));
        assert_eq!(chosen.len(), 1);
    }

    #[test]
    fn the_prompt() {
        let msgs = rewrite_messages(SRC, &site("Cache.get"));
        let shown: Vec<String> = msgs
            .iter()
            .map(|m| format!("[{:?}]\n{}", m.role, m.text()))
            .collect();
        insta::assert_snapshot!(shown.join("\n\n"));
    }

    #[test]
    fn code_blocks() {
        assert_eq!(
            code_block("Sure:\n```python\ndef f():\n    pass\n```\nDone").as_deref(),
            Some("def f():\n    pass")
        );
        assert_eq!(
            code_block("```\ndef f(): pass\n```").as_deref(),
            Some("def f(): pass")
        );
        assert_eq!(code_block("no code at all"), None);
        assert_eq!(code_block("```bash\nls\n```"), None);
        assert_eq!(code_block("```python\n\n```"), None);
        // An unterminated block (a reply cut at max_tokens) is taken to its end.
        assert_eq!(code_block("```py\nx = 1").as_deref(), Some("x = 1"));
    }

    #[test]
    fn a_method_is_reindented_and_spliced() {
        let s = site("Cache.get");
        let reply = "def get(self, key, default=None):\n    \"\"\"Look up key.\"\"\"\n    if key not in self.data:\n        return self.data[key]\n    return default";
        let m = splice(SRC, &s, reply, "openai:m").unwrap();
        let new = m.apply(SRC);
        assert!(new.contains("    @functools.lru_cache\n    def get(self, key, default=None):\n        \"\"\"Look up key.\"\"\"\n        if key not in self.data:\n"), "{new}");
        assert!(new.contains("\n    def size(self):"), "{new}");
        assert_eq!(m.operator, Operator::LlmRewrite);
        assert_eq!(m.model.as_deref(), Some("openai:m"));
        assert_eq!(
            crate::diff::changed_lines(&crate::diff::unified_diff("pkg/cache.py", SRC, &new)),
            2
        );
    }

    #[test]
    fn unusable_replies_are_rejected() {
        let s = site("clamp");
        let same =
            "def clamp(x, lo, hi):\n    if x < lo:\n        return lo\n    return min(x, hi)";
        assert_eq!(splice(SRC, &s, same, "m"), Err(Reject::Unchanged));
        let renamed = "def clip(x, lo, hi):\n    return x";
        assert_eq!(splice(SRC, &s, renamed, "m"), Err(Reject::WrongFunction));
        let broken = "def clamp(x, lo, hi):\n    if x <\n        return lo";
        assert_eq!(splice(SRC, &s, broken, "m"), Err(Reject::Unparseable));
        let leaky = "def clamp(x, lo, hi):\n    if x <= lo:  # bug: was <\n        return lo\n    return min(x, hi)";
        assert_eq!(splice(SRC, &s, leaky, "m"), Err(Reject::CommentLeaks));
        let s = site("Cache.get");
        let redoc =
            "def get(self, key, default=None):\n    \"\"\"Look up a key.\"\"\"\n    return default";
        assert_eq!(splice(SRC, &s, redoc, "m"), Err(Reject::DocstringChanged));
        let undoc = "def get(self, key, default=None):\n    return default";
        assert_eq!(splice(SRC, &s, undoc, "m"), Err(Reject::DocstringChanged));
        let s = site("clamp");
        let two = "def clamp(x, lo, hi):\n    return x\n\ndef clamp2(x):\n    return x";
        assert_eq!(splice(SRC, &s, two, "m"), Err(Reject::WrongFunction));
        let ok = "def clamp(x, lo, hi):\n    if x <= lo:\n        return lo\n    return min(x, hi)";
        let m = splice(SRC, &s, ok, "m").unwrap();
        assert!(python::parses_cleanly(&m.apply(SRC)));
    }
}
