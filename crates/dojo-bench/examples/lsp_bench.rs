//! Benchmark of the LSP tool on sympy 1.12: cold/warm latency per command and peak memory per
//! server, and definition accuracy against the grep baseline (the `def`/`class` search an
//! agent without LSP runs), on the cases in `fixtures/lsp/sympy_cases.json`.
//!
//! ```text
//! cargo run -p dojo-bench --no-default-features --example lsp_bench -- \
//!     [--servers ty,pyrefly,pyright,basedpyright] [--latency-servers LIST|none] [--rounds 5] [--out benchmarks/results/lsp.md]
//! ```

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dojo_lsp::{HostBackend, LspSession, LspTool, ServerKind, SessionOptions};
use serde_json::{Value, json};

const SYMPY_URL: &str = "https://files.pythonhosted.org/packages/e5/57/3485a1a3dff51bfd691962768b14310dae452431754bfc091250be50dd29/sympy-1.12.tar.gz";
const SYMPY_SHA: &str = "ebf595c8dac3e0fdc4152c51878b498396ec7f30e7a914d6071e674d49420fb8";

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let opt = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let servers: Vec<ServerKind> = opt("--servers")
        .unwrap_or_else(|| "ty,pyright".into())
        .split(',')
        .map(|s| ServerKind::parse(s).ok_or_else(|| format!("unknown server {s}")))
        .collect::<Result<_, _>>()?;
    // Servers for the latency table (default: all); pyright's cold starts take minutes here.
    let latency_servers: Vec<ServerKind> = match opt("--latency-servers") {
        Some(l) if l == "none" => vec![],
        Some(l) => l
            .split(',')
            .map(|s| ServerKind::parse(s).ok_or_else(|| format!("unknown server {s}")))
            .collect::<Result<_, _>>()?,
        None => servers.clone(),
    };
    let rounds: usize = opt("--rounds").map_or(Ok(5), |r| r.parse())?;
    let out = opt("--out");

    let archive = dojo_cache::Cache::open()?.fetch(SYMPY_URL, SYMPY_SHA, "sympy-1.12.tar.gz")?;
    let tmp = tempfile::tempdir()?;
    let st = std::process::Command::new("tar")
        .arg("-xzf")
        .arg(&archive)
        .arg("-C")
        .arg(tmp.path())
        .status()?;
    if !st.success() {
        return Err(format!("unpacking {}", archive.display()).into());
    }
    let root = tmp.path().join("sympy-1.12");
    let cases_path = dojo_bench::fixture("lsp/sympy_cases.json");
    let cases: Value = serde_json::from_str(&std::fs::read_to_string(&cases_path)?)?;
    let cases = cases["cases"].as_array().cloned().unwrap_or_default();

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let mut md = String::new();
    md.push_str(&format!(
        "# LSP tool benchmark (sympy 1.12)\n\nMachine: {} cores, shared with other builds (loaded). Servers: {}. \
         Warm figures are medians of {rounds} repeats. Memory is the peak RSS (VmHWM) summed over the server's process tree.\n\n",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        servers.iter().map(|s| format!("{} {}", s.name(), s.wheel().version)).collect::<Vec<_>>().join(", ")
    ));

    // Latency: one fresh server per command, so "cold" includes start, initialisation and
    // whatever indexing that command needs.
    md.push_str("## Latency per command\n\nPosition: `_sympify` used at `sympy/core/expr.py:236` (defined at `sympy/core/sympify.py:502`); document symbols of `sympy/core/expr.py`; workspace symbols for `_sympify`.\n\n");
    md.push_str("| server | command | cold (fresh server) | warm (median) | answer | peak RSS |\n|---|---|---|---|---|---|\n");
    let calls = [
        (
            "get_definition",
            json!({"command": "get_definition", "file_path": "sympy/core/expr.py", "symbol": "_sympify", "line": 236}),
        ),
        (
            "get_type_definition",
            json!({"command": "get_type_definition", "file_path": "sympy/core/expr.py", "symbol": "_sympify", "line": 236}),
        ),
        (
            "get_implementation",
            json!({"command": "get_implementation", "file_path": "sympy/core/expr.py", "symbol": "_sympify", "line": 236}),
        ),
        (
            "get_hover",
            json!({"command": "get_hover", "file_path": "sympy/core/expr.py", "symbol": "_sympify", "line": 236}),
        ),
        (
            "get_references",
            json!({"command": "get_references", "file_path": "sympy/core/sympify.py", "symbol": "_sympify", "line": 502}),
        ),
        (
            "get_document_highlights",
            json!({"command": "get_document_highlights", "file_path": "sympy/core/expr.py", "symbol": "_sympify", "line": 236}),
        ),
        (
            "get_document_symbols",
            json!({"command": "get_document_symbols", "file_path": "sympy/core/expr.py"}),
        ),
        (
            "get_workspace_symbols",
            json!({"command": "get_workspace_symbols", "query": "_sympify"}),
        ),
        (
            "get_call_hierarchy",
            json!({"command": "get_call_hierarchy", "file_path": "sympy/core/sympify.py", "symbol": "_sympify", "line": 502}),
        ),
    ];
    let mut peak_by_server = Vec::new();
    for &kind in &latency_servers {
        let launch = dojo_lsp::install(kind)?;
        let mut peak_all = 0u64;
        for (name, call) in &calls {
            let (cold, warm, summary, peak) = rt.block_on(async {
                let tool = new_tool(&root, kind, launch.clone())?;
                let t = Instant::now();
                let o = tool.call_detailed(call).await;
                let cold = t.elapsed();
                let mut warm = Vec::new();
                for _ in 0..rounds {
                    let t = Instant::now();
                    let _ = tool.call_detailed(call).await;
                    warm.push(t.elapsed());
                }
                warm.sort();
                let peak = match tool.session().server_pid().await {
                    Some(pid) => tree_peak_rss(pid),
                    None => 0,
                };
                tool.session().shutdown().await;
                Ok::<_, Box<dyn std::error::Error>>((
                    cold,
                    warm[warm.len() / 2],
                    summarize(&o.text, o.success),
                    peak,
                ))
            })?;
            peak_all = peak_all.max(peak);
            eprintln!(
                "{} {name}: cold {cold:?} warm {warm:?} {summary} {} MB",
                kind.name(),
                peak >> 20
            );
            md.push_str(&format!(
                "| {} | {name} | {} | {} | {summary} | {} MB |\n",
                kind.name(),
                fmt_dur(cold),
                fmt_dur(warm),
                peak >> 20
            ));
        }
        peak_by_server.push((kind, peak_all));
    }

    // Accuracy: LSP definition vs grep for `def NAME`/`class NAME`.
    md.push_str(&format!(
        "\n## Definition accuracy: LSP vs grep ({} use sites)\n\nCases: `crates/dojo-bench/fixtures/lsp/sympy_cases.json`, generated by `fixtures/lsp/make_cases.py` from sympy's runtime bindings \
         (truth = the `def`/`class` line of the object the name is bound to). {}. \
         Grep baseline: `grep -rnE --include='*.py' '^\\s*(async\\s+)?(def|class)\\s+NAME\\b' .` (what an agent's search finds for a definition). \
         Precision = correct locations / returned locations (micro-averaged); recall = cases whose true definition is among the returned locations.\n\n",
        cases.len(),
        category_counts(&cases)
    ));
    md.push_str("| method | category | cases | returned locations | correct | precision | recall | mean locations per case |\n|---|---|---|---|---|---|---|---|\n");
    let mut methods: Vec<(String, Vec<Locations>)> = vec![(
        "grep".into(),
        cases.iter().map(|c| grep_defs(&root, c)).collect(),
    )];
    for &kind in &servers {
        let launch = dojo_lsp::install(kind)?;
        let answers = rt.block_on(async {
            let backend = Arc::new(HostBackend::new(&root)?);
            let session = LspSession::new(backend, kind, launch, SessionOptions::default())?;
            let mut answers = Vec::new();
            for c in &cases {
                answers.push(lsp_defs(&session, c).await);
            }
            session.shutdown().await;
            Ok::<_, dojo_lsp::LspError>(answers)
        })?;
        methods.push((format!("LSP ({})", kind.name()), answers));
    }
    // The cases each method got wrong, for the write-up (stderr: not part of the tables).
    for (method, answers) in &methods {
        for (c, got) in cases.iter().zip(answers) {
            let ok = c["truth"].as_array().into_iter().flatten().any(|t| {
                got.iter().any(|(f, l)| {
                    t["file"].as_str() == Some(f.as_str()) && t["line"].as_u64() == Some(*l as u64)
                })
            });
            if !ok {
                eprintln!(
                    "miss {method} [{}] {}:{} `{}`: truth {} got {got:?}",
                    c["category"].as_str().unwrap_or("?"),
                    c["file"].as_str().unwrap_or("?"),
                    c["line"],
                    c["symbol"].as_str().unwrap_or("?"),
                    c["truth"]
                );
            }
        }
    }
    for (method, answers) in &methods {
        for cat in ["all", "self_method", "imported", "shadowed"] {
            let (mut n, mut returned, mut correct, mut found) = (0, 0, 0, 0);
            for (c, got) in cases.iter().zip(answers) {
                if cat != "all" && c["category"] != cat {
                    continue;
                }
                let truth: BTreeSet<(String, u32)> = c["truth"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|t| {
                        (
                            t["file"].as_str().unwrap_or("").to_string(),
                            t["line"].as_u64().unwrap_or(0) as u32,
                        )
                    })
                    .collect();
                n += 1;
                returned += got.len();
                let ok = got.iter().filter(|g| truth.contains(g)).count();
                correct += ok;
                if ok > 0 {
                    found += 1;
                }
            }
            md.push_str(&format!(
                "| {method} | {cat} | {n} | {returned} | {correct} | {} | {} | {:.2} |\n",
                pct(correct, returned),
                pct(found, n),
                returned as f64 / n.max(1) as f64
            ));
        }
    }
    md.push_str("\nPeak RSS over all latency runs: ");
    md.push_str(
        &peak_by_server
            .iter()
            .map(|(k, p)| format!("{} {} MB", k.name(), p >> 20))
            .collect::<Vec<_>>()
            .join(", "),
    );
    md.push_str("\n\nReproduce:\n\n```\ncargo run -p dojo-bench --no-default-features --example lsp_bench -- --servers ");
    md.push_str(
        &servers
            .iter()
            .map(|s| s.name())
            .collect::<Vec<_>>()
            .join(","),
    );
    let names = |v: &[ServerKind]| v.iter().map(|s| s.name()).collect::<Vec<_>>().join(",");
    md.push_str(&format!(
        " --latency-servers {} --rounds {rounds} --out benchmarks/results/lsp.md\n```\n",
        names(&latency_servers)
    ));
    match out {
        Some(p) => std::fs::write(&p, &md)?,
        None => print!("{md}"),
    }
    Ok(())
}

