//! `dojo tasks analyze` through the real binary against a scripted OpenAI-compatible model on
//! loopback (no model that writes analyses runs offline): each task's initial analysis is
//! generated once at temperature 0 and cached per task and model, where `dojo rollout` and
//! `dojo curate` look it up; a task without a gold patch is refused before any request.

mod common;

use std::sync::{Arc, Mutex};

use common::{BUNDLED, dojo, scratch};

/// Answers every request with two bullets; keeps each request's body.
fn analyst() -> (
    String,
    Arc<Mutex<Vec<serde_json::Value>>>,
    tokio::runtime::Runtime,
) {
    use axum::Json;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let keep = seen.clone();
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        axum::routing::post(move |Json(req): Json<serde_json::Value>| {
            let keep = keep.clone();
            async move {
                keep.lock().unwrap().push(req.clone());
                Json(serde_json::json!({
                    "id": "a", "object": "chat.completion", "created": 0, "model": req["model"],
                    "choices": [{"index": 0, "finish_reason": "stop", "message": {
                        "role": "assistant",
                        "content": "<think>read the patch</think>\n- The parser drops sections.\n- The tests check section order.\n"}}],
                }))
            }
        }),
    );
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    rt.spawn(async move {
        let _: Result<(), _> = axum::serve(listener, app).await;
    });
    (format!("http://{addr}/v1"), seen, rt)
}

#[test]
fn analyses_are_generated_once_per_task_and_model_and_cached() {
    let (url, seen, _rt) = analyst();
    let dir = scratch("world-analysis");
    let policy = dir.path().join("analyst.toml");
    std::fs::write(
        &policy,
        format!("kind = \"openai\"\nmodel = \"analyst\"\nbase_url = \"{url}\"\n"),
    )
    .unwrap();
    let cache = dir.path().join("cache");
    let first_line = std::fs::read_to_string(BUNDLED)
        .unwrap()
        .lines()
        .next()
        .unwrap()
        .to_string();
    let task: serde_json::Value = serde_json::from_str(&first_line).unwrap();
    let id = task["instance_id"].as_str().unwrap().to_string();
    let tasks = dir.path().join("tasks.jsonl");
    std::fs::write(&tasks, format!("{first_line}\n")).unwrap();
    let args = [
        "tasks",
        "analyze",
        "--tasks",
        tasks.to_str().unwrap(),
        "--model",
        policy.to_str().unwrap(),
        "--cache",
        cache.to_str().unwrap(),
    ];
    let out = dojo(&args);
    assert!(out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("1 tasks analysed by analyst (0 failed)"),
        "{stdout}"
    );
    {
        let reqs = seen.lock().unwrap();
        assert_eq!(reqs.len(), 1);
        assert_eq!(reqs[0]["temperature"], 0.0);
        assert_eq!(reqs[0]["model"], "analyst");
    }
    // Cached, schema-versioned, keyed by task and model; the reasoning is not kept.
    let path = dojo_world::analysis::analysis_cache_path(&cache, &id, "analyst");
    let cached: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    assert_eq!(cached["schema_version"], 1);
    assert_eq!(cached["task_id"], id.as_str());
    assert_eq!(
        dojo_world::analysis::lookup_analysis(&cache, &id, "analyst").as_deref(),
        Some("- The parser drops sections.\n- The tests check section order.")
    );
    // A second run asks nothing.
    assert!(dojo(&args).status.success());
    assert_eq!(seen.lock().unwrap().len(), 1);

    // A task without a gold patch: refused, naming the task and the field, before any request.
    let mut bare = task.clone();
    bare["instance_id"] = "bare-1".into();
    bare["patch"] = "".into();
    std::fs::write(&tasks, format!("{bare}\n")).unwrap();
    let out = dojo(&args);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("bare-1") && stderr.contains("patch"),
        "{stderr}"
    );
    assert_eq!(seen.lock().unwrap().len(), 1);
}
