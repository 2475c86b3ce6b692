//! What every route of the service shares ([`Shared`]): the settings it was started with
//! ([`ServeOptions`]), the episode store, the running slots and their queue, the live step-wise
//! envs, the counters of `/metrics`; and the error answer every route gives ([`error`]).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use dojo_rollout::store::{Key, Store};
use dojo_task::{EnvRegistry, PrepareOptions, Preparer, TaskSource};

use crate::api::{BadRequest, EpisodeRecord};
use crate::sources::{AllowList, SourceError};
use crate::step_env::{Envs, uuidish};

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

#[derive(Default)]
pub(crate) struct Metrics {
    pub(crate) finished: u64,
    pub(crate) envs_created: u64,
    pub(crate) envs_deleted: u64,
    pub(crate) envs_lease_expired: u64,
    pub(crate) masked: u64,
    pub(crate) lease_expired: u64,
    pub(crate) refused_busy: u64,
    pub(crate) bad_requests: u64,
    pub(crate) by_stop: BTreeMap<String, u64>,
    pub(crate) wall_s: f64,
}

pub(crate) struct Shared {
    pub(crate) opts: ServeOptions,
    pub(crate) store: Store<EpisodeRecord>,
    pub(crate) slots: Arc<tokio::sync::Semaphore>,
    pub(crate) waiting: AtomicUsize,
    pub(crate) in_flight: Mutex<HashSet<String>>,
    pub(crate) registry: EnvRegistry,
    pub(crate) preparer: Arc<Preparer>,
    pub(crate) metrics: Mutex<Metrics>,
    /// Step-wise envs, live or evaluated, until deleted or their lease expires.
    pub(crate) envs: Envs,
    /// `--tasks`, by instance id.
    pub(crate) tasks: HashMap<String, dojo_task::Task>,
    /// `--allow-source`, parsed.
    pub(crate) allow: AllowList,
}

pub(crate) type AppState = Arc<Shared>;

/// `e` and its causes on one line, for an answer's message.
fn chain(e: &dyn std::error::Error) -> String {
    dojo_rundir::error_chain(e)
}

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
    pub(crate) fn admit_task(
        &self,
        mut row: dojo_task::Task,
    ) -> Result<dojo_task::Task, BadRequest> {
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
        if let Some(TaskSource::Sdist(sd)) = &mut row.source {
            // Fetched from the URL the check read (normalised), not from the caller's text.
            sd.url = self.allow.admit(&sd.url).map_err(|e| {
                let why = match e {
                    SourceError::NotAllowed => format!(
                        "{} is not under an allowed source ({}; the server's --allow-source \
                         prefixes: {:?})",
                        sd.url,
                        listed(),
                        self.opts.allow_sources
                    ),
                    e => format!("{}: {}", sd.url, chain(&e)),
                };
                BadRequest::new("task.source.url", why)
            })?;
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
        format!("env-{}", uuidish())
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

    pub(crate) fn envs_live(&self) -> usize {
        self.envs
            .lock()
            .map_or(0, |e| e.values().filter(|e| !e.finished()).count())
    }
}
