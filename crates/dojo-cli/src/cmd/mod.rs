//! One module per subcommand family; each is owned by the stage it drives
//! (`task_set` holds what `validate` and `eval` share).

pub mod curate;
pub mod demo;
pub mod env;
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

/// What a command that needs the candle stack says in a build without it.
#[cfg(not(feature = "engine"))]
pub fn needs_engine(command: &str) -> anyhow::Result<crate::exit::Exit> {
    anyhow::bail!(
        "{command} needs the candle stack, but this dojo was built without it; rebuild with the \
         `engine` feature (the default): cargo build -p dojo-cli --features engine"
    )
}

/// The one async runtime every command runs on (multi-threaded, I/O and timers on).
pub fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    use anyhow::Context;
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")
}

/// The one progress display every command passes to the libraries: a bar on a terminal
/// (plain lines elsewhere), or nothing with `--quiet`.
pub fn progress(quiet: bool) -> dojo_progress::Progress {
    if quiet {
        dojo_progress::Progress::quiet()
    } else {
        dojo_progress::Bar::stderr()
    }
}