/// (file, 1-based line) pairs.
type Locations = Vec<(String, u32)>;

fn new_tool(
    root: &Path,
    kind: ServerKind,
    launch: dojo_lsp::Launch,
) -> Result<LspTool, dojo_lsp::LspError> {
    LspTool::from_launch(
        Arc::new(HostBackend::new(root)?),
        kind,
        launch,
        SessionOptions::default(),
    )
}

/// (file, 1-based line) of every definition the server returns for the case.
async fn lsp_defs(session: &LspSession, c: &Value) -> Vec<(String, u32)> {
    let file = c["file"].as_str().unwrap_or("");
    let symbol = c["symbol"].as_str().unwrap_or("");
    let line = c["line"].as_u64().unwrap_or(0) as usize;
    let Ok(text) = std::fs::read_to_string(session.backend().root().join(file)) else {
        return vec![];
    };
    let Some(l) = text.lines().nth(line.saturating_sub(1)) else {
        return vec![];
    };
    // Same column rule as the tool: first whole-word occurrence on the line.
    let Some(col) = l.match_indices(symbol).map(|(i, _)| i).find(|&i| {
        let b = l[..i].chars().next_back();
        let a = l[i + symbol.len()..].chars().next();
        !b.is_some_and(|c| c.is_alphanumeric() || c == '_')
            && !a.is_some_and(|c| c.is_alphanumeric() || c == '_')
    }) else {
        return vec![];
    };
    let character = l[..col].encode_utf16().count();
    let Ok(uri) = session.uri(file) else {
        return vec![];
    };
    let params = json!({"textDocument": {"uri": uri}, "position": {"line": line - 1, "character": character}});
    let Ok(v) = session
        .query(Some(file), "textDocument/definition", params)
        .await
    else {
        return vec![];
    };
    let items: Vec<Value> = match v {
        Value::Array(a) => a,
        Value::Null => vec![],
        other => vec![other],
    };
    items
        .iter()
        .filter_map(|it| {
            let uri = it.get("targetUri").or_else(|| it.get("uri"))?.as_str()?;
            let range = it.get("targetSelectionRange").or_else(|| it.get("range"))?;
            let url = lsp_types::Url::parse(uri).ok()?;
            Some((
                session.display_path(&url),
                range["start"]["line"].as_u64()? as u32 + 1,
            ))
        })
        .collect()
}

