//! One module per subcommand family; each is owned by the stage it drives.

pub mod curate;
pub mod lsp;
pub mod rollout;
pub mod sandbox;
pub mod serve;
pub mod tasks;
pub mod train;
