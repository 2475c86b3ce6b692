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

use std::collections::{BTreeMap, HashMap, HashSet};
use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path as UrlPath, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use dojo_rollout::agent_runner::{AgentRunner, DojoAgent};
use dojo_rollout::run_dir::make_backends;
use dojo_rollout::scheduler::{Job, Runner};
use dojo_rollout::store::{Key, Store};
use dojo_task::{EnvRegistry, PrepareOptions, Preparer};
use serde_json::json;

use crate::api::{BadRequest, EPISODE_SCHEMA_VERSION, EpisodeRecord, EpisodeRequest};

/// How the service runs.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// Episodes running at once (= sandboxes).
    pub max_episodes: usize,
    /// Requests that may wait for a slot; more get 429.
    pub queue: usize,
    /// The longest an episode may hold its sandbox.
    pub lease: Duration,
    /// Where `episodes.jsonl` is kept.
    pub out: PathBuf,
    /// Environment specs overriding the embedded ones.
    pub envs_dir: Option<PathBuf>,
    pub prepare: PrepareOptions,
    /// Tasks a step-wise env may name by id (`task_id`), from `--tasks`. A row sent inline
    /// whose `instance_id` is here runs as the file has it (see `Shared::admit_task`).
    pub tasks_file: Option<PathBuf>,
    /// URL prefixes (each ending in `/`) that inline rows' sdist sources may be fetched from.
    pub allow_sources: Vec<String>,
    /// Every route but `/health` needs this key; without one, only loopback is served.
    pub api_key: Option<dojo_llm::access::ApiKey>,
}

