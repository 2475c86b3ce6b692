//! What the grading examples share: arguments and the bundled benchmark's task under test.

use dojo_task::{EnvRegistry, RepoEnv, Task};

pub fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

pub fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(|a, b| a.total_cmp(b));
    xs[xs.len() / 2]
}

/// The bundled tasks, the registry, and the `--instance` task (default iniconfig-1) with its
/// environment.
pub type Bundled = (Vec<Task>, EnvRegistry, Task, RepoEnv);

pub fn bundled() -> Result<Bundled, Box<dyn std::error::Error>> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tasksets/mini/tasks.jsonl"
    );
    let tasks = dojo_task::load_tasks(std::path::Path::new(path))?;
    let reg = EnvRegistry::embedded()?;
    let id = arg("--instance").unwrap_or_else(|| "pytest-dev__iniconfig-1".into());
    let task = tasks
        .iter()
        .find(|t| t.instance_id == id)
        .ok_or_else(|| format!("no instance {id} in {path}"))?
        .clone();
    let env = reg.resolve(&task)?;
    Ok((tasks, reg, task, env))
}
