//! # dojo: one binary for the whole pipeline
//!
//! task → sandbox → agent ⇄ policy → trajectory → grade → curate → train → select.
//! Each subcommand lives in its own module and calls into the crate that owns the stage.

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "dojo", version, about = "Train and evaluate software-engineering agents")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print the version.
    Version,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Version => println!("dojo {}", env!("CARGO_PKG_VERSION")),
    }
    Ok(())
}
