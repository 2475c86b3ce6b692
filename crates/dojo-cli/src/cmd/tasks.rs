//! `dojo tasks`, `dojo validate`, `dojo eval` (dojo-task, dojo-grade).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use dojo_grade::batch::{self, BatchOptions, EvalJob, Prediction, TaskPreparer};
use dojo_grade::{GradeOptions, RunSummary, Semantics};
use dojo_task::{EnvRegistry, GRADING_FIELDS, PrepareOptions, Task};

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

/// Options shared by validate and eval.
#[derive(clap::Args, Clone)]
pub struct CommonArgs {
    /// Task file (.jsonl, .json or .parquet).
    #[arg(long)]
    tasks: PathBuf,
    /// Only these instances (repeatable).
    #[arg(long = "instance")]
    instances: Vec<String>,
    /// Concurrent sandboxes.
    #[arg(long, default_value_t = 1)]
    workers: usize,
    /// Extra environment specs (`*.toml`), overriding the embedded `envs/`.
    #[arg(long)]
    envs: Option<PathBuf>,
    /// Local repositories of git-based tasks (`owner__name` or `name`).
    #[arg(long)]
    repos: Option<PathBuf>,
    /// Grading rules: `classic` (default; SKIPPED counts as neither) or `swebench5`.
    #[arg(long, default_value = "classic")]
    semantics: String,
    /// Override every environment's test timeout (seconds).
    #[arg(long)]
    timeout: Option<u64>,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
}

#[derive(clap::Args)]
pub struct ValidateArgs {
    #[command(flatten)]
    common: CommonArgs,
    /// Fill in FAIL_TO_PASS / PASS_TO_PASS of new tasks (none, or empty) that validate: tests
    /// failing with the test patch alone and passing with the gold patch, and tests passing
    /// both times. JSONL task files only; only those two values change, in place.
    #[arg(long)]
    write: bool,
    /// Also write each run's report and log under this directory.
    #[arg(long)]
    out: Option<PathBuf>,
}

