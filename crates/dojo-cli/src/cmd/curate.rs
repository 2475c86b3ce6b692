//! `dojo curate` (dojo-curate).

#[derive(clap::Args)]
pub struct CurateArgs {}

pub fn run(_args: CurateArgs) -> anyhow::Result<i32> {
    anyhow::bail!("dojo curate: not implemented yet")
}
