//! # dojo: one binary for the whole pipeline
//!
//! task → sandbox → agent ⇄ policy → trajectory → grade → curate → train → select.
//! Each subcommand lives in its own module under `cmd/` and calls into the crate that owns the
//! stage; this file only dispatches.

mod args;
mod cmd;
mod exit;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "dojo",
    version,
    about = "Train and evaluate software-engineering agents"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Isolated copy-on-write sandboxes: doctor, run, exec, diff, rm.
    #[command(subcommand)]
    Sandbox(cmd::sandbox::SandboxCmd),
    /// Task files: check, export, fetch the public datasets.
    #[command(subcommand)]
    Tasks(cmd::tasks::TasksCmd),
    /// Repositories of a task file: a bare git mirror each (`sync`), for `--repos`.
    #[command(subcommand)]
    Repos(cmd::tasks::ReposCmd),
    /// Check that tasks are runnable (test patch fails, gold patch passes); fill in F2P/P2P.
    Validate(cmd::validate::ValidateArgs),
    /// Grade SWE-bench predictions.
    Eval(cmd::eval::EvalArgs),
    /// Run a policy on tasks, K samples each, resumably.
    Rollout(cmd::rollout::RolloutArgs),
    /// The main job: the bundled benchmark end to end, with an HTML report.
    Demo(cmd::demo::DemoArgs),
    /// Serve a model over an OpenAI-compatible API.
    Serve(cmd::serve::ServeArgs),
    /// Ask a language server what the agent's lsp_tool would.
    Lsp(cmd::lsp::LspArgs),
    /// Filter rollouts and export training data.
    Curate(cmd::curate::CurateArgs),
    /// Synthesize validated tasks from a Python project by injecting bugs.
    Synth(cmd::synth::SynthArgs),
    /// Fine-tune a model on curated token data (sft, full or LoRA), merge LoRA adapters.
    #[command(subcommand)]
    Train(cmd::train::TrainCmd),
    /// Choose one patch per task from k candidates; pass@k / best@k table and curves.
    Select(cmd::select::SelectArgs),
    /// Reinforcement learning on the policy's own graded rollouts (GRPO family, one machine).
    Rl(Box<cmd::rl::RlArgs>),
    /// dojo's environments over HTTP for an RL trainer elsewhere (verl, SkyRL, rllm).
    #[command(subcommand)]
    Env(cmd::env::EnvCmd),
}

/// `dojo … | head`: once the reader is gone, `println!` panics with "failed printing to stdout:
/// Broken pipe". Exit quietly like other Unix tools instead. SIGPIPE itself stays ignored (Rust's
/// default): restoring it would let a sandboxed command that exits early kill dojo while dojo
/// writes to that command's stdin.
fn quiet_on_broken_stdout() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let msg = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("");
        if msg.starts_with("failed printing to stdout") && msg.contains("Broken pipe") {
            // 128 + SIGPIPE, what a shell reports for a writer killed by a closed pipe.
            std::process::exit(141);
        }
        default(info);
    }));
}

/// Large freed blocks kept for reuse once a model to train is built (`dojo_kernels::alloc`,
/// `dojo_train::memory::REUSE_BYTES`); the system allocator's behaviour in every other command.
#[cfg(feature = "engine")]
#[global_allocator]
static ALLOC: dojo_kernels::alloc::ReuseLarge = dojo_kernels::alloc::ReuseLarge;

fn main() {
    // SAFETY: first thing in `main`, before any other thread or candle op.
    #[cfg(feature = "engine")]
    unsafe {
        dojo_kernels::threads::single_candle_pool();
    }
    quiet_on_broken_stdout();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("DOJO_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    // clap exits 2 (`Exit::Usage`) itself on a command line it rejects.
    let cli = Cli::parse();
    let exit = match run(cli.command) {
        Ok(exit) => exit,
        Err(e) => {
            eprintln!("{}", exit::report(&e));
            exit::Exit::of_error(&e)
        }
    };
    std::process::exit(exit.code());
}

fn run(command: Command) -> anyhow::Result<exit::Exit> {
    Ok(match command {
        Command::Sandbox(c) => cmd::sandbox::run(c)?,
        Command::Tasks(c) => cmd::tasks::run_tasks(c)?,
        Command::Repos(c) => cmd::tasks::run_repos(c)?,
        Command::Validate(a) => cmd::validate::run(a)?,
        Command::Eval(a) => cmd::eval::run(a)?,
        Command::Rollout(a) => cmd::rollout::run_rollout(a)?,
        Command::Demo(a) => cmd::demo::run(a)?,
        Command::Serve(a) => cmd::serve::run(a)?,
        Command::Lsp(a) => cmd::lsp::run(a)?,
        Command::Curate(a) => cmd::curate::run(a)?,
        Command::Synth(a) => cmd::synth::run(a)?,
        Command::Train(c) => cmd::train::run(c)?,
        Command::Select(a) => cmd::select::run(a)?,
        Command::Rl(a) => cmd::rl::run(*a)?,
        Command::Env(c) => cmd::env::run(c)?,
    })
}
