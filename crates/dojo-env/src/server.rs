//! The episode service. One request runs one whole episode in a sandbox (prepare → agent ⇄
//! policy → diff → grade, through `dojo rollout`'s own runner), shapes its reward, stores the
//! record and answers with it.
//!
//! Admission: at most `max_episodes` run at once; up to `queue` more wait for a slot; beyond
//! that the answer is 429 with a message (the trainer retries later). Each episode runs in a
//! task of its own, so a trainer that hangs up does not lose it: it finishes, is stored, and a
//! retry with the same `episode_id` gets the stored answer (409 while it still runs). Its lease
//! (`lease_s`, at most the server's) bounds it: past the lease the episode is cancelled, its
//! sandbox removed, and it is recorded as an infrastructure failure (masked).
//!
//! Records go to `OUT/episodes.jsonl` through the crash-safe store `dojo rollout` uses (one
//! fsync per record; a restart after `kill -9` keeps every finished episode). Shutdown (the
//! future given to [`serve`]) stops accepting requests and waits for the running episodes.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path as UrlPath, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use dojo_rollout::agent_runner::{AgentRunner, BackendFactory, DojoAgent};
use dojo_rollout::run_dir::make_backends;
use dojo_rollout::scheduler::{Job, Runner};
use dojo_rollout::store::Store;
use dojo_task::{EnvRegistry, Preparer};
use serde_json::json;

use crate::api::{BadRequest, EPISODE_SCHEMA_VERSION, EpisodeRecord, EpisodeRequest, record};
use crate::envs;
use crate::sources::{AllowList, BadPrefix, SourceError};
use crate::state::{AppState, Metrics, ServeOptions, Shared, error};

