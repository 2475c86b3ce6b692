//! `dojo env serve` (dojo-env): dojo's environments behind HTTP for an RL trainer running
//! elsewhere (verl, SkyRL, rllm): one request, one whole episode, graded and shaped.

use crate::exit::{Exit, ensure_usage};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;

#[derive(clap::Subcommand)]
pub enum EnvCmd {
    /// Serve episodes over HTTP (`POST /v1/episodes`, `GET /v1/episodes/{id}`), step-wise envs
    /// (`POST /v1/envs`, `POST /v1/envs/{id}/step`, `POST /v1/envs/{id}/evaluate`,
    /// `DELETE /v1/envs/{id}`), `/health` and `/metrics`.
    Serve(EnvServeArgs),
}

#[derive(clap::Args)]
pub struct EnvServeArgs {
    /// Address to bind. Beyond loopback an API key is required.
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// Every request but `/health` must send `Authorization: Bearer KEY` (16+ characters).
    #[arg(long, env = "DOJO_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
    /// Port to listen on; 0 picks a free one (the address is printed on stdout).
    #[arg(long, default_value_t = 8700)]
    port: u16,
    /// Episodes running at once (each holds a sandbox).
    #[arg(long, default_value_t = 4, value_parser = crate::args::positive::<usize>())]
    max_episodes: usize,
    /// Requests that may wait for a running slot; more are answered 429.
    #[arg(long, default_value_t = 64)]
    queue: usize,
    /// The longest an episode may hold its sandbox, in seconds (a request may ask for less).
    #[arg(long, default_value_t = 3600.0)]
    lease_s: f64,
    /// Directory of the episode records (`episodes.jsonl`), kept across restarts.
    #[arg(long)]
    out: PathBuf,
    /// Directory of environment specs overriding the embedded `envs/`.
    #[arg(long)]
    envs: Option<PathBuf>,
    /// Local clones of the repositories of git-based tasks (`owner__name`).
    #[arg(long)]
    repos: Option<PathBuf>,
    /// A task file whose tasks requests may name by `task_id`; an inline row with one of its
    /// instance ids runs as the file has it. Other inline rows are taken without `env`
    /// overrides, and with an sdist source only under `--allow-source`.
    #[arg(long)]
    tasks: Option<PathBuf>,
    /// A URL prefix ending in `/` (e.g. `https://files.pythonhosted.org/`) that inline rows'
    /// sdist sources may come from; repeatable. None by default: the server fetches no URL a
    /// caller chose.
    #[arg(long = "allow-source", value_name = "PREFIX")]
    allow_sources: Vec<String>,
}

pub fn run(cmd: EnvCmd) -> anyhow::Result<Exit> {
    let EnvCmd::Serve(args) = cmd;
    ensure_usage!(
        args.lease_s.is_finite() && args.lease_s > 0.0,
        "--lease-s must be a positive number of seconds"
    );
    let opts = dojo_env::ServeOptions {
        max_episodes: args.max_episodes,
        queue: args.queue,
        lease: Duration::from_secs_f64(args.lease_s),
        out: args.out,
        envs_dir: args.envs,
        prepare: dojo_task::PrepareOptions {
            repos_dir: args.repos,
        },
        tasks_file: args.tasks,
        allow_sources: args.allow_sources,
        api_key: dojo_llm::access::ApiKey::new(args.api_key.as_deref()).context("--api-key")?,
    };
    super::runtime()?.block_on(async move {
        let addr = format!("{}:{}", args.host, args.port);
        // Resolved once, checked, then bound: a refused start never listens, not even briefly.
        let addrs: Vec<_> = tokio::net::lookup_host(&addr)
            .await
            .with_context(|| format!("--host {}: resolving {addr}", args.host))?
            .collect();
        dojo_env::check(&opts, &addrs)?;
        let listener = tokio::net::TcpListener::bind(addrs.as_slice())
            .await
            .with_context(|| format!("binding {addr}"))?;
        println!(
            "dojo env serve: listening on http://{}",
            listener.local_addr()?
        );
        dojo_env::serve(listener, opts, dojo_llm::access::shutdown_signal()).await?;
        eprintln!("dojo env serve: shut down (running episodes finished and stored)");
        anyhow::Ok(Exit::Success)
    })
}
