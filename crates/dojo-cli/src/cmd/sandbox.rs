//! `dojo sandbox ...` (dojo-sandbox): doctor, run, exec, diff, rm, ls.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use dojo_sandbox::{
    BackendKind, ExecRequest, PristineStore, PythonEnv, PythonEnvSpec, Sandbox, SandboxOptions,
    Source,
};
use tokio::io::AsyncReadExt;

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

pub fn run(cmd: SandboxCmd) -> anyhow::Result<i32> {
    let rt = super::runtime()?;
    rt.block_on(run_async(cmd))
}

async fn run_async(cmd: SandboxCmd) -> anyhow::Result<i32> {
    match cmd {
        SandboxCmd::Doctor { json, clean } => doctor(json, clean),
        SandboxCmd::Run(a) => run_cmd(a).await,
        SandboxCmd::Exec { id, timeout, cmd } => {
            let sb = Sandbox::attach(&id)
                .await
                .with_context(|| format!("opening sandbox {id}"))?;
            let code = pass_through(&sb, cmd, timeout).await?;
            sb.detach();
            Ok(code)
        }
        SandboxCmd::Diff { id } => {
            let sb = Sandbox::attach(&id)
                .await
                .with_context(|| format!("opening sandbox {id}"))?;
            // Streamed: a workspace of gigabytes costs the host a pipe buffer, not its size.
            let mut out = tokio::io::stdout();
            sb.diff_to(&mut out).await?;
            tokio::io::AsyncWriteExt::flush(&mut out).await?;
            sb.detach();
            Ok(0)
        }
        SandboxCmd::Rm { id } => {
            match Sandbox::attach(&id).await {
                Ok(sb) => sb.teardown().await?,
                Err(dojo_sandbox::SandboxError::Gone(_)) => {
                    let dir = dojo_sandbox::sandboxes_dir().join(&id);
                    anyhow::ensure!(
                        !id.is_empty() && !id.contains('/') && dir.exists(),
                        "no sandbox {id}"
                    );
                    dojo_sandbox::trash::discard(&dir);
                }
                Err(e) => return Err(e.into()),
            }
            dojo_sandbox::trash::flush();
            eprintln!("removed sandbox {id}");
            Ok(0)
        }
        SandboxCmd::Ls => {
            for st in dojo_sandbox::registry::list() {
                let alive = st
                    .holder_pid
                    .is_some_and(|p| dojo_sandbox::registry::start_time(p) == st.holder_start);
                println!(
                    "{}\t{:?}\t{}\t{}",
                    st.id,
                    st.backend,
                    if alive { "running" } else { "gone" },
                    st.lower.display()
                );
            }
            Ok(0)
        }
    }
}

fn doctor(json: bool, clean: bool) -> anyhow::Result<i32> {
    let r = dojo_sandbox::doctor::report();
    let swept = clean.then(|| {
        let s = dojo_sandbox::leftovers::sweep();
        dojo_sandbox::trash::flush();
        s
    });
    if json {
        let mut v = serde_json::to_value(&r)?;
        if let Some(s) = &swept {
            v["swept"] = serde_json::to_value(s)?;
        }
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(0);
    }
    println!("{r}");
    if let Some(s) = swept {
        println!(
            "cleaned: {} sandbox director{} and {} cgroup{} of dead processes",
            s.dirs.len(),
            if s.dirs.len() == 1 { "y" } else { "ies" },
            s.cgroups.len(),
            if s.cgroups.len() == 1 { "" } else { "s" }
        );
    }
    Ok(0)
}

fn backend(s: &str) -> anyhow::Result<BackendKind> {
    Ok(match s {
        "auto" => BackendKind::Auto,
        "namespace" | "ns" => BackendKind::Namespace,
        "fallback" => BackendKind::Fallback,
        other => anyhow::bail!("unknown backend {other:?} (auto | namespace | fallback)"),
    })
}

async fn run_cmd(a: RunArgs) -> anyhow::Result<i32> {
    let source = Source::parse(&a.source)?;
    let store = PristineStore::open()?;
    let pristine = store.build_async(&source).await?;
    let env = match &a.env {
        Some(p) => {
            let spec = PythonEnvSpec::from_toml_file(p)?;
            Some(PythonEnv::build_async(&spec, Some(&pristine)).await?)
        }
        None => None,
    };
    let opts = SandboxOptions {
        backend: backend(&a.backend)?,
        keep: a.keep,
        ..Default::default()
    };
    let sb = Sandbox::create(&pristine, env.as_ref(), &opts).await?;
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
async fn pass_through(sb: &Sandbox, cmd: Vec<String>, timeout: u64) -> anyhow::Result<i32> {
    let mut p = sb.spawn(&ExecRequest::new(cmd)).await?;
    drop(p.child.stdin.take());
    let mut out = p.child.stdout.take().context("no stdout")?;
    let mut err = p.child.stderr.take().context("no stderr")?;
    // tokio's io-std feature is not enabled workspace-wide: forward chunks with blocking
    // writes to our own stdout/stderr (a CLI, nothing else shares them).
    let o = tokio::spawn(async move { forward(&mut out, false).await });
    let e = tokio::spawn(async move { forward(&mut err, true).await });
    let mut timed_out = false;
    let status = match tokio::time::timeout(Duration::from_secs(timeout), p.child.wait()).await {
        Ok(s) => s?,
        Err(_) => {
            timed_out = true;
            p.terminate();
            match tokio::time::timeout(Duration::from_secs(2), p.child.wait()).await {
                Ok(s) => s?,
                Err(_) => {
                    p.child.start_kill()?;
                    p.child.wait().await?
                }
            }
        }
    };
    let _ = o.await;
    let _ = e.await;
    if timed_out {
        eprintln!("dojo sandbox: command timed out after {timeout} s");
        return Ok(124);
    }
    use std::os::unix::process::ExitStatusExt;
    Ok(status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0)))
}

async fn forward(r: &mut (impl tokio::io::AsyncRead + Unpin), to_stderr: bool) {
    use std::io::Write;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match r.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let _ = if to_stderr {
                    let mut w = std::io::stderr().lock();
                    w.write_all(&buf[..n]).and_then(|_| w.flush())
                } else {
                    let mut w = std::io::stdout().lock();
                    w.write_all(&buf[..n]).and_then(|_| w.flush())
                };
            }
        }
    }
}
