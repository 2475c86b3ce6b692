//! `dojo sandbox ...` (dojo-sandbox).

#[derive(clap::Subcommand)]
pub enum SandboxCmd {
    /// Which isolation features work on this host.
    Doctor,
}

pub fn run(_cmd: SandboxCmd) -> anyhow::Result<i32> {
    anyhow::bail!("dojo sandbox: not implemented yet")
}
