//! `dojo lsp` (dojo-lsp).

#[derive(clap::Args)]
pub struct LspArgs {}

pub fn run(_args: LspArgs) -> anyhow::Result<i32> {
    anyhow::bail!("dojo lsp: not implemented yet")
}
