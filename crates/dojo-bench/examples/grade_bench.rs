//! Grading benchmarks, side by side in one run (results: `benchmarks/results/grade.md`):
//!
//! 1. Grading wall time vs the bare test command on the same tree (a sandbox with both patches
//!    already applied, timing only `exec` of the test command). Two grading figures:
//!    - verdict: fresh sandbox + model patch + test-file restore + test patch + test command +
//!      parse + grade (`create` + [`grade_in_sandbox`]); what `dojo eval` waits for per
//!      instance, since it tears sandboxes down in the background;
//!    - whole `dojo eval` of one instance ([`batch::eval_jobs`] with one job): also the cached
//!      tree/venv lookup, writing `report.json` and the test log, and waiting for the teardown.
//!
//!    Alternated, `--reps` times each; medians.
//! 2. `dojo validate` throughput (tasks/minute) on the bundled benchmark with 1 and 2 workers,
//!    after one warm-up pass that builds every pristine tree and venv (cached builds are not
//!    what is measured).
//! 3. A batch: `dojo eval` of every bundled task's gold patch with one worker vs the sum of
//!    their bare test commands (`--batch-reps` times, alternated; medians).
//!
//! `cargo run -p dojo-bench --no-default-features --example grade_bench -- [--instance ID] [--reps N] [--limit N]
//! [--batch-reps N]`

use std::time::{Duration, Instant};

use dojo_grade::batch::{self, BatchOptions, EvalJob, Prediction};
use dojo_grade::{GradeOptions, Verdict, grade_in_sandbox};
use dojo_sandbox::{ExecRequest, Sandbox, SandboxOptions};
use dojo_task::Task;

