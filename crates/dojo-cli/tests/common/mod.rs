//! Helpers shared by the end-to-end tests of the `dojo` binary (each test file includes this
//! module; not every file uses every helper).
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The bundled benchmark's task file.
pub const BUNDLED: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../tasksets/mini/tasks.jsonl"
);

/// `script` followed by an exit that skips the interpreter's teardown, for Python checks that load
/// with `datasets`: pyarrow's reader threads can abort that teardown ("terminate called without
/// an active exception", apache/arrow#45214) after the answer is already printed.
pub fn py_exit_after(script: &str) -> String {
    format!("{script}import os, sys; sys.stdout.flush(); os._exit(0)\n")
}

/// Under `CI=true` a missing prerequisite CI provides is a failure, not a skip.
pub fn ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// Where `scripts/setup-tools.sh` puts the pinned Python tools (`uv`, `datasets`, …).
pub fn pytools() -> PathBuf {
    std::env::var_os("DOJO_PYTOOLS").map_or_else(
        || PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../target/pytools")),
        PathBuf::from,
    )
}

/// Run the real binary with `args` and the pinned tools; echo everything for failing tests.
pub fn dojo(args: &[&str]) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_dojo"))
        .args(args)
        .env("DOJO_PYTOOLS", pytools())
        .output()
        .expect("running the dojo binary");
    eprintln!(
        "$ dojo {}\n--- exit {:?}\n--- stdout\n{}--- stderr\n{}",
        args.join(" "),
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A scratch directory (removed on drop) for one test.
pub fn scratch(tag: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("dojo-cli-{tag}-"))
        .tempdir()
        .expect("scratch dir")
}

/// The sandbox can run and the bundled tasks `ids` have their trees and environments (built
/// now if needed, which needs PyPI and `uv`: `source scripts/setup-tools.sh`). `Err` = the
/// reason to skip; under `CI=true` a missing kernel feature fails instead.
pub fn bundled_ready(ids: &[&str]) -> Result<(), String> {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if std::env::var_os("DOJO_PYTOOLS").is_none() {
            // SAFETY: set once, under the Once, before this test process starts other threads
            // that read the environment (std serialises its own reads with set_var).
            unsafe { std::env::set_var("DOJO_PYTOOLS", pytools()) };
        }
    });
    if !dojo_sandbox::doctor::namespaces_usable() {
        let reason = "user/mount/pid/net namespaces unavailable".to_string();
        assert!(!ci(), "CI=true: {reason}");
        return Err(reason);
    }
    let tasks = dojo_task::load_tasks(std::path::Path::new(BUNDLED)).map_err(|e| e.to_string())?;
    let reg = dojo_task::EnvRegistry::embedded().map_err(|e| e.to_string())?;
    for id in ids {
        let t = tasks
            .iter()
            .find(|t| t.instance_id == *id)
            .ok_or_else(|| format!("{id} not in the bundled benchmark"))?;
        let env = reg.resolve(t).map_err(|e| e.to_string())?;
        dojo_task::prepare(t, &env, &Default::default()).map_err(|e| {
            format!(
                "cannot prepare {id} (offline, or uv missing: source scripts/setup-tools.sh): {e}"
            )
        })?;
    }
    Ok(())
}

/// One HTTP/1.1 exchange over a fresh connection: (status, body).
pub fn http(addr: &str, method: &str, path: &str, body: &str) -> (u16, String) {
    http_with(addr, method, path, body, &[])
}

/// [`http`] with extra request headers.
pub fn http_with(
    addr: &str,
    method: &str,
    path: &str,
    body: &str,
    headers: &[(&str, &str)],
) -> (u16, String) {
    use std::io::{Read, Write};
    let extra: String = headers
        .iter()
        .map(|(k, v)| format!("{k}: {v}\r\n"))
        .collect();
    let mut s =
        std::net::TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(900))).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         {extra}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut buf = String::new();
    s.read_to_string(&mut buf).unwrap();
    let (head, rest) = buf.split_once("\r\n\r\n").unwrap_or((&buf, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, rest.to_string())
}

pub fn json_of(body: &str) -> serde_json::Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"))
}

