//! One module per subcommand family; each is owned by the stage it drives
//! (`task_set` holds what `validate` and `eval` share).

pub mod curate;
pub mod demo;
pub mod eval;
pub mod lsp;
pub mod rl;
pub mod rollout;
pub mod sandbox;
pub mod select;
pub mod serve;
pub mod synth;
pub mod task_set;
pub mod tasks;
pub mod train;
pub mod validate;
