//! Grading benchmarks, side by side in one run (results: `benchmarks/results/grade.md`):
//!
//! 1. Grading wall time (fresh sandbox + model patch + test-file restore + test patch + test
//!    command + parse + report + teardown) vs the bare test command on the same tree (a sandbox
//!    with both patches already applied, timing only `exec` of the test command). Alternated,
//!    `--reps` times each; medians.
//! 2. `dojo validate` throughput (tasks/minute) on the bundled benchmark with 1 and 2 workers,
//!    after one warm-up pass that builds every pristine tree and venv (cached builds are not
//!    what is measured).
//!
//! `cargo run -p dojo-grade --example grade_bench -- [--instance ID] [--reps N] [--limit N]`

use std::path::PathBuf;
use std::time::{Duration, Instant};

use dojo_grade::batch::{self, BatchOptions, TaskPreparer};
use dojo_grade::{GradeOptions, Outcome, grade_in_sandbox};
use dojo_sandbox::{ExecRequest, Sandbox, SandboxOptions};
use dojo_task::{EnvRegistry, Task};

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(|a, b| a.total_cmp(b));
    xs[xs.len() / 2]
}

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../benchmarks/mini/tasks.jsonl"
    ));
    let tasks = dojo_task::load_tasks(&path)?;
    let reg = EnvRegistry::embedded()?;
    let id = arg("--instance").unwrap_or_else(|| "pytest-dev__iniconfig-1".into());
    let reps: usize = arg("--reps").and_then(|s| s.parse().ok()).unwrap_or(5);
    let limit: usize = arg("--limit")
        .and_then(|s| s.parse().ok())
        .unwrap_or(tasks.len());
    let task: Task = tasks
        .iter()
        .find(|t| t.instance_id == id)
        .ok_or("no such instance")?
        .clone();
    let env = reg.resolve(&task)?;
    let (t2, e2) = (task.clone(), env.clone());
    let prepared =
        tokio::task::spawn_blocking(move || dojo_task::prepare(&t2, &e2, &Default::default()))
            .await??;
    let sopts = SandboxOptions::default();
    let gopts = GradeOptions::default();
    let cmd = env.test_command(&task);

    let mut bare = Vec::new();
    let mut grade = Vec::new();
    for _ in 0..reps {
        let sb = Sandbox::create(&prepared.pristine, Some(&prepared.env), &sopts).await?;
        assert!(
            sb.apply_patch(&task.patch).await?.applied()
                && sb.apply_patch(&task.test_patch).await?.applied()
        );
        let req = ExecRequest::shell(format!("exec 2>&1\n{cmd}"))
            .timeout(Duration::from_secs(env.timeout_s));
        let t0 = Instant::now();
        let out = sb.exec(&req).await?;
        bare.push(t0.elapsed().as_secs_f64());
        assert!(out.success(), "bare run failed: {}", out.stdout_lossy());
        sb.teardown().await?;

        let t0 = Instant::now();
        let sb = Sandbox::create(&prepared.pristine, Some(&prepared.env), &sopts).await?;
        let r = grade_in_sandbox(&sb, &task, &env, Some(&task.patch), &gopts).await?;
        sb.teardown().await?;
        grade.push(t0.elapsed().as_secs_f64());
        assert_eq!(r.outcome, Outcome::Resolved, "{:?}", r.error);
    }
    let (b, g) = (median(bare.clone()), median(grade.clone()));
    println!(
        "| instance | reps | bare test command (median s) | full grading (median s) | ratio |"
    );
    println!("|---|---|---|---|---|");
    println!("| {id} | {reps} | {b:.3} | {g:.3} | {:.3}x |", g / b);
    println!("raw bare: {bare:?}\nraw grade: {grade:?}\n");

    let subset: Vec<Task> = tasks.into_iter().take(limit).collect();
    let jobs = |ts: &[Task]| -> Vec<(usize, Task, Result<dojo_task::RepoEnv, String>)> {
        ts.iter()
            .cloned()
            .enumerate()
            .map(|(i, t)| {
                let e = reg.resolve(&t).map_err(|e| e.to_string());
                (i, t, e)
            })
            .collect()
    };
    let preparer = TaskPreparer::default();
    // Warm-up: builds every tree and venv once.
    let warm = batch::validate_tasks(
        jobs(&subset),
        &preparer,
        &BatchOptions {
            workers: 2,
            progress: false,
            ..Default::default()
        },
    )
    .await;
    let ok = warm.iter().filter(|(_, v)| v.ok).count();
    println!("warm-up: {ok}/{} runnable", warm.len());
    println!("| workers | tasks | wall (s) | tasks/min |");
    println!("|---|---|---|---|");
    for workers in [1, 2] {
        let t0 = Instant::now();
        let res = batch::validate_tasks(
            jobs(&subset),
            &preparer,
            &BatchOptions {
                workers,
                progress: false,
                ..Default::default()
            },
        )
        .await;
        let s = t0.elapsed().as_secs_f64();
        println!(
            "| {workers} | {} | {s:.1} | {:.2} |",
            res.len(),
            res.len() as f64 / s * 60.0
        );
    }
    Ok(())
}