/// The grep baseline: every `def NAME` / `class NAME` line in the tree.
fn grep_defs(root: &Path, c: &Value) -> Vec<(String, u32)> {
    let symbol = c["symbol"].as_str().unwrap_or("");
    let out = std::process::Command::new("grep")
        .args([
            "-rnE",
            "--include=*.py",
            &format!(r"^\s*(async\s+)?(def|class)\s+{symbol}\b"),
            ".",
        ])
        .current_dir(root)
        .output();
    let Ok(out) = out else { return vec![] };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let mut it = l.splitn(3, ':');
            let f = it.next()?.trim_start_matches("./").to_string();
            let n = it.next()?.parse().ok()?;
            Some((f, n))
        })
        .collect()
}

fn category_counts(cases: &[Value]) -> String {
    let mut counts = std::collections::BTreeMap::new();
    let mut multi = 0;
    for c in cases {
        *counts
            .entry(c["category"].as_str().unwrap_or("?").to_string())
            .or_insert(0) += 1;
        if c["defined_in"].as_u64().unwrap_or(0) >= 2 {
            multi += 1;
        }
    }
    format!(
        "{}; {multi} of {} names have `def`/`class` lines in 2 or more places",
        counts
            .iter()
            .map(|(k, v)| format!("{v} {k}"))
            .collect::<Vec<_>>()
            .join(", "),
        cases.len()
    )
}