/// Failures that stop the service from starting or serving.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Store(#[from] dojo_rundir::RunDirError),
    #[error("environment specs: {0}")]
    Envs(#[source] dojo_task::TaskError),
    #[error("tasks: {0}")]
    Tasks(#[source] dojo_task::TaskError),
    #[error("--allow-source {prefix:?}")]
    AllowSource {
        prefix: String,
        #[source]
        source: SourceError,
    },
    #[error(transparent)]
    Access(#[from] dojo_llm::access::AccessError),
    #[error("serving: {0}")]
    Io(#[from] std::io::Error),
}

/// Removes an episode id from the in-flight set however its task ends.
struct InFlight(AppState, String);

impl Drop for InFlight {
    fn drop(&mut self) {
        if let Ok(mut s) = self.0.in_flight.lock() {
            s.remove(&self.1);
        }
    }
}

/// Marks `episode_id` as running, for as long as the returned guard lives. The answer instead
/// when it has finished meanwhile (its record) or is running already (409).
fn claim(s: &AppState, episode_id: &str) -> Result<InFlight, Box<Response>> {
    let Ok(mut f) = s.in_flight.lock() else {
        return Err(Box::new(error(
            StatusCode::INTERNAL_SERVER_ERROR,
            None,
            "state lock poisoned",
        )));
    };
    // Checked again under the lock: a run of this id may have finished (and stored its record)
    // since the caller's check, and must not run twice.
    if let Some(rec) = s.stored(episode_id) {
        return Err(Box::new(axum::Json(rec).into_response()));
    }
    if !f.insert(episode_id.to_string()) {
        return Err(Box::new(error(
            StatusCode::CONFLICT,
            Some("episode_id"),
            format!("episode {episode_id} is running; ask again when it has finished"),
        )));
    }
    drop(f);
    Ok(InFlight(s.clone(), episode_id.to_string()))
}

/// The episode's trajectory, or, when its lease runs out first, an infrastructure failure that
/// says so (the run is cancelled and its sandbox removed).
async fn run_within_lease(
    state: &AppState,
    runner: Arc<AgentRunner<DojoAgent, Box<dyn BackendFactory>>>,
    job: Job,
    lease: Duration,
) -> dojo_trajectory::Trajectory {
    let r = runner.clone();
    let j = job.clone();
    match tokio::time::timeout(lease, async move { r.run(j).await }).await {
        Ok(t) => t,
        Err(_) => {
            if let Ok(mut m) = state.metrics.lock() {
                m.lease_expired += 1;
            }
            runner.infra_failure(
                &job,
                format!(
                    "the episode's lease of {:.0} s expired: cancelled, its sandbox removed",
                    lease.as_secs_f64()
                ),
            )
        }
    }
}

async fn post_episode(State(s): State<AppState>, body: Bytes) -> Response {
    let req = match EpisodeRequest::parse(&body) {
        Ok(r) => r,
        Err(e) => return s.bad(e),
    };
    if let Some(rec) = s.stored(&req.episode_id) {
        return axum::Json(rec).into_response();
    }
    let (task, policy) = match (req.task().and_then(|t| s.admit_task(t)), req.policy()) {
        (Ok(t), Ok(p)) => (t, p),
        (Err(e), _) | (_, Err(e)) => return s.bad(e),
    };
    let agent = match DojoAgent::from_policy(&policy) {
        Ok(a) => a,
        Err(e) => return s.bad(BadRequest::refused("policy", e)),
    };
    let backends = match make_backends(&policy, None) {
        Ok(b) => b,
        Err(e) => return s.bad(BadRequest::refused("policy", e)),
    };
    let guard = match claim(&s, &req.episode_id) {
        Ok(g) => g,
        Err(r) => return *r,
    };
    let permit = match s.admit().await {
        Ok(p) => p,
        Err(r) => return r,
    };
    let lease = req.lease_s.map_or(s.opts.lease, |l| {
        Duration::from_secs_f64(l).min(s.opts.lease)
    });
    let job = Job {
        task_index: 0,
        task_id: task.instance_id.clone(),
        sample_index: 0,
    };
    let runner = Arc::new(AgentRunner::new(
        vec![task],
        agent,
        backends,
        s.registry.clone(),
        s.preparer.clone(),
        1,
    ));
    let state = s.clone();
    // Its own task: a trainer that hangs up does not cancel the episode (the lease does).
    let handle = tokio::spawn(async move {
        let _permit = permit;
        let _guard = guard;
        let t0 = Instant::now();
        let traj = run_within_lease(&state, runner, job, lease).await;
        let rec = record(
            &req.episode_id,
            req.group_id.clone(),
            &req.shaping,
            traj,
            t0.elapsed().as_secs_f64(),
        );
        state.count_finished(&rec);
        state.store.append(&rec).map(|_| rec)
    });
    match handle.await {
        Ok(Ok(rec)) => axum::Json(rec).into_response(),
        Ok(Err(e)) => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            None,
            format!("the episode finished but could not be stored: {e}"),
        ),
        Err(e) => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            None,
            format!("the episode's task failed: {e}"),
        ),
    }
}

async fn get_episode(State(s): State<AppState>, UrlPath(id): UrlPath<String>) -> Response {
    if let Some(rec) = s.stored(&id) {
        return axum::Json(rec).into_response();
    }
    if s.in_flight.lock().is_ok_and(|f| f.contains(&id)) {
        return (
            StatusCode::ACCEPTED,
            axum::Json(json!({"status": "running"})),
        )
            .into_response();
    }
    error(
        StatusCode::NOT_FOUND,
        Some("episode_id"),
        format!("no episode {id}"),
    )
}

fn running(s: &Shared) -> usize {
    s.opts.max_episodes - s.slots.available_permits().min(s.opts.max_episodes)
}

async fn health(State(s): State<AppState>) -> Response {
    axum::Json(json!({
        "status": "ok",
        "running": running(&s),
        "waiting": s.waiting.load(Ordering::SeqCst),
        "max_episodes": s.opts.max_episodes,
        "queue": s.opts.queue,
        "stored": s.store.len(),
        "envs": s.envs_live(),
        "schema_version": EPISODE_SCHEMA_VERSION,
    }))
    .into_response()
}

/// Prometheus text format.
async fn metrics(State(s): State<AppState>) -> Response {
    let Ok(m) = s.metrics.lock() else {
        return error(
            StatusCode::INTERNAL_SERVER_ERROR,
            None,
            "metrics lock poisoned",
        );
    };
    let mut out = String::new();
    let mut line = |name: &str, help: &str, v: String| {
        out.push_str(&format!("# HELP {name} {help}\n{name} {v}\n"));
    };
    line(
        "dojo_env_episodes_running",
        "Episodes running now.",
        running(&s).to_string(),
    );
    line(
        "dojo_env_episodes_waiting",
        "Requests waiting for a slot.",
        s.waiting.load(Ordering::SeqCst).to_string(),
    );
    line(
        "dojo_env_episodes_finished_total",
        "Episodes finished.",
        m.finished.to_string(),
    );
    line(
        "dojo_env_episodes_masked_total",
        "Episodes masked (infrastructure).",
        m.masked.to_string(),
    );
    line(
        "dojo_env_lease_expired_total",
        "Episodes cancelled by their lease.",
        m.lease_expired.to_string(),
    );
    line(
        "dojo_env_refused_busy_total",
        "Requests answered 429.",
        m.refused_busy.to_string(),
    );
    line(
        "dojo_env_envs_live",
        "Step-wise envs holding a sandbox now.",
        s.envs_live().to_string(),
    );
    line(
        "dojo_env_envs_created_total",
        "Step-wise envs created.",
        m.envs_created.to_string(),
    );
    line(
        "dojo_env_envs_deleted_total",
        "Step-wise envs deleted by their client.",
        m.envs_deleted.to_string(),
    );
    line(
        "dojo_env_envs_lease_expired_total",
        "Step-wise envs torn down when their lease expired.",
        m.envs_lease_expired.to_string(),
    );
    line(
        "dojo_env_bad_requests_total",
        "Requests answered 400.",
        m.bad_requests.to_string(),
    );
    line(
        "dojo_env_episode_seconds_sum",
        "Wall-clock seconds of finished episodes.",
        format!("{:.3}", m.wall_s),
    );
    out.push_str("# HELP dojo_env_episodes_by_stop_total Finished episodes by stop reason.\n");
    for (k, v) in &m.by_stop {
        out.push_str(&format!(
            "dojo_env_episodes_by_stop_total{{stop_reason=\"{k}\"}} {v}\n"
        ));
    }
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], out).into_response()
}

