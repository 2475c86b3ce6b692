//! `dojo tasks analyze` through the real binary against a scripted OpenAI-compatible model on
//! loopback (no model that writes analyses runs offline): each task's initial analysis is
//! generated once at temperature 0 and cached per task and model, where `dojo rollout` and
//! `dojo curate` look it up; a task without a gold patch is refused before any request.

mod common;

use common::{BUNDLED, chat_server, dojo, scratch};

#[test]
fn analyses_are_generated_once_per_task_and_model_and_cached() {
    let (url, seen, _rt) = chat_server(|_| {
        "<think>read the patch</think>\n- The parser drops sections.\n- The tests check section order.\n".into()
    });
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
