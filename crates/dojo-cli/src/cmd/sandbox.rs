//! `dojo sandbox ...` (dojo-sandbox): doctor, run, exec, diff, rm, ls.

use crate::exit::Exit;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use dojo_sandbox::{Sandbox, SandboxOptions};

#[derive(clap::Subcommand)]
pub enum SandboxCmd {
    /// Which isolation features work on this host, which backend will be used, and what of
    /// the host a sandbox sees.
    Doctor {
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
        /// Also remove the directories and cgroups of sandboxes whose process died (safe while
        /// other dojo processes run).
        #[arg(long)]
        clean: bool,
    },
    /// Run a command in a fresh sandbox over a source tree, pass its output through and exit
    /// with its exit code.
    Run(RunArgs),
    /// Run a command in a kept sandbox.
    Exec {
        id: String,
        /// Seconds before TERM (then KILL after a 2 s grace).
        #[arg(long, default_value_t = 600)]
        timeout: u64,
        #[arg(last = true, required = true)]
        cmd: Vec<String>,
    },
    /// Print a kept sandbox's workspace diff (a binary-safe git patch), streamed: any size.
    Diff { id: String },
    /// Tear down a kept sandbox.
    Rm { id: String },
    /// List kept sandboxes.
    Ls,
}

#[derive(clap::Args)]
pub struct RunArgs {
    /// A directory, `<git-repo>@<commit>`, or an sdist/tarball.
    #[arg(long)]
    source: String,
    /// A TOML file with the environment spec (python, requirements, install, editable).
    #[arg(long)]
    env: Option<PathBuf>,
    /// Seconds before TERM (then KILL after a 2 s grace).
    #[arg(long, default_value_t = 600)]
    timeout: u64,
    /// Keep the sandbox and print its id (use `dojo sandbox exec/diff/rm ID`).
    #[arg(long)]
    keep: bool,
    /// auto | namespace | fallback.
    #[arg(long, default_value = "auto")]
    backend: String,
    #[arg(last = true, required = true)]
    cmd: Vec<String>,
}

pub fn run(cmd: SandboxCmd) -> anyhow::Result<Exit> {
    super::runtime()?.block_on(run_async(cmd))
}

async fn run_async(cmd: SandboxCmd) -> anyhow::Result<Exit> {
    match cmd {
        SandboxCmd::Doctor { json, clean } => doctor(json, clean),
        SandboxCmd::Run(a) => run_cmd(a).await,
        SandboxCmd::Exec { id, timeout, cmd } => {
            let sb = attach(&id).await?;
            let code = pass_through(&sb, cmd, timeout).await?;
            sb.detach();
            Ok(code)
        }
        SandboxCmd::Diff { id } => {
            let sb = attach(&id).await?;
            // Streamed: a workspace of gigabytes costs the host a pipe buffer, not its size.
            let mut out = tokio::io::stdout();
            sb.diff_to(&mut out).await?;
            tokio::io::AsyncWriteExt::flush(&mut out).await?;
            sb.detach();
            Ok(Exit::Success)
        }
        SandboxCmd::Rm { id } => {
            Sandbox::remove(&id).await?;
            eprintln!("removed sandbox {id}");
            Ok(Exit::Success)
        }
        SandboxCmd::Ls => {
            for st in dojo_sandbox::registry::list() {
                println!("{}", st.ls_line());
            }
            Ok(Exit::Success)
        }
    }
}

async fn attach(id: &str) -> anyhow::Result<Sandbox> {
    let sb = Sandbox::attach(id).await;
    sb.with_context(|| format!("opening sandbox {id}"))
}

fn doctor(json: bool, clean: bool) -> anyhow::Result<Exit> {
    let c = dojo_sandbox::doctor::Checkup::run(clean);
    if json {
        println!("{}", serde_json::to_string_pretty(&c.to_json()?)?);
    } else {
        println!("{c}");
    }
    Ok(Exit::Success)
}

async fn run_cmd(a: RunArgs) -> anyhow::Result<Exit> {
    let opts = SandboxOptions {
        backend: a.backend.parse()?,
        keep: a.keep,
        ..Default::default()
    };
    let sb = Sandbox::over_source(&a.source, a.env.as_deref(), &opts).await?;
    let code = pass_through(&sb, a.cmd, a.timeout).await;
    if a.keep {
        eprintln!("sandbox kept: {}", sb.id());
        println!("{}", sb.detach());
    } else {
        sb.teardown().await?;
        dojo_sandbox::trash::flush();
    }
    code
}

/// Run `cmd` with its output streamed to ours; returns its exit code (128+signal when killed,
/// 124 on timeout, like `timeout(1)`).
async fn pass_through(sb: &Sandbox, cmd: Vec<String>, timeout: u64) -> anyhow::Result<Exit> {
    let r = sb.pass_through(cmd, Duration::from_secs(timeout)).await?;
    if r == dojo_sandbox::PassThrough::TimedOut {
        eprintln!("dojo sandbox: command timed out after {timeout} s");
    }
    Ok(Exit::PassThrough(r.code()))
}