/// The service's routes over its state (opened from `opts`), behind its API key if any.
pub fn router(opts: ServeOptions) -> Result<Router, ServeError> {
    let key = opts.api_key.clone();
    Ok(dojo_llm::access::protect(build(opts)?.0, key))
}

/// Everything about the settings that can be refused before the socket is bound: each address
/// the service will listen on (beyond loopback only with an API key) and the `--allow-source`
/// prefixes. `dojo env serve` calls it before binding, so a refused start never listens, not
/// even for a moment; [`serve`] calls it again for callers that bind the listener themselves.
pub fn check(opts: &ServeOptions, addrs: &[SocketAddr]) -> Result<(), ServeError> {
    for a in addrs {
        dojo_llm::access::check_exposure(*a, opts.api_key.as_ref())?;
    }
    allow_list(opts).map(drop)
}

fn allow_list(opts: &ServeOptions) -> Result<AllowList, ServeError> {
    AllowList::new(&opts.allow_sources)
        .map_err(|BadPrefix { prefix, source }| ServeError::AllowSource { prefix, source })
}

fn build(opts: ServeOptions) -> Result<(Router, AppState), ServeError> {
    let allow = allow_list(&opts)?;
    let store = Store::<EpisodeRecord>::open(&opts.out.join("episodes.jsonl"))?;
    let registry = EnvRegistry::with_dir(opts.envs_dir.as_deref()).map_err(ServeError::Envs)?;
    let tasks = match &opts.tasks_file {
        Some(f) => dojo_task::load_tasks(f)
            .map_err(ServeError::Tasks)?
            .into_iter()
            .map(|t| (t.instance_id.clone(), t))
            .collect(),
        None => HashMap::new(),
    };
    let state = Arc::new(Shared {
        slots: Arc::new(tokio::sync::Semaphore::new(opts.max_episodes.max(1))),
        preparer: Arc::new(Preparer::new(opts.prepare.clone())),
        opts: ServeOptions {
            max_episodes: opts.max_episodes.max(1),
            ..opts
        },
        store,
        waiting: AtomicUsize::new(0),
        in_flight: Mutex::new(HashSet::new()),
        registry,
        metrics: Mutex::new(Metrics::default()),
        envs: Mutex::new(HashMap::new()),
        tasks,
        allow,
    });
    let router = Router::new()
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .route("/v1/episodes", post(post_episode))
        .route("/v1/episodes/{id}", get(get_episode))
        .route("/v1/envs", post(envs::create))
        .route("/v1/envs/{id}/step", post(envs::step))
        .route("/v1/envs/{id}/evaluate", post(envs::evaluate))
        .route("/v1/envs/{id}", delete(envs::delete))
        .with_state(state.clone());
    Ok((router, state))
}