/// A `dojo` service process (`serve`, `env serve`) started with `--port 0`: it prints the
/// address it bound on its first stdout line, so there is no race between choosing a port and
/// binding it. Killed on drop unless it was shut down.
pub struct Service {
    pub child: Child,
    pub addr: String,
    pub log: PathBuf,
}

impl Service {
    /// Spawn `dojo ARGS` (stderr to `log`) and read the address it prints.
    pub fn start(args: &[&str], log: PathBuf) -> Service {
        let mut child = Command::new(env!("CARGO_BIN_EXE_dojo"))
            .args(args)
            .env("DOJO_LOG", "info")
            .env("DOJO_PYTOOLS", pytools())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("spawn dojo");
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        // Keep draining stdout so a later print can never hit a closed pipe.
        std::thread::spawn(move || {
            let mut sink = String::new();
            while stdout.read_line(&mut sink).is_ok_and(|n| n > 0) {}
        });
        let mut s = Service {
            addr: String::new(),
            child,
            log,
        };
        let Some(addr) = line
            .trim()
            .rsplit_once("http://")
            .map(|(_, a)| a.to_string())
        else {
            panic!(
                "dojo {} printed no address ({line:?}); log:\n{}",
                args.join(" "),
                s.log_text()
            );
        };
        s.addr = addr;
        s
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Poll `path` until it answers 200 (or the process dies: fail with its log).
    pub fn wait_healthy(&mut self, path: &str) -> serde_json::Value {
        let deadline = Instant::now() + Duration::from_secs(300);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!(
                    "the service exited with {status}; log:\n{}",
                    self.log_text()
                );
            }
            if std::net::TcpStream::connect(&self.addr).is_ok() {
                let (code, body) = http(&self.addr, "GET", path, "");
                if code == 200 {
                    return json_of(&body);
                }
            }
            assert!(
                Instant::now() < deadline,
                "the service never became healthy"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// SIGTERM, then the exit status (failing the test if it does not exit).
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let ok = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(ok.success());
        let deadline = Instant::now() + Duration::from_secs(300);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "the service ignored SIGTERM; log:\n{}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Whether `dojo serve --model default` can run: the engine is compiled in and the default
/// model can be had (downloaded once into the dojo cache). Prints the skip reason otherwise;
/// under `CI=true` a missing model fails.
pub fn can_serve() -> bool {
    if !cfg!(feature = "engine") {
        println!("SKIPPED: dojo-cli built without the `engine` feature");
        return false;
    }
    match dojo_tokenizer::default_model_path() {
        Ok(_) => true,
        Err(e) => {
            assert!(!ci(), "the default model must be available in CI: {e}");
            println!("SKIPPED: default model unavailable: {e}");
            false
        }
    }
}

/// A scripted OpenAI-compatible chat server on loopback (the test double for a model that
/// cannot run here): `reply(request)` is the assistant's text; every request body is kept.
/// The runtime serves it: keep it alive while the server is used.
pub fn chat_server(
    reply: impl Fn(&serde_json::Value) -> String + Send + Sync + 'static,
) -> (
    String,
    std::sync::Arc<std::sync::Mutex<Vec<serde_json::Value>>>,
    tokio::runtime::Runtime,
) {
    use axum::Json;
    use std::sync::{Arc, Mutex};
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (keep, reply) = (seen.clone(), Arc::new(reply));
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        axum::routing::post(move |Json(req): Json<serde_json::Value>| {
            let (keep, reply) = (keep.clone(), reply.clone());
            async move {
                let content = reply(&req);
                keep.lock().unwrap().push(req.clone());
                Json(serde_json::json!({
                    "id": "s", "object": "chat.completion", "created": 0, "model": req["model"],
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": content}}],
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

/// A world model's replies: SWT (known by its system prompt) `1 passed`, SWR a reward of 1.
pub fn world_reply(req: &serde_json::Value) -> String {
    let system = req["messages"][0]["content"].as_str().unwrap_or("");
    if system.contains("code execution simulator") {
        r#"{"stdout": "1 passed\n", "stderr": "", "exit_code": 0}"#.into()
    } else {
        r#"{"test_report": "1 passed", "reward": 1}"#.into()
    }
}
