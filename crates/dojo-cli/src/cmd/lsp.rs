//! `dojo lsp` (dojo-lsp): ask a language server what the agent's `lsp_tool` would, over a host
//! directory, and print exactly the observation the agent would see.

use crate::exit::Exit;
use std::io::Write;

use anyhow::Context;
use dojo_lsp::{Command, LspError, LspTool, Observation, Outcome, ServerKind};

#[derive(clap::Args)]
pub struct LspArgs {
    /// Repository to navigate (the server's workspace root).
    #[arg(long)]
    source: std::path::PathBuf,
    /// Language server: ty (default), pyrefly, pyright, basedpyright.
    #[arg(long, default_value = "ty")]
    server: String,
    /// get_definition, get_type_definition, get_implementation, get_hover, get_references,
    /// get_document_highlights, get_document_symbols, get_workspace_symbols, get_call_hierarchy.
    command: String,
    /// File, relative to --source (or absolute).
    #[arg(long)]
    file: Option<String>,
    /// The identifier as written on --line.
    #[arg(long)]
    symbol: Option<String>,
    /// 1-based line where --symbol appears.
    #[arg(long)]
    line: Option<u64>,
    /// Name to search for (get_workspace_symbols).
    #[arg(long)]
    query: Option<String>,
}

/// Exit codes: 0 success, 1 the tool answered with an error message, 2 infrastructure failure.
pub fn run(args: LspArgs) -> anyhow::Result<Exit> {
    let kind: ServerKind = args.server.parse()?;
    let command: Command = args.command.parse()?;
    let call = command.call(
        args.file.as_deref(),
        args.symbol.as_deref(),
        args.line,
        args.query.as_deref(),
    );
    let rt = super::runtime()?;
    rt.block_on(async {
        let tool = match LspTool::host(&args.source, kind).await {
            Ok(t) => t,
            // A server that cannot be installed or started is what the agent would be told.
            Err(e @ (LspError::ServerMissing(_) | LspError::ServerFailed { .. })) => {
                return show(&Observation::from_error(kind, e));
            }
            Err(e) => {
                return Err(e).with_context(|| {
                    format!("setting up {} over {}", kind.name(), args.source.display())
                });
            }
        };
        let obs = tool.call_detailed(&call).await;
        tool.session().shutdown().await;
        show(&obs)
    })
}

/// Print the observation; the exit code says whose problem it was.
fn show(obs: &Observation) -> anyhow::Result<Exit> {
    // A closed pipe (`| head`) is not an error worth a panic.
    let _ = writeln!(std::io::stdout(), "{}", obs.text);
    if let Some(ev) = &obs.infra {
        eprintln!("infrastructure event: {}", serde_json::to_string(ev)?);
    }
    Ok(match obs.outcome() {
        Outcome::Success => Exit::Success,
        Outcome::Refused => Exit::Failure,
        Outcome::Infrastructure => Exit::Infrastructure,
    })
}