/// Failures that stop the service from starting or serving.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Store(#[from] dojo_rundir::RunDirError),
    #[error("environment specs: {0}")]
    Envs(String),
    #[error("tasks: {0}")]
    Tasks(String),
    #[error("--allow-source {0:?}: {1}")]
    AllowSource(String, &'static str),
    #[error(transparent)]
    Access(#[from] dojo_llm::access::AccessError),
    #[error("serving: {0}")]
    Io(#[from] std::io::Error),
}

#[derive(Default)]
pub(crate) struct Metrics {
    finished: u64,
    pub(crate) envs_created: u64,
    pub(crate) envs_deleted: u64,
    envs_lease_expired: u64,
    masked: u64,
    lease_expired: u64,
    refused_busy: u64,
    bad_requests: u64,
    by_stop: BTreeMap<String, u64>,
    wall_s: f64,
}

pub(crate) struct Shared {
    pub(crate) opts: ServeOptions,
    pub(crate) store: Store<EpisodeRecord>,
    slots: Arc<tokio::sync::Semaphore>,
    waiting: AtomicUsize,
    in_flight: Mutex<HashSet<String>>,
    pub(crate) registry: EnvRegistry,
    pub(crate) preparer: Arc<Preparer>,
    pub(crate) metrics: Mutex<Metrics>,
    /// Step-wise envs, live or evaluated, until deleted or their lease expires.
    pub(crate) envs: crate::envs::Envs,
    /// `--tasks`, by instance id.
    pub(crate) tasks: HashMap<String, dojo_task::Task>,
}

pub(crate) type AppState = Arc<Shared>;

pub(crate) fn error(
    status: StatusCode,
    field: Option<&str>,
    message: impl Into<String>,
) -> Response {
    // The body `dojo serve` answers with too (OpenAI's), the field at fault as `param`.
    (
        status,
        axum::Json(dojo_llm::ErrorBody::new(status.as_u16(), message, field)),
    )
        .into_response()
}

impl Shared {
    /// Whether the service prepares the task of an inline row, and as what. Preparing runs
    /// on the host with its network: an sdist source is fetched from its URL, and a row's
    /// `env` overrides (requirements, install commands) run in the environment build, which
    /// has the network. So a caller chooses neither. A row whose `instance_id` is in
    /// `--tasks` runs as the file has it (the caller's copy is not used); any other row is
    /// taken only without `env` overrides, and with an sdist source only from an
    /// `--allow-source` prefix. Git-based rows read their repository from `--repos` alone.
    pub(crate) fn admit_task(&self, row: dojo_task::Task) -> Result<dojo_task::Task, BadRequest> {
        if let Some(t) = self.tasks.get(&row.instance_id) {
            return Ok(t.clone());
        }
        let listed = || match &self.opts.tasks_file {
            Some(f) => format!("{} is not in {}", row.instance_id, f.display()),
            None => "the server has no --tasks file".to_string(),
        };
        if row.env.is_some() {
            return Err(BadRequest::new(
                "task.env",
                format!(
                    "per-task environment overrides run in the environment build, which has the \
                     host's network, so the server takes them only from its --tasks file ({})",
                    listed()
                ),
            ));
        }
        if let Some(sd) = row.sdist()
            && !self
                .opts
                .allow_sources
                .iter()
                .any(|p| sd.url.starts_with(p))
        {
            return Err(BadRequest::new(
                "task.source.url",
                format!(
                    "{} is not under an allowed source ({}; the server's --allow-source \
                     prefixes: {:?})",
                    sd.url,
                    listed(),
                    self.opts.allow_sources
                ),
            ));
        }
        Ok(row)
    }

    pub(crate) fn bad(&self, e: BadRequest) -> Response {
        if let Ok(mut m) = self.metrics.lock() {
            m.bad_requests += 1;
        }
        error(StatusCode::BAD_REQUEST, Some(&e.field), e.to_string())
    }

    pub(crate) fn stored(&self, id: &str) -> Option<EpisodeRecord> {
        self.store.get(&Key {
            task_id: id.to_string(),
            sample_index: 0,
        })
    }

    pub(crate) fn new_env_id(&self) -> String {
        format!("env-{}", crate::envs::uuidish())
    }

    /// A running slot (episodes and envs share them): now, after waiting in the queue, or a
    /// 429 when the queue is full.
    pub(crate) async fn admit(&self) -> Result<tokio::sync::OwnedSemaphorePermit, Response> {
        if let Ok(p) = self.slots.clone().try_acquire_owned() {
            return Ok(p);
        }
        if self.waiting.fetch_add(1, Ordering::SeqCst) >= self.opts.queue {
            self.waiting.fetch_sub(1, Ordering::SeqCst);
            if let Ok(mut m) = self.metrics.lock() {
                m.refused_busy += 1;
            }
            return Err(error(
                StatusCode::TOO_MANY_REQUESTS,
                None,
                format!(
                    "{} episodes or envs running and {} waiting (--max-episodes {}, --queue {}); retry later",
                    self.opts.max_episodes,
                    self.opts.queue,
                    self.opts.max_episodes,
                    self.opts.queue
                ),
            ));
        }
        let p = self.slots.clone().acquire_owned().await;
        self.waiting.fetch_sub(1, Ordering::SeqCst);
        p.map_err(|_| error(StatusCode::SERVICE_UNAVAILABLE, None, "shutting down"))
    }

    pub(crate) fn count_finished(&self, rec: &EpisodeRecord) {
        if let Ok(mut m) = self.metrics.lock() {
            m.finished += 1;
            m.masked += u64::from(rec.masked);
            *m.by_stop.entry(rec.stop_reason.to_string()).or_default() += 1;
            m.wall_s += rec.wall_s;
        }
    }

    /// Tear down the envs idle past their lease (their sandboxes go with them).
    pub(crate) fn sweep_envs(&self) {
        let now = Instant::now();
        let gone: Vec<_> = match self.envs.lock() {
            Ok(mut envs) => {
                let ids: Vec<String> = envs
                    .iter()
                    .filter(|(_, e)| e.expired(now))
                    .map(|(k, _)| k.clone())
                    .collect();
                ids.into_iter().filter_map(|k| envs.remove(&k)).collect()
            }
            Err(_) => return,
        };
        // Evaluated envs only drop their record here; the others lose their sandbox.
        let live = gone.iter().filter(|e| !e.finished()).count();
        for env in &gone {
            env.cancel();
        }
        if live > 0
            && let Ok(mut m) = self.metrics.lock()
        {
            m.envs_lease_expired += live as u64;
        }
    }

    fn envs_live(&self) -> usize {
        self.envs
            .lock()
            .map_or(0, |e| e.values().filter(|e| !e.finished()).count())
    }
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
        Err(e) => return s.bad(BadRequest::new("policy", e.to_string())),
    };
    let backends = match make_backends(&policy, None) {
        Ok(b) => b,
        Err(e) => return s.bad(BadRequest::new("policy", e.to_string())),
    };
    {
        let Ok(mut f) = s.in_flight.lock() else {
            return error(
                StatusCode::INTERNAL_SERVER_ERROR,
                None,
                "state lock poisoned",
            );
        };
        // Checked again under the lock: a run of this id may have finished (and stored its
        // record) since the check above, and must not run twice.
        if let Some(rec) = s.stored(&req.episode_id) {
            return axum::Json(rec).into_response();
        }
        if !f.insert(req.episode_id.clone()) {
            return error(
                StatusCode::CONFLICT,
                Some("episode_id"),
                format!(
                    "episode {} is running; ask again when it has finished",
                    req.episode_id
                ),
            );
        }
    }
    let guard = InFlight(s.clone(), req.episode_id.clone());
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
        let r = runner.clone();
        let j = job.clone();
        let traj = match tokio::time::timeout(lease, async move { r.run(j).await }).await {
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
        };
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

/// The record of a finished episode: shaped reward, token streams, the trajectory.
pub(crate) fn record(
    id: &str,
    group_id: Option<String>,
    shaping: &dojo_reward::shaping::RewardConfig,
    traj: dojo_trajectory::Trajectory,
    wall_s: f64,
) -> EpisodeRecord {
    let shaped = dojo_reward::shape_trajectory(&traj, shaping).unwrap_or_else(|e| {
        // Not graded where it had to be: nothing to score, so no loss (never a silent 0).
        tracing::warn!("episode {id}: {e}; masked");
        dojo_reward::Shaped {
            reward: 0.0,
            raw_reward: None,
            masked: true,
        }
    });
    let (streams, token_error) = match dojo_reward::episode::samples_of(&traj) {
        Ok(samples) => (samples.iter().map(Into::into).collect(), None),
        Err(e) => (Vec::new(), Some(e.to_string())),
    };
    EpisodeRecord {
        schema_version: EPISODE_SCHEMA_VERSION,
        episode_id: id.to_string(),
        group_id,
        task_id: traj.task_id.clone(),
        reward: shaped.reward,
        raw_reward: shaped.raw_reward,
        masked: shaped.masked,
        stop_reason: traj.stop_reason,
        forced_submission: traj.forced_submission,
        num_turns: traj.steps.len() as u32,
        patch: traj.patch.clone().unwrap_or_default(),
        streams,
        token_error,
        wall_s,
        trajectory: traj,
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

/// An `--allow-source` prefix must name a scheme, a host and end in `/`, so that it cannot
/// be extended into another host (`https://files.pythonhosted.org` would admit
/// `https://files.pythonhosted.org.example.com/`).
fn check_allow_source(p: &str) -> Result<(), ServeError> {
    let bad = |why| Err(ServeError::AllowSource(p.to_string(), why));
    let Some(rest) = ["https://", "http://", "file:///"]
        .iter()
        .find_map(|s| p.strip_prefix(s))
    else {
        return bad("expected an http(s):// or file:/// URL prefix");
    };
    if !p.ends_with('/') {
        return bad("must end in '/' (a directory or host, never a partial name)");
    }
    if !p.starts_with("file:") && (rest.is_empty() || rest.starts_with('/')) {
        return bad("names no host");
    }
    if p.contains("/../") || p.contains("/./") || p.contains('@') {
        return bad("must not contain '.', '..' segments or user information");
    }
    Ok(())
}

fn build(opts: ServeOptions) -> Result<(Router, AppState), ServeError> {
    for p in &opts.allow_sources {
        check_allow_source(p)?;
    }
    let store = Store::<EpisodeRecord>::open(&opts.out.join("episodes.jsonl"))?;
    let registry = EnvRegistry::with_dir(opts.envs_dir.as_deref())
        .map_err(|e| ServeError::Envs(e.to_string()))?;
    let tasks = match &opts.tasks_file {
        Some(f) => dojo_task::load_tasks(f)
            .map_err(|e| ServeError::Tasks(e.to_string()))?
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
    });
    let router = Router::new()
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .route("/v1/episodes", post(post_episode))
        .route("/v1/episodes/{id}", get(get_episode))
        .route("/v1/envs", post(crate::envs::create))
        .route("/v1/envs/{id}/step", post(crate::envs::step))
        .route("/v1/envs/{id}/evaluate", post(crate::envs::evaluate))
        .route("/v1/envs/{id}", delete(crate::envs::delete))
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
    dojo_llm::access::check_exposure(listener.local_addr()?, key.as_ref())?;
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