use dojo_bench::{arg, median};

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (tasks, reg, task, env) = dojo_bench::bundled()?;
    let id = task.instance_id.clone();
    let reps: usize = arg("--reps").and_then(|s| s.parse().ok()).unwrap_or(5);
    let limit: usize = arg("--limit")
        .and_then(|s| s.parse().ok())
        .unwrap_or(tasks.len());
    let (t2, e2) = (task.clone(), env.clone());
    let prepared =
        tokio::task::spawn_blocking(move || dojo_task::prepare(&t2, &e2, &Default::default()))
            .await??;
    let sopts = SandboxOptions::default();
    let gopts = GradeOptions::default();
    let cmd = env.test_command(&task);

    let mut bare = Vec::new();
    let mut verdict = Vec::new();
    let mut blind = Vec::new();
    let no_observer = GradeOptions {
        observer: false,
        ..GradeOptions::default()
    };
    let mut whole = Vec::new();
    let mut previous = Vec::new();
    let out_dir = tempfile::tempdir()?;
    let preparer = dojo_task::Preparer::default();
    let quiet = BatchOptions {
        progress: Default::default(),
        force: true,
        ..Default::default()
    };
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
        let mut sb = Sandbox::create(&prepared.pristine, Some(&prepared.env), &sopts).await?;
        let r = grade_in_sandbox(&mut sb, &task, &env, Some(&task.patch), &gopts).await;
        verdict.push(t0.elapsed().as_secs_f64());
        assert_eq!(r.outcome, Verdict::Resolved, "{:?}", r.error);
        assert!(
            r.observer.as_ref().is_some_and(|o| o.loaded),
            "observer not loaded"
        );
        sb.teardown().await?;

        // The same without the test observer: its cost is the difference.
        let t0 = Instant::now();
        let mut sb = Sandbox::create(&prepared.pristine, Some(&prepared.env), &sopts).await?;
        let r = grade_in_sandbox(&mut sb, &task, &env, Some(&task.patch), &no_observer).await;
        blind.push(t0.elapsed().as_secs_f64());
        assert_eq!(r.outcome, Verdict::Resolved, "{:?}", r.error);
        sb.teardown().await?;

        let job = EvalJob {
            task: task.clone(),
            env: Ok(env.clone()),
            prediction: Prediction {
                instance_id: task.instance_id.clone(),
                model_name_or_path: "gold".into(),
                model_patch: Some(task.patch.clone()),
                line: 1,
            },
        };
        let t0 = Instant::now();
        let rs = batch::eval_jobs(vec![job], out_dir.path(), &preparer, &quiet).await;
        whole.push(t0.elapsed().as_secs_f64());
        assert_eq!(rs[0].outcome, Verdict::Resolved, "{:?}", rs[0].error);

        // The flow before this change, for comparison: one sandbox process per step (patch
        // write + apply + cleanup for each patch, a restore script) and an inline teardown.
        let t0 = Instant::now();
        let sb = Sandbox::create(&prepared.pristine, Some(&prepared.env), &sopts).await?;
        assert!(sb.apply_patch(&task.patch).await?.applied());
        let mut restore = String::from("cd /testbed\n");
        for f in dojo_patch::harness_targets(&task.test_patch) {
            restore.push_str(&format!(
                "if git cat-file -e dojo-base:'{f}' 2>/dev/null; then git checkout -q dojo-base -- '{f}'; else rm -f -- '{f}'; fi\n"
            ));
        }
        assert!(sb.exec(&ExecRequest::shell(restore)).await?.success());
        assert!(sb.apply_patch(&task.test_patch).await?.applied());
        let out = sb.exec(&req).await?;
        let sm = dojo_grade::Parser::from(env.log_parser).parse(&out.stdout_lossy());
        assert!(!sm.is_empty());
        sb.teardown().await?;
        previous.push(t0.elapsed().as_secs_f64());
    }
    let b = median(bare.clone());
    println!("{id}, {reps} reps, alternated; medians and ratio to the bare test command:\n");
    println!("| what | median (s) | ratio | median paired overhead (ms) | ratio from it |");
    println!("|---|---|---|---|---|");
    for (what, xs) in [
        ("bare test command", &bare),
        ("grading, until the verdict", &verdict),
        ("the same without the test observer", &blind),
        ("whole `dojo eval` of the instance", &whole),
        ("previous flow (5 processes, inline teardown)", &previous),
    ] {
        let m = median(xs.clone());
        // Each rep runs the variants back to back, so the per-rep difference to the bare run
        // cancels most of the load drift on a shared machine.
        let d = median(xs.iter().zip(&bare).map(|(x, b)| x - b).collect());
        println!(
            "| {what} | {m:.3} | {:.2}x | {:.0} | {:.2}x |",
            m / b,
            d * 1e3,
            (b + d) / b
        );
    }
    println!(
        "\nraw bare: {bare:.3?}\nraw verdict: {verdict:.3?}\nraw without observer: {blind:.3?}\nraw whole: {whole:.3?}\nraw previous: {previous:.3?}\n"
    );

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
    // Warm-up: builds every tree and venv once.
    let warm = batch::validate_tasks(
        jobs(&subset),
        &preparer,
        &BatchOptions {
            workers: 2,
            progress: Default::default(),
            ..Default::default()
        },
        &|_| {},
    )
    .await;
    let ok = warm.iter().filter(|(_, v)| v.ok).count();
    println!("warm-up: {ok}/{} runnable", warm.len());

    // 2. A batch: `dojo eval` of every task's gold patch (one worker) vs the sum of the bare
    //    test commands, alternated `--batch-reps` times.
    let batch_reps: usize = arg("--batch-reps")
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let gold_job = |t: &Task| EvalJob {
        task: t.clone(),
        env: reg.resolve(t).map_err(std::sync::Arc::new),
        prediction: Prediction {
            instance_id: t.instance_id.clone(),
            model_name_or_path: "gold".into(),
            model_patch: Some(t.patch.clone()),
            line: 1,
        },
    };
    let one_worker = BatchOptions {
        workers: 1,
        progress: Default::default(),
        force: true,
        ..Default::default()
    };
    let one_worker_blind = BatchOptions {
        grade: no_observer.clone(),
        ..one_worker.clone()
    };
    let (mut sums, mut evals, mut blind_evals) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..batch_reps {
        let mut sum = 0.0;
        for t in &subset {
            let env = reg.resolve(t)?;
            let (t2, e2) = (t.clone(), env.clone());
            let p = tokio::task::spawn_blocking(move || {
                dojo_task::prepare(&t2, &e2, &Default::default())
            })
            .await??;
            let sb = Sandbox::create(&p.pristine, Some(&p.env), &sopts).await?;
            assert!(
                sb.apply_patch(&t.patch).await?.applied()
                    && sb.apply_patch(&t.test_patch).await?.applied()
            );
            let req = ExecRequest::shell(format!("exec 2>&1\n{}", env.test_command(t)))
                .timeout(Duration::from_secs(env.timeout_s));
            let t0 = Instant::now();
            let out = sb.exec(&req).await?;
            sum += t0.elapsed().as_secs_f64();
            assert!(out.success(), "{}: {}", t.instance_id, out.stdout_lossy());
            sb.teardown().await?;
        }
        sums.push(sum);
        let t0 = Instant::now();
        let rs = batch::eval_jobs(
            subset.iter().map(gold_job).collect(),
            out_dir.path(),
            &preparer,
            &one_worker,
        )
        .await;
        evals.push(t0.elapsed().as_secs_f64());
        let resolved = rs.iter().filter(|r| r.outcome == Verdict::Resolved).count();
        assert_eq!(resolved, subset.len(), "not all gold patches resolved");
        let t0 = Instant::now();
        let rs = batch::eval_jobs(
            subset.iter().map(gold_job).collect(),
            out_dir.path(),
            &preparer,
            &one_worker_blind,
        )
        .await;
        blind_evals.push(t0.elapsed().as_secs_f64());
        assert!(rs.iter().all(|r| r.outcome == Verdict::Resolved));
    }
    let (sb_, ev) = (median(sums.clone()), median(evals.clone()));
    println!(
        "\n{} tasks, {batch_reps} reps: sum of bare test commands {sb_:.2} s, `dojo eval` (1 worker) {ev:.2} s, ratio {:.2}x",
        subset.len(),
        ev / sb_
    );
    let bl = median(blind_evals.clone());
    println!(
        "`dojo eval` (1 worker) without the test observer {bl:.2} s, ratio {:.2}x; the observer's cost {:.2}x",
        bl / sb_,
        ev / bl
    );
    println!(
        "raw sums: {sums:.2?}\nraw evals: {evals:.2?}\nraw evals without observer: {blind_evals:.2?}\n"
    );

    println!("| workers | tasks | wall (s) | tasks/min |");
    println!("|---|---|---|---|");
    for workers in [1, 2] {
        let t0 = Instant::now();
        let res = batch::validate_tasks(
            jobs(&subset),
            &preparer,
            &BatchOptions {
                workers,
                progress: Default::default(),
                ..Default::default()
            },
            &|_| {},
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
