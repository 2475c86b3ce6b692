//! `dojo serve` (dojo-engine, behind the `engine` feature).

#[derive(clap::Args)]
pub struct ServeArgs {}

pub fn run(_args: ServeArgs) -> anyhow::Result<i32> {
    anyhow::bail!("dojo serve: not implemented yet")
}
