//! `dojo tasks check` (dojo-task): load a task file the strict way and say what is wrong with
//! it, per row, and what it lacks for grading.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use dojo_task::{EnvRegistry, GRADING_FIELDS};

#[derive(clap::Subcommand)]
pub enum TasksCmd {
    /// Summarise and check a task file (counts per repo, missing fields, duplicates).
    Check {
        file: PathBuf,
        /// Extra environment specs (`*.toml`), overriding the embedded `envs/`.
        #[arg(long)]
        envs: Option<PathBuf>,
    },
}

pub fn run_tasks(cmd: TasksCmd) -> anyhow::Result<i32> {
    match cmd {
        TasksCmd::Check { file, envs } => check(&file, envs.as_deref()),
    }
}

fn check(file: &Path, envs: Option<&Path>) -> anyhow::Result<i32> {
    let rep = dojo_task::read_tasks(file)?;
    let registry = EnvRegistry::with_dir(envs)?;
    println!(
        "{}: {} rows, {} valid, {} invalid",
        file.display(),
        rep.rows,
        rep.tasks.len(),
        rep.errors.len()
    );
    let mut per_repo: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    let mut missing: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    let mut no_env = Vec::new();
    let mut bad_env = Vec::new();
    for t in &rep.tasks {
        let e = per_repo.entry(t.repo.as_str()).or_default();
        e.0 += 1;
        if t.sdist().is_some() {
            e.1 += 1;
        }
        for f in GRADING_FIELDS {
            let absent = match *f {
                "test_patch" => t.test_patch.trim().is_empty(),
                "FAIL_TO_PASS" => t.fail_to_pass.as_ref().is_none_or(Vec::is_empty),
                "PASS_TO_PASS" => t.pass_to_pass.is_none(),
                _ => false,
            };
            if absent {
                missing.entry(*f).or_default().push(t.instance_id.as_str());
            }
        }
        // Log parser and eval type are typed: a misspelt one failed when the row was read.
        match registry.resolve(t) {
            Ok(_) => {}
            Err(dojo_task::TaskError::NoEnv { .. }) => no_env.push(t.instance_id.as_str()),
            Err(e) => bad_env.push(e.to_string()),
        }
    }
    println!("\n{:<40} {:>6} {:>6}", "repo", "tasks", "sdist");
    for (repo, (n, s)) in &per_repo {
        println!("{repo:<40} {n:>6} {s:>6}");
    }
    let mut problems = rep.errors.len() + rep.duplicates.len() + bad_env.len();
    for e in &rep.errors {
        println!("invalid: {e}");
    }
    for (id, locs) in &rep.duplicates {
        println!("duplicate: {id} at {}", locs.join(", "));
    }
    for (field, ids) in &missing {
        println!("missing {field}: {} task(s): {}", ids.len(), preview(ids));
    }
    if !no_env.is_empty() {
        println!(
            "no environment spec: {} task(s): {}",
            no_env.len(),
            preview(&no_env)
        );
        problems += no_env.len();
    }
    for b in &bad_env {
        println!("environment: {b}");
    }
    println!(
        "\n{}",
        if problems == 0 {
            "OK"
        } else {
            "PROBLEMS FOUND"
        }
    );
    Ok(if problems == 0 { 0 } else { 1 })
}

fn preview(ids: &[&str]) -> String {
    let mut s = ids.iter().take(5).copied().collect::<Vec<_>>().join(", ");
    if ids.len() > 5 {
        s.push_str(&format!(", … (+{})", ids.len() - 5));
    }
    s
}