#[derive(clap::Args)]
pub struct EvalArgs {
    #[command(flatten)]
    common: CommonArgs,
    /// SWE-bench predictions (`instance_id`, `model_name_or_path`, `model_patch`), JSONL.
    #[arg(long)]
    predictions: PathBuf,
    /// Output directory: `<id>/report.json`, `<id>/test_output.txt`, `report.json`.
    #[arg(long)]
    out: PathBuf,
    /// Re-grade instances that already have a report.
    #[arg(long)]
    force: bool,
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
        match registry.resolve(t) {
            Ok(env) => {
                if dojo_grade::Parser::by_name(&env.log_parser).is_none() {
                    bad_env.push(format!(
                        "{}: unknown log parser {:?}",
                        t.instance_id, env.log_parser
                    ));
                }
            }
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

struct Loaded {
    tasks: Vec<Task>,
    registry: EnvRegistry,
    opts: BatchOptions,
    preparer_opts: PrepareOptions,
}

fn load(common: &CommonArgs) -> anyhow::Result<Loaded> {
    let mut tasks = dojo_task::load_tasks(&common.tasks)?;
    if !common.instances.is_empty() {
        for id in &common.instances {
            if !tasks.iter().any(|t| &t.instance_id == id) {
                bail!(
                    "--instance {id}: no such instance in {}",
                    common.tasks.display()
                );
            }
        }
        tasks.retain(|t| common.instances.contains(&t.instance_id));
    }
    let registry = EnvRegistry::with_dir(common.envs.as_deref())?;
    let semantics = Semantics::by_name(&common.semantics).with_context(|| {
        format!(
            "--semantics {:?}: expected classic or swebench5",
            common.semantics
        )
    })?;
    let grade = GradeOptions {
        semantics,
        timeout: common.timeout.map(Duration::from_secs),
        ..Default::default()
    };
    let opts = BatchOptions {
        workers: common.workers.max(1),
        grade,
        progress: !common.quiet,
        ..Default::default()
    };
    Ok(Loaded {
        tasks,
        registry,
        opts,
        preparer_opts: PrepareOptions {
            repos_dir: common.repos.clone(),
        },
    })
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}

pub fn run_validate(args: ValidateArgs) -> anyhow::Result<i32> {
    let l = load(&args.common)?;
    let jobs: Vec<_> = l
        .tasks
        .iter()
        .cloned()
        .enumerate()
        .map(|(i, t)| {
            let env = l.registry.resolve(&t).map_err(|e| e.to_string());
            (i, t, env)
        })
        .collect();
    let preparer = TaskPreparer {
        prepare_opts: l.preparer_opts.clone(),
    };
    let started = std::time::Instant::now();
    let mut results = runtime()?.block_on(batch::validate_tasks(jobs, &preparer, &l.opts));
    results.sort_by_key(|(i, _)| *i);
    let elapsed = started.elapsed();
    let ok = results.iter().filter(|(_, v)| v.ok).count();
    println!(
        "{:<45} {:>6} {:>5} {:>5}  problems",
        "instance", "ok", "F2P", "P2P"
    );
    for (_, v) in &results {
        println!(
            "{:<45} {:>6} {:>5} {:>5}  {}",
            v.instance_id,
            if v.ok { "yes" } else { "NO" },
            v.derived_fail_to_pass.len(),
            v.derived_pass_to_pass.len(),
            if v.ok && v.new_task {
                "new task: lists derived".to_string()
            } else {
                v.problems.join("; ")
            }
        );
        if let Some(dir) = &args.out {
            for (name, r) in [("test_patch_only", &v.before), ("gold", &v.gold)] {
                if let Some(r) = r {
                    batch::write_instance(&dir.join(&v.instance_id).join(name), r, None)?;
                }
            }
        }
    }
    println!(
        "\nrunnable: {ok}/{} ({:.1} s, {:.2} tasks/min, {} worker(s))",
        results.len(),
        elapsed.as_secs_f64(),
        results.len() as f64 / elapsed.as_secs_f64().max(1e-9) * 60.0,
        l.opts.workers
    );
    if args.write {
        let n = write_lists(&args.common.tasks, &l.tasks, &results)?;
        println!(
            "wrote FAIL_TO_PASS / PASS_TO_PASS of {n} task(s) into {}",
            args.common.tasks.display()
        );
        let skipped: Vec<&str> = results
            .iter()
            .filter(|(_, v)| v.new_task && !v.ok)
            .map(|(_, v)| v.instance_id.as_str())
            .collect();
        if !skipped.is_empty() {
            println!(
                "not written (not runnable, see above): {}",
                skipped.join(", ")
            );
        }
    }
    Ok(if ok == results.len() { 0 } else { 1 })
}

/// Rewrite a JSONL task file, filling in the derived lists of new tasks (no FAIL_TO_PASS yet)
/// that validated cleanly; every other line is kept byte for byte, in its place. Tasks that
/// are not runnable are left as they are (the table above says why). The new file is written
/// beside the old one and renamed over it, so a crash leaves one or the other, never half.
fn write_lists(
    path: &Path,
    tasks: &[Task],
    results: &[(usize, dojo_grade::Validation)],
) -> anyhow::Result<usize> {
    if path.extension().is_none_or(|e| e != "jsonl") {
        bail!("--write needs a .jsonl task file, not {}", path.display());
    }
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let rows: Vec<Option<serde_json::Map<String, serde_json::Value>>> = text
        .split_inclusive('\n')
        .map(|line| serde_json::from_str(line).ok())
        .collect();
    // Lists a row lacks are written in the file's own style: JSON arrays, unless the file's
    // other rows store them as JSON strings (as SWE-bench's datasets do).
    let (arrays, strings) =
        rows.iter()
            .flatten()
            .fold((0, 0), |(a, s), r| match r.get("FAIL_TO_PASS") {
                Some(serde_json::Value::Array(_)) => (a + 1, s),
                Some(serde_json::Value::String(_)) => (a, s + 1),
                _ => (a, s),
            });
    let default_array = arrays >= strings;
    let mut fill: BTreeMap<&str, (&Task, &dojo_grade::Validation)> = BTreeMap::new();
    for (i, v) in results {
        let t = &tasks[*i];
        if v.ok && v.new_task {
            fill.insert(t.instance_id.as_str(), (t, v));
        }
    }
    if fill.is_empty() {
        return Ok(0);
    }
    let mut out = String::with_capacity(text.len());
    let mut n = 0;
    for (line, row) in text.split_inclusive('\n').zip(&rows) {
        let id = row
            .as_ref()
            .and_then(|r| r.get("instance_id"))
            .and_then(|x| x.as_str());
        let Some((t, v)) = id.and_then(|id| fill.remove(id)) else {
            out.push_str(line);
            continue;
        };
        let (f2p, p2p) = (&v.derived_fail_to_pass, &v.derived_pass_to_pass);
        let body = line.strip_suffix('\n').unwrap_or(line);
        // The lists replaced in place, every other byte kept; a line the splicer does not
        // understand is re-serialised instead (same fields and order, our JSON style).
        let new = match dojo_task::splice_lists(
            body,
            &[("FAIL_TO_PASS", f2p), ("PASS_TO_PASS", p2p)],
            default_array,
        ) {
            Some(s) => s,
            None => serde_json::to_string(&t.row_with_lists(f2p, p2p, default_array))?,
        };
        out.push_str(&new);
        out.push('\n');
        n += 1;
    }
    let mut tmp_name = path.file_name().unwrap_or_default().to_os_string();
    tmp_name.push(format!(".{}.tmp", std::process::id()));
    let tmp = path.with_file_name(tmp_name);
    let written = std::fs::File::create(&tmp)
        .and_then(|mut f| {
            f.write_all(out.as_bytes())?;
            f.sync_all()
        })
        .and_then(|()| std::fs::rename(&tmp, path));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(e).with_context(|| format!("writing {}", path.display()));
    }
    Ok(n)
}

pub fn run_eval(args: EvalArgs) -> anyhow::Result<i32> {
    let mut l = load(&args.common)?;
    l.opts.force = args.force;
    let (preds, malformed) = batch::load_predictions(&args.predictions)
        .with_context(|| format!("reading predictions {}", args.predictions.display()))?;
    for m in &malformed {
        eprintln!(
            "{}: line {}: {}",
            args.predictions.display(),
            m.line,
            m.reason
        );
    }
    let by_id: BTreeMap<&str, &Prediction> =
        preds.iter().map(|p| (p.instance_id.as_str(), p)).collect();
    let jobs: Vec<EvalJob> = l
        .tasks
        .iter()
        .filter_map(|t| {
            let p = by_id.get(t.instance_id.as_str())?;
            Some(EvalJob {
                task: t.clone(),
                env: l.registry.resolve(t).map_err(|e| e.to_string()),
                prediction: (*p).clone(),
            })
        })
        .collect();
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    if !args.force {
        let done = jobs
            .iter()
            .filter(|j| {
                batch::existing_report(&batch::instance_dir(&args.out, &j.prediction.instance_id))
                    .is_some()
            })
            .count();
        if done > 0 {
            println!(
                "resuming: {done} of {} instance(s) already graded in {} (kept; --force regrades them)",
                jobs.len(),
                args.out.display()
            );
        }
    }
    let preparer = TaskPreparer {
        prepare_opts: l.preparer_opts.clone(),
    };
    let reports = runtime()?.block_on(batch::eval_jobs(jobs, &args.out, &preparer, &l.opts));
    let mut summary = RunSummary::build(
        l.tasks.iter().map(|t| t.instance_id.as_str()),
        preds.iter().map(|p| p.instance_id.as_str()),
        reports.iter(),
        l.opts.grade.semantics,
    );
    summary.malformed_prediction_lines = malformed;
    let path = args.out.join("report.json");
    let mut f =
        std::fs::File::create(&path).with_context(|| format!("writing {}", path.display()))?;
    f.write_all(&serde_json::to_vec_pretty(&summary.to_json())?)?;
    println!(
        "instances: {} submitted, {} resolved, {} unresolved, {} empty patch, {} error ({} infrastructure), {} malformed prediction line(s)",
        summary.submitted_instances,
        summary.resolved_instances,
        summary.unresolved_instances,
        summary.empty_patch_instances,
        summary.error_instances,
        summary.infra_failure_instances,
        summary.malformed_prediction_lines.len()
    );
    for (id, kind) in &summary.error_kinds {
        println!("error: {id}: {}", kind.as_str());
    }
    println!("report: {}", path.display());
    Ok(0)
}