/// Sum of VmHWM over `pid` and its descendants.
fn tree_peak_rss(pid: u32) -> u64 {
    let mut total = 0;
    let mut stack = vec![pid];
    while let Some(p) = stack.pop() {
        if let Ok(s) = std::fs::read_to_string(format!("/proc/{p}/status"))
            && let Some(kb) = s
                .lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        {
            total += kb * 1024;
        }
        if let Ok(tasks) = std::fs::read_dir(format!("/proc/{p}/task")) {
            for t in tasks.flatten() {
                if let Ok(children) = std::fs::read_to_string(t.path().join("children")) {
                    stack.extend(
                        children
                            .split_whitespace()
                            .filter_map(|c| c.parse::<u32>().ok()),
                    );
                }
            }
        }
    }
    total
}

fn summarize(text: &str, ok: bool) -> String {
    if !ok {
        return format!(
            "error: {}",
            text.lines()
                .nth(2)
                .unwrap_or("")
                .chars()
                .take(60)
                .collect::<String>()
        );
    }
    text.lines()
        .nth(2)
        .unwrap_or("")
        .replace('|', "\\|")
        .chars()
        .take(70)
        .collect()
}

fn fmt_dur(d: Duration) -> String {
    if d >= Duration::from_secs(1) {
        format!("{:.2} s", d.as_secs_f64())
    } else {
        format!("{:.1} ms", d.as_secs_f64() * 1e3)
    }
}

fn pct(a: usize, b: usize) -> String {
    if b == 0 {
        "-".into()
    } else {
        format!("{:.1}%", 100.0 * a as f64 / b as f64)
    }
}
