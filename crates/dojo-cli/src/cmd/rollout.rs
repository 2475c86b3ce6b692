//! `dojo rollout`, `dojo demo` (dojo-rollout).

#[derive(clap::Args)]
pub struct RolloutArgs {}

#[derive(clap::Args)]
pub struct DemoArgs {}

pub fn run_rollout(_args: RolloutArgs) -> anyhow::Result<i32> {
    anyhow::bail!("dojo rollout: not implemented yet")
}

pub fn run_demo(_args: DemoArgs) -> anyhow::Result<i32> {
    anyhow::bail!("dojo demo: not implemented yet")
}
