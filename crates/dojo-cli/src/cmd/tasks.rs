//! `dojo tasks`, `dojo validate`, `dojo eval` (dojo-task, dojo-grade).

#[derive(clap::Subcommand)]
pub enum TasksCmd {
    /// Summarise and check a task file.
    Check { file: std::path::PathBuf },
}

#[derive(clap::Args)]
pub struct ValidateArgs {}

#[derive(clap::Args)]
pub struct EvalArgs {}

pub fn run_tasks(_cmd: TasksCmd) -> anyhow::Result<i32> {
    anyhow::bail!("dojo tasks: not implemented yet")
}

pub fn run_validate(_args: ValidateArgs) -> anyhow::Result<i32> {
    anyhow::bail!("dojo validate: not implemented yet")
}

pub fn run_eval(_args: EvalArgs) -> anyhow::Result<i32> {
    anyhow::bail!("dojo eval: not implemented yet")
}
