//! A task made ready to run ([`Prepared`]): what the runner hands the agent loop, the policy
//! backends and the world-model capture for one episode.

use std::sync::Arc;

use dojo_sandbox::{Pristine, PythonEnv};
use dojo_task::{RepoEnv, Task};
use dojo_world::record::WorldWriter;

use crate::world_sim::SimRun;

/// A task ready to run: its pristine tree, environment and test settings.
pub struct Prepared {
    pub task: Task,
    pub pristine: Pristine,
    pub env: Option<PythonEnv>,
    pub repo_env: RepoEnv,
    /// Where world-model records of this run go (`None`: not captured).
    pub world: Option<Arc<WorldWriter>>,
    /// The simulated environment of this task (`None`: real execution).
    pub sim: Option<SimRun>,
}
