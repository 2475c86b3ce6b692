//! # dojo-world: simulated environments in the style of SWE-World
//!
//! Pipeline position: task → sandbox → agent ⇄ policy → trajectory → grade → curate → train, with
//! this crate standing in for the *sandbox's execution* and the *grader* when a task has no
//! runnable environment (or when we want to measure how far a simulation is from reality).
//!
//! SWE-World splits an environment in three: file edits and reads run for real on a checkout;
//! commands that run Python or tests are answered by a learned **transition model (SWT)**; the
//! final verdict comes from a learned **reward model (SWR)** that writes a test report and a
//! binary reward. This crate holds the shared vocabulary of both halves:
//!
//! - [`context`]: what SWT and SWR see ([`SwtContext`], [`SwrContext`]) and what they answer
//!   ([`SwtTarget`], [`SwrTarget`]).
//! - [`prompt`]: SWE-World's prompt layout with per-section caps ([`Caps`]), rendered into chat
//!   messages together with what was truncated ([`Rendered`]).
//! - [`parse`]: strict reply parsers; prose where JSON is due is a [`ParseError`], never a guess.
//! - [`client`]: [`WorldClient`], SWT/SWR over any [`dojo_llm::ChatBackend`] per role, with
//!   failures classified as infrastructure ([`WorldError`]).
//! - [`analysis`]: the per-task initial analysis, generated once at temperature 0 and cached.
//! - [`observe`]: what the models are shown of a workspace (a command's executed files, SWR's
//!   test files, base versions), one reader for simulation and for capture of real runs.
//! - [`cot`]: reverse-reasoning chain-of-thought for SFT samples, with a judge filter.
//! - [`record`]: SWT/SWR training records captured from real runs (`world.jsonl` beside the
//!   trajectories) and the predicate that decides which commands are worth simulating.
//! - [`classify`], [`route`], [`sim`], [`drift`]: the simulated environment itself: which shell
//!   commands run Python or tests, where each runs per `--execution`, the workspace wrapper that
//!   routes them ([`sim::SimWorkspace`]), and the drift measured against reality.

pub mod analysis;
pub mod client;
pub mod context;
pub mod cot;
pub mod observe;
pub mod parse;
pub mod prompt;
pub mod record;
// sim modules
pub mod classify;
pub mod drift;
pub mod route;
pub mod sim;

pub use analysis::{AnalysisInput, analysis_messages};
pub use client::{
    Predicted, RewardEstimate, SwrVerdict, WorldClient, WorldClientConfig, WorldError, rollout_seed,
};
pub use context::{FileView, SwrContext, SwrTarget, SwtContext, SwtTarget, WorldTask};
pub use parse::{ParseError, parse_swr_reply, parse_swt_reply};
pub use prompt::{Caps, NoRoom, Rendered, Truncation, swr_messages, swt_messages};
pub use record::{WORLD_FILE, WORLD_SCHEMA_VERSION, WorldRecord, runs_python_or_tests};
