//! Where grading's time goes, step by step (medians over `--reps`), next to the bare test
//! command, an empty `exec` (the sandbox's own per-command cost) and the git steps that
//! grading's one sandbox process runs before the test command (timed inside the sandbox).
//! Results: `benchmarks/results/grade.md`.
//!
//! `cargo run -p dojo-bench --no-default-features --example grade_profile -- [--instance ID] [--reps N]`

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use dojo_grade::{GradeOptions, Verdict, grade_in_sandbox};
use dojo_sandbox::{ExecRequest, Sandbox, SandboxOptions};

use dojo_bench::{arg, median};

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (_, _, task, env) = dojo_bench::bundled()?;
    let id = task.instance_id.clone();
    let reps: usize = arg("--reps").and_then(|s| s.parse().ok()).unwrap_or(5);
    let sopts = SandboxOptions::default();
    let gopts = GradeOptions::default();
    let cmd = env.test_command(&task);
    let mut steps: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    macro_rules! time {
        ($name:expr, $t0:expr) => {
            steps
                .entry($name)
                .or_default()
                .push($t0.elapsed().as_secs_f64())
        };
    }
    for _ in 0..reps {
        let t0 = Instant::now();
        let (t2, e2) = (task.clone(), env.clone());
        let prepared =
            tokio::task::spawn_blocking(move || dojo_task::prepare(&t2, &e2, &Default::default()))
                .await??;
        time!("0 prepare (cached)", t0);

        let t0 = Instant::now();
        let sb = Sandbox::create(&prepared.pristine, Some(&prepared.env), &sopts).await?;
        time!("1 sandbox create", t0);
        let t0 = Instant::now();
        sb.exec(&ExecRequest::new(["true"])).await?;
        time!("2 exec true", t0);
        let t0 = Instant::now();
        sb.exec(&ExecRequest::shell("true")).await?;
        time!("2 exec bash -c true", t0);
        for (name, script) in [
            ("2 git --version", "git --version"),
            ("2 git status", "cd /testbed && git status --porcelain"),
            (
                "2 git apply --check",
                "cd /testbed && printf '%s' \"$P\" > /tmp/p.diff && git apply --check /tmp/p.diff",
            ),
            (
                "2 patch --dry-run",
                "cd /testbed && patch --dry-run --batch -p1 -i /tmp/p.diff",
            ),
        ] {
            let t0 = Instant::now();
            let o = sb
                .exec(&ExecRequest::shell(script).env("P", task.patch.clone()))
                .await?;
            time!(name, t0);
            if !o.success() {
                eprintln!("{name}: {}", o.stderr_lossy());
            }
        }
        // The git work of grading's one process, timed inside the sandbox.
        let files = dojo_patch::harness_targets(&task.test_patch).join(" ");
        let script = format!(
            "cd /testbed; s() {{ echo \"$1 $T0 $EPOCHREALTIME\"; T0=$EPOCHREALTIME; }}\n\
             T0=$EPOCHREALTIME; head -c {} > /tmp/m.diff; cat > /tmp/t.diff; s 'in-run: read patches'\n\
             git apply --verbose /tmp/m.diff >/dev/null 2>&1; s 'in-run: git apply (model)'\n\
             git checkout -q dojo-base -- {files}; s 'in-run: git checkout (restore)'\n\
             git apply --verbose /tmp/t.diff >/dev/null 2>&1; s 'in-run: git apply (test)'\n\
             git checkout -q dojo-base -- .; rm -f /tmp/m.diff /tmp/t.diff\n",
            task.patch.len()
        );
        let o = sb
            .exec(&ExecRequest::shell(script).stdin(format!("{}{}", task.patch, task.test_patch)))
            .await?;
        let script2 = "cd /testbed; s() { echo \"$1 $T0 $EPOCHREALTIME\"; T0=$EPOCHREALTIME; }\n\
             T0=$EPOCHREALTIME; printf '%s' \"$PM\" > /tmp/m.diff; printf '%s' \"$PT\" > /tmp/t.diff; s 'in-run: patches from env (printf)'\n\
             head -c 0 </dev/null; s 'in-run: one trivial process (head)'\n";
        let o2 = sb
            .exec(
                &ExecRequest::shell(script2)
                    .env("PM", task.patch.clone())
                    .env("PT", task.test_patch.clone()),
            )
            .await?;
        for line in o.stdout_lossy().lines().chain(o2.stdout_lossy().lines()) {
            let mut w: Vec<&str> = line.rsplitn(3, ' ').collect();
            w.reverse();
            if let [name, a, b] = w[..]
                && let (Ok(a), Ok(b)) = (a.parse::<f64>(), b.parse::<f64>())
            {
                let name: &'static str = Box::leak(name.to_string().into_boxed_str());
                steps.entry(name).or_default().push(b - a);
            }
        }
        let t0 = Instant::now();
        sb.write_file("/tmp/x.diff", task.patch.as_bytes()).await?;
        time!("2 write_file", t0);
        let t0 = Instant::now();
        assert!(sb.apply_patch(&task.patch).await?.applied());
        time!("3 apply_patch (model)", t0);
        let t0 = Instant::now();
        assert!(sb.apply_patch(&task.test_patch).await?.applied());
        time!("4 apply_patch (test)", t0);
        let t0 = Instant::now();
        let out = sb
            .exec(
                &ExecRequest::shell(format!("exec 2>&1\n{cmd}"))
                    .timeout(Duration::from_secs(env.timeout_s)),
            )
            .await?;
        time!("5 bare test command", t0);
        assert!(out.success());
        let t0 = Instant::now();
        sb.teardown().await?;
        time!("6 teardown", t0);

        let t0 = Instant::now();
        let mut sb = Sandbox::create(&prepared.pristine, Some(&prepared.env), &sopts).await?;
        let t1 = Instant::now();
        let r = grade_in_sandbox(&mut sb, &task, &env, Some(&task.patch), &gopts).await;
        let test_s = r.test_duration_s.unwrap_or(0.0);
        steps
            .entry("7 grade_in_sandbox outside its sandbox process")
            .or_default()
            .push(t1.elapsed().as_secs_f64() - test_s);
        time!("7 grade_in_sandbox + create (no teardown)", t0);
        assert_eq!(r.outcome, Verdict::Resolved, "{:?}", r.error);
        let t0 = Instant::now();
        let parser = dojo_grade::Parser::from(env.log_parser);
        let sm = dojo_grade::status_map_of(&r, parser);
        time!("8 parse the log again", t0);
        assert!(!sm.is_empty());
        let t0 = Instant::now();
        let dir = tempfile::tempdir()?;
        dojo_grade::batch::write_instance(dir.path(), &r, Some(&task.patch))?;
        time!("8 write report", t0);
        let t0 = Instant::now();
        sb.teardown().await?;
        time!("9 teardown", t0);
    }
    println!("{id}, {reps} reps, medians:");
    for (k, v) in steps {
        println!("{k:<45} {:>8.1} ms", median(v) * 1e3);
    }
    Ok(())
}
