//! The in-process engine as a policy's chat backend: where `embedded[:MODEL]` (the agent's
//! policy) and `[world] model = "embedded..."` (SWT / SWR) become loaded models, and the
//! rollout entry point that loads them ([`run_policy`]). What `default` or a path means is
//! [`dojo_tokenizer::ModelSpec`]'s to decide.
//!
//! The engine is behind the `engine` feature (candle): without it an embedded policy has no
//! backend and [`crate::run_dir::make_backends`] refuses it, naming the feature.

use std::path::PathBuf;
use std::sync::Arc;

use dojo_llm::ChatBackend;

use crate::agent_runner::DojoAgent;
use crate::backends::ModelBackends;
use crate::error::RolloutError;
use crate::policy::{PolicyConfig, PolicyKind};
use crate::run_dir::{
    RolloutOptions, RolloutOutput, make_backends, model_backends, run_rollout_with_world,
};
use crate::world_sim::EmbeddedWorld;

/// The engine loaded from `model` (`default`, a GGUF file, a Hugging Face directory), as a
/// chat backend; `None` in a build without the `engine` feature.
#[cfg(feature = "engine")]
pub fn embedded_backend(model: &str) -> Result<Option<Arc<dyn ChatBackend>>, RolloutError> {
    let what = || format!("loading the embedded model {model}");
    let spec = dojo_tokenizer::ModelSpec::resolve(model)
        .map_err(|e| RolloutError::policy_in(what(), e))?;
    let engine = dojo_engine::Engine::load_spec(&spec, dojo_engine::EngineOptions::default())
        .map_err(|e| RolloutError::policy_in(what(), e))?;
    Ok(Some(Arc::new(engine)))
}

/// The engine loaded from `model`, as a chat backend; `None` in a build without the `engine`
/// feature.
#[cfg(not(feature = "engine"))]
pub fn embedded_backend(_model: &str) -> Result<Option<Arc<dyn ChatBackend>>, RolloutError> {
    Ok(None)
}

/// The embedded engines of the world models, when a simulated mode names them (`[world] model`,
/// `swt_model` or `swr_model` = `"embedded"` or `"embedded:DIR"`): each distinct model loaded
/// once per run and shared by every rollout; empty otherwise.
pub fn embedded_world(
    world: Option<&dojo_world::route::WorldPolicy>,
) -> Result<EmbeddedWorld, RolloutError> {
    let mut engines = EmbeddedWorld::default();
    for model in world.map(|w| w.embedded_models()).unwrap_or_default() {
        if let Some(backend) = embedded_backend(&model)? {
            engines.insert(model, backend);
        }
    }
    Ok(engines)
}

/// The policy's embedded engine, loaded on a blocking thread (it reads and dequantizes the
/// weights); `None` for other kinds of policy.
async fn policy_engine(
    policy: &PolicyConfig,
) -> Result<Option<Arc<dyn ChatBackend>>, RolloutError> {
    let PolicyKind::Embedded { model } = &policy.kind else {
        return Ok(None);
    };
    let m = model.clone();
    tokio::task::spawn_blocking(move || embedded_backend(&m))
        .await
        .map_err(|e| RolloutError::policy_in("loading the embedded model", e))?
}

/// The backends of model policy `policy` (`openai:MODEL`, `embedded[:MODEL]`, a policy file of
/// those kinds), loading the embedded engine when it names it.
pub async fn policy_backends(policy: &PolicyConfig) -> Result<ModelBackends, RolloutError> {
    let embedded = policy_engine(policy).await?;
    model_backends(policy, embedded)
}

/// [`policy_backends`] for a caller outside a runtime: the embedded engine is loaded on this
/// thread.
pub fn policy_backends_blocking(policy: &PolicyConfig) -> Result<ModelBackends, RolloutError> {
    let embedded = match &policy.kind {
        PolicyKind::Embedded { model } => embedded_backend(model)?,
        _ => None,
    };
    model_backends(policy, embedded)
}

/// `dojo tasks analyze`: the initial analysis of every task of `inputs` by the model of
/// `policy` (its engine loaded when embedded), cached under `cache` (default
/// `$DOJO_HOME/world-analysis`) ([`dojo_world::analysis::AnalysisRun`]).
pub async fn analyze_tasks(
    policy: &PolicyConfig,
    inputs: &[dojo_world::analysis::AnalysisInput],
    cache: Option<PathBuf>,
    timeout: std::time::Duration,
    concurrency: usize,
) -> Result<dojo_world::analysis::AnalysisRun, RolloutError> {
    let root = cache.unwrap_or_else(dojo_world::analysis::default_cache_root);
    let m = policy_backends(policy).await?;
    let run = dojo_world::analysis::AnalysisRun::run(
        &*m.client,
        &m.model,
        inputs,
        &root,
        timeout,
        concurrency,
    );
    Ok(run.await)
}

/// `dojo rollout`'s path for any policy: its engines loaded (the agent's and the world
/// models'), then [`run_rollout_with_world`].
pub async fn run_policy(opts: &RolloutOptions) -> Result<RolloutOutput, RolloutError> {
    let embedded = policy_engine(&opts.policy).await?;
    let world = opts.policy.world.clone();
    let world_embedded = tokio::task::spawn_blocking(move || embedded_world(world.as_ref()))
        .await
        .map_err(|e| RolloutError::policy_in("loading the world models", e))??;
    let agent = DojoAgent::from_policy(&opts.policy).map_err(RolloutError::policy)?;
    let backends = make_backends(&opts.policy, embedded)?;
    run_rollout_with_world(opts, agent, backends, &world_embedded).await
}
