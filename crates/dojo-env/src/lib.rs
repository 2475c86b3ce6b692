//! # dojo-env: dojo environments behind HTTP, for trainers that run elsewhere
//!
//! Pipeline position: task → **sandbox ⇄ agent ⇄ policy → trajectory → grade/reward**, served to
//! an RL trainer that owns the weights and the inference fleet (verl on Ray, SkyRL, rllm). When
//! one machine is not enough, dojo does not grow a cluster of its own: each CPU node runs
//! `dojo env serve`, and the trainer's agent loop posts one request per episode. dojo keeps what
//! it owns on one machine too — the agent loop, the sandboxes, grading, the stop reasons, the
//! reward shaping (the same [`dojo_reward::shaping`] as `dojo rl`, so both paths give one rollout
//! the same reward) and the record — and answers with the token streams the policy saw and
//! sampled, so the trainer never re-templates dojo's messages.
//!
//! - [`api`]: the request and the episode record (what the answer and the store hold), with
//!   their schema version and the checks that name the bad field.
//! - [`server`]: the axum service: `POST /v1/episodes`, `GET /v1/episodes/{id}`, `/health`,
//!   `/metrics`; a limit on running episodes with a bounded queue (429 beyond it), a lease per
//!   episode (a trainer that dies leaves no sandbox behind once it expires), idempotent retries
//!   by episode id, a crash-safe record of every finished episode (restart loses none), and
//!   graceful shutdown.
//! - [`envs`]: the step-wise API (`POST /v1/envs`, `…/step`, `…/evaluate`, `DELETE`) for
//!   Python-side loops that keep their own agent: dojo's own agent loop and grading, with the
//!   client's steps as its policy; leases as idle timeouts, slots shared with episodes.
//! - [`step_env`]: a live step-wise env: the agent loop whose policy is the client's steps.
//! - [`sources`]: the `--allow-source` prefixes and how a source URL is matched against them
//!   (parsed and normalised, compared by parts; `file:///dir/` prefixes with symlinks resolved).
//! - `state`: what every route shares (settings, store, slots, live envs, counters).
//!
//! The Python side (a verl agent loop calling this service, and the token bridge from an
//! episode to verl's inference servers) is `python/dojo-verl/`.

pub mod api;
pub mod envs;
pub mod server;
pub mod sources;
mod state;
pub mod step_env;

pub use api::{EPISODE_SCHEMA_VERSION, EpisodeRecord, EpisodeRequest, TokenStream};
pub use server::{check, router, serve};
pub use state::ServeOptions;