/// Serve on `listener` until `shutdown` resolves, then wait for the running episodes.
pub async fn serve(
    listener: tokio::net::TcpListener,
    opts: ServeOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    let key = opts.api_key.clone();
    check(&opts, &[listener.local_addr()?])?;
    let (router, state) = build(opts)?;
    let router = dojo_llm::access::protect(router, key);
    // Leases of step-wise envs: checked every second.
    let sweeper = {
        let state = state.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                state.sweep_envs();
            }
        })
    };
    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown)
        .await?;
    sweeper.abort();
    // Step-wise envs have no client once the server stops answering: cancel them (their
    // sandboxes are removed) rather than wait for their leases.
    let envs: Vec<_> = state
        .envs
        .lock()
        .map(|mut e| e.drain().map(|(_, v)| v).collect())
        .unwrap_or_default();
    for env in envs {
        env.cancel();
    }
    // Episodes whose client left still run in their own tasks: let them finish and be stored.
    let all = state.opts.max_episodes as u32;
    let _ = state.slots.acquire_many(all).await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(body: serde_json::Value) -> Result<EpisodeRequest, BadRequest> {
        EpisodeRequest::parse(body.to_string().as_bytes())
    }

    /// Bad requests are refused before anything runs, naming the field.
    #[test]
    fn bad_requests_name_the_field() {
        let task = json!({"instance_id": "a__b-1", "repo": "a/b", "base_commit": "x",
            "patch": "diff --git a/x b/x", "test_patch": "", "problem_statement": "p"});
        let ok = json!({"episode_id": "e1", "task": task, "policy": "gold-replay"});
        let r = req(ok.clone()).unwrap();
        if let Err(e) = r.task() {
            panic!("{e}");
        }
        assert!(r.policy().is_ok());
        let cases = [
            (json!({"task": task, "policy": "gold-replay"}), "body"),
            (
                json!({"episode_id": "", "task": task, "policy": "gold-replay"}),
                "episode_id",
            ),
            (
                json!({"episode_id": "e", "task": task, "policy": "gold-replay", "lease_s": -1}),
                "lease_s",
            ),
            (
                json!({"episode_id": "e", "task": task, "policy": "gold-replay", "shaping": {"budget_alpha": 2.0}}),
                "shaping",
            ),
            (
                json!({"episode_id": "e", "task": task, "policy": "gold-replay", "extra": 1}),
                "body",
            ),
        ];
        for (body, field) in cases {
            let e = req(body.clone()).unwrap_err();
            assert_eq!(e.field, field, "{body}: {e}");
        }
        let mut no_id = ok.clone();
        no_id["task"] = json!({"repo": "a/b"});
        assert_eq!(req(no_id).unwrap().task().unwrap_err().field, "task");
        for p in ["embedded", "nonsense:x"] {
            let mut b = ok.clone();
            b["policy"] = json!(p);
            let e = req(b).unwrap().policy().unwrap_err();
            assert_eq!(e.field, "policy", "{p}");
        }
        // A policy object as in a policy file, budgets applied over it.
        let mut b = ok;
        b["policy"] = json!({"kind": "openai", "model": "m", "base_url": "http://127.0.0.1:1/v1"});
        b["budgets"] = json!({"max_steps": 3});
        let p = req(b).unwrap().policy().unwrap();
        assert_eq!(p.agent["max_steps"], 3);
    }
}
