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
use dojo_curate::chat::FormatModel;
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
fn setup() -> Option<(PathBuf, PathBuf, dojo_chat::ChatFormat)> {
    let py = match python() {
        Ok(p) => p,
        Err(e) => {
            skip(&e);
            return None;
        }
    };
    let model = dojo_chat::default_model_path()
        .and_then(|p| dojo_chat::ChatFormat::from_gguf(&p).map(|f| (p, f)));
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

/// Conversations with tool calls and observations, and the edge cases that break naive
/// tokenization at span boundaries (leading newlines/spaces, digits, unicode, empty content).
fn conversations() -> Vec<Vec<Value>> {
    let call = |id: &str, name: &str, args: &str| json!({"id": id, "type": "function", "function": {"name": name, "arguments": args}});
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

#[test]
fn rendering_and_masks_match_transformers_token_for_token() {
    let Some((py, gguf, format)) = setup() else {
        return;
    };
    let model = FormatModel::new(format.clone(), "default");
    let tools = tools();
    let mut requests = Vec::new();
    let mut ours = Vec::new();
    for msgs in conversations() {
        // What the template receives: dojo-chat writes tools and calls Hermes-style for templates
        // without tool support (SmolLM2's), so transformers gets the same normalised messages
        // and the GGUF's own template, unmodified.
        let norm = format.normalize(&msgs, Some(&tools)).unwrap();
        requests.push(json!({
            "messages": norm.messages,
            "tools": norm.tools,
            "marked_template": SMOLLM2_MARKED,
        }));
        ours.push(model.sample(&msgs, &tools).unwrap());
    }
    let theirs = oracle(&py, &gguf, &requests);
    assert_eq!(theirs.len(), ours.len());
    for (i, (o, t)) in ours.iter().zip(&theirs).enumerate() {
        // The marked copy must be the same template, or the mask comparison means nothing.
        assert_eq!(
            t["text"], t["marked_text"],
            "conversation {i}: marked template drifted"
        );
        let ids: Vec<u32> = serde_json::from_value(t["input_ids"].clone()).unwrap();
        assert_eq!(
            o.input_ids, ids,
            "conversation {i}: token ids differ from transformers"
        );
        let masks: Vec<u8> = serde_json::from_value(t["assistant_masks"].clone()).unwrap();
        assert_eq!(
            o.assistant_masks, masks,
            "conversation {i}: assistant masks differ from transformers' return_assistant_tokens_mask"
        );
        assert!(o.assistant_masks.contains(&1));
    }
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
import pyarrow.parquet as pq
res["schema_version"] = pq.read_metadata(f"{out}/tokens.parquet").metadata[b"dojo.schema_version"].decode()
print(json.dumps(res))
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
        json!(["system", "user", "assistant", "tool", "assistant", "tool"])
    );
    assert_eq!(r["messages_jsonl"]["args"]["command"], "ls 0");
    assert_eq!(r["schema_version"], "1");
}
