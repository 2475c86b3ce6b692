//! One synthesis run: project → environment → baseline → mutants → validated tasks.
//!
//! Everything that runs tests goes through the stage that owns it: trees and venvs from
//! `dojo_task::Preparer` (one clean tree and venv for the whole run; each finished task gets its
//! own, as `dojo validate` builds it), test runs through `dojo_grade::grade_in_sandbox` with the
//! mutant's bug patch as the patch under test (the harness's apply chain and log parsers), and
//! FAIL_TO_PASS / PASS_TO_PASS from `dojo_grade::derive_lists`.
//!
//! Per mutant, in one sandbox over the clean tree:
//! 1. the test files that mention the mutated module (skipped when that is every test file):
//!    nothing broken → dropped (`not_caught_by_module_tests`);
//! 2. the whole suite: FAIL_TO_PASS = baseline-passing tests that now fail, PASS_TO_PASS = the
//!    rest still passing; none failing → `not_caught`; more than `max_break_share` of the suite
//!    failing → `breaks_too_much`; past the wall-clock limit → `timeout`; a run that fills
//!    the sandbox's capped disk (`ENOSPC` in the log or the error, at any stage) →
//!    `disk_full` (its failures are the full disk's, not the bug's);
//! 3. the FAIL_TO_PASS tests again: those that pass now are flaky and leave the list; none left
//!    → `flaky`;
//! 4. same FAIL_TO_PASS set and same function as an accepted task → `duplicate`;
//! 5. the finished task, validated as `dojo validate` does (its own tree with the bug
//!    committed, test run before and after the gold patch) → else `final_validation`.
//!
//! Results are consumed in the seeded try order (whatever finishes first), so the task file is
//! the same for the same seed; up to `workers` mutants are in flight.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dojo_grade::parsers::{PASSED, StatusMap};
use dojo_grade::{GradeOptions, Parser, derive_lists, validate_in_sandbox};
use dojo_sandbox::{Pristine, PythonEnv, Sandbox, SandboxOptions};
use dojo_task::{EnvRegistry, PreparedTask, RepoEnv, Task, TaskError};
use futures::StreamExt;
use serde_json::{Map, Value, json};

use crate::clean::{
    baseline, clean_task, default_env_spec, default_repo, env_override, mentioning, source_files,
};
use crate::diff::{changed_lines, unified_diff};
use crate::llm::llm_mutants;
use crate::operators::{Mutation, Operator, mutations_seeded};
use crate::options::SynthOptions;
use crate::project::{Project, normalize};
use crate::runner::{RunError, run_tests, test_file};
use crate::state::{BaselineRecord, Header, MutantRecord, PROGRESS_SCHEMA_VERSION, State};
use crate::statement::problem_statement;
use crate::summary::Summary;
use crate::summary::summary_from;
use crate::{SynthError, sample};

/// Version of the `synth` provenance object in each task line.
pub const PROVENANCE_SCHEMA_VERSION: u32 = 1;

/// Everything the mutant jobs share.
struct Ctx {
    project: Project,
    repo: String,
    /// The clean task (the sdist without a bug) the mutant runs are graded as.
    clean: Task,
    env: RepoEnv,
    /// The resolved environment, stored in every task's `env` so a task file is self-contained.
    env_override: Value,
    registry: EnvRegistry,
    pristine: Pristine,
    venv: PythonEnv,
    stable: StatusMap,
    stable_count: usize,
    test_files: Vec<String>,
    module_tests: BTreeMap<String, Vec<String>>,
    sources: BTreeMap<String, String>,
    timeout: Duration,
    seed: u64,
    max_break_share: f64,
    max_fail_to_pass: Option<usize>,
    final_validate: bool,
    hint_module: bool,
    sandbox: SandboxOptions,
    stage_one: bool,
    /// Dedupe keys of accepted tasks (an in-flight mutant whose key is here is a duplicate).
    accepted: Mutex<BTreeSet<String>>,
}

/// What became of one mutant.
enum Verdict {
    Dropped {
        reason: &'static str,
        detail: String,
        survived: bool,
    },
    Validated(Box<Map<String, Value>>, String),
}

fn dropped(reason: &'static str, detail: impl Into<String>, survived: bool) -> Verdict {
    Verdict::Dropped {
        reason,
        detail: detail.into(),
        survived,
    }
}

fn dedupe_key(file: &str, function: &str, f2p: &[String]) -> String {
    let mut f: Vec<&str> = f2p.iter().map(String::as_str).collect();
    f.sort();
    format!("{file}::{function}\0{}", f.join("\0"))
}

impl Ctx {
    fn instance_id(&self, m: &Mutation) -> String {
        format!(
            "{}.{}.{}.{}",
            self.repo.replace('/', "__"),
            self.project.version,
            m.operator,
            m.id()
        )
    }

    fn subset(&self, files: &[String]) -> StatusMap {
        let mut sm = StatusMap::new();
        for (k, v) in self.stable.iter() {
            if files.iter().any(|f| f == test_file(k)) {
                sm.insert(k, v);
            }
        }
        sm
    }

    async fn evaluate(&self, m: &Mutation) -> Verdict {
        let Some(src) = self.sources.get(&m.file) else {
            return dropped("infra", format!("{}: source not loaded", m.file), false);
        };
        let mutant = m.apply(src);
        let bug = unified_diff(&m.file, src, &mutant);
        let gold = unified_diff(&m.file, &mutant, src);
        let mut sb = match Sandbox::create(&self.pristine, Some(&self.venv), &self.sandbox).await {
            Ok(sb) => sb,
            Err(e) => return dropped("infra", format!("creating a sandbox: {e}"), false),
        };
        let v = self.test_mutant(&mut sb, m, &bug).await;
        if let Err(e) = sb.teardown().await {
            tracing::warn!("sandbox teardown: {e}");
        }
        let (f2p, p2p, log) = match v {
            Ok(x) => x,
            Err(v) => return v,
        };
        let key = dedupe_key(&m.file, &m.function, &f2p);
        if self.accepted.lock().is_ok_and(|a| a.contains(&key)) {
            return dropped(
                "duplicate",
                "same FAIL_TO_PASS and function as a task",
                true,
            );
        }
        let row = self.task_row(m, &bug, &gold, &f2p, &p2p, &log, &key);
        if self.final_validate
            && let Err(problems) = self.validate_task(&row).await
        {
            return dropped("final_validation", problems.to_string(), true);
        }
        Verdict::Validated(Box::new(row), key)
    }

    /// Stages 1–3: (FAIL_TO_PASS, PASS_TO_PASS, full-suite log) or the verdict.
    async fn test_mutant(
        &self,
        sb: &mut Sandbox,
        m: &Mutation,
        bug: &str,
    ) -> Result<(Vec<String>, Vec<String>, String), Verdict> {
        let fail = |e: RunError, stage: &str| match e {
            RunError::Timeout => dropped(
                "timeout",
                format!("{stage}: past {:?}", self.timeout),
                false,
            ),
            RunError::Infra(s) => dropped("infra", format!("{stage}: {s}"), false),
            RunError::DiskFull(s) => dropped(
                "disk_full",
                format!("{stage}: the sandbox's disk filled up: {s}"),
                false,
            ),
        };
        let module_files = self.module_tests.get(&m.file).cloned().unwrap_or_default();
        if self.stage_one && !module_files.is_empty() && module_files.len() < self.test_files.len()
        {
            let r = run_tests(
                sb,
                &self.clean,
                &self.env,
                &module_files,
                Some(bug),
                self.timeout,
            )
            .await
            .map_err(|e| fail(e, "module tests"))?;
            let (f2p, _) = derive_lists(&r.sm, &self.subset(&module_files));
            if f2p.is_empty() {
                return Err(dropped(
                    "not_caught_by_module_tests",
                    module_files.join(" "),
                    false,
                ));
            }
            sb.reset()
                .await
                .map_err(|e| dropped("infra", format!("reset: {e}"), false))?;
        }
        let r = run_tests(sb, &self.clean, &self.env, &[], Some(bug), self.timeout)
            .await
            .map_err(|e| fail(e, "whole suite"))?;
        let (f2p, p2p) = derive_lists(&r.sm, &self.stable);
        if f2p.is_empty() {
            return Err(dropped("not_caught", "", false));
        }
        let share = f2p.len() as f64 / self.stable_count.max(1) as f64;
        if share > self.max_break_share {
            return Err(dropped(
                "breaks_too_much",
                format!("{} of {} tests", f2p.len(), self.stable_count),
                true,
            ));
        }
        // FAIL_TO_PASS again: a test that passes this time is flaky under the bug.
        sb.reset()
            .await
            .map_err(|e| dropped("infra", format!("reset: {e}"), false))?;
        let files: Vec<String> = f2p
            .iter()
            .map(|t| test_file(t).to_string())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let again = if self.stage_one { files } else { Vec::new() };
        let r2 = run_tests(sb, &self.clean, &self.env, &again, Some(bug), self.timeout)
            .await
            .map_err(|e| fail(e, "FAIL_TO_PASS rerun"))?;
        let still: Vec<String> = f2p
            .iter()
            .filter(|t| r2.sm.get(t) != Some(PASSED))
            .cloned()
            .collect();
        if still.is_empty() {
            return Err(dropped("flaky", f2p.join(" "), true));
        }
        if let Some(max) = self.max_fail_to_pass
            && still.len() > max
        {
            return Err(dropped(
                "too_many_fail_to_pass",
                format!("{} failing tests, at most {max}", still.len()),
                true,
            ));
        }
        Ok((still, p2p, r.log))
    }

    #[allow(clippy::too_many_arguments)]
    fn task_row(
        &self,
        m: &Mutation,
        bug: &str,
        gold: &str,
        f2p: &[String],
        p2p: &[String],
        log: &str,
        key: &str,
    ) -> Map<String, Value> {
        let package = format!("{} {}", self.project.name, self.project.version);
        let (statement, symptoms) = problem_statement(&package, log, f2p, &self.test_files);
        let hints = if self.hint_module {
            format!("The problem is in `{}`.", m.file)
        } else {
            String::new()
        };
        let s = &self.project.sdist;
        let f2p_files: BTreeSet<&str> = f2p.iter().map(|t| test_file(t)).collect();
        let first = symptoms.first();
        let row = json!({
            "instance_id": self.instance_id(m),
            "repo": self.repo,
            "base_commit": s.sha256,
            "patch": gold,
            "test_patch": "",
            "problem_statement": statement,
            "hints_text": hints,
            "created_at": "",
            "version": self.project.version,
            "environment_setup_commit": s.sha256,
            "FAIL_TO_PASS": f2p,
            "PASS_TO_PASS": p2p,
            "source": {"kind": "sdist", "url": s.url, "sha256": s.sha256,
                       "filename": s.filename, "bug_patch": bug},
            "env": self.env_override,
            "synth": {
                "schema_version": PROVENANCE_SCHEMA_VERSION,
                "mutation_id": m.id(),
                "operator": m.operator,
                "file": m.file,
                "span": [m.start, m.end],
                "line": m.line,
                "function": m.function,
                "original": m.original,
                "replacement": m.replacement,
                "seed": self.seed,
                "region": key.split('\0').next().unwrap_or(""),
                "features": {
                    "lines_changed": changed_lines(bug),
                    "files_changed": 1,
                    "fail_to_pass": f2p.len(),
                    "pass_to_pass": p2p.len(),
                    "failing_test_files": f2p_files.len(),
                    "frame_depth": first.map_or(0, |s| s.frames.len()),
                    "exception": first.and_then(|s| s.exception.clone()),
                },
            },
        });
        let mut row = match row {
            Value::Object(m) => m,
            _ => Map::new(),
        };
        if let Some(model) = &m.model
            && let Some(Value::Object(syn)) = row.get_mut("synth")
        {
            syn.insert("model".into(), model.clone().into());
        }
        row
    }

    /// `dojo validate` of the finished task: its own tree (bug committed) and venv, the suite
    /// before and after the gold patch, the lists checked.
    async fn validate_task(&self, row: &Map<String, Value>) -> Result<(), SynthError> {
        let loc = dojo_task::Location {
            file: "(synthesized)".into(),
            unit: "task",
            index: 1,
        };
        let task = Task::from_row(row.clone(), &loc)?;
        let env = self.registry.resolve(&task)?;
        let prepared = dojo_task::Preparer::default().prepare(&task, &env).await?;
        let mut sb = Sandbox::create(&prepared.pristine, Some(&prepared.env), &self.sandbox)
            .await
            .map_err(SynthError::Sandbox)?;
        let v = validate_in_sandbox(&mut sb, &task, &env, &GradeOptions::default()).await;
        if let Err(e) = sb.teardown().await {
            tracing::warn!("sandbox teardown: {e}");
        }
        if v.ok {
            Ok(())
        } else {
            Err(SynthError::Invalid(v.problems))
        }
    }
}

/// Run (or resume) a synthesis: the tasks go to `opts.out`; returns the summary.
pub async fn synthesize(opts: &SynthOptions) -> Result<Summary, SynthError> {
    let started = Instant::now();
    let project = resolve_project(opts).await?;
    let label = format!("{}=={}", project.name, project.version);
    // `--envs DIR` may not exist yet: it is also where a written spec goes.
    let mut registry = EnvRegistry::with_dir(opts.envs_dir.as_deref().filter(|d| d.exists()))?;
    let repo = opts
        .repo
        .clone()
        .unwrap_or_else(|| default_repo(&registry, &opts.input));
    let clean = clean_task(&repo, &project)?;
    let env = resolve_env(opts, &mut registry, &repo, &project, &clean)?;
    let ops = operators(opts);
    let mut state = State::open(&opts.out, &run_header(opts, &project, &repo, &ops))?;

    // The clean tree and venv, built once (cached in $DOJO_HOME).
    let prepared = dojo_task::Preparer::default()
        .prepare(&clean, &env)
        .await
        .map_err(|source| SynthError::Environment {
            project: label.clone(),
            source: Box::new(source),
        })?;
    let base = recorded_baseline(&mut state, &clean, &env, &prepared, opts, &label).await?;
    let test_files = baseline_test_files(&base);
    let Mutants {
        files,
        sources,
        mut all,
        mut per_op,
        unparseable,
        module_tests,
        parsed_files,
    } = mutations(&prepared.pristine.path, &test_files, &ops, opts);
    if let Some(l) = &opts.llm {
        let (asked, ok) =
            llm_mutants(l, &mut state, &sources, &parsed_files, opts, &mut all).await?;
        let e = per_op.entry(Operator::LlmRewrite).or_default();
        e.0 += asked;
        e.1 += ok;
    }
    let order = sample::order(all, opts.seed);

    let timeout = opts.mutant_timeout.unwrap_or_else(|| {
        Duration::from_secs_f64((3.0 * base.duration_s + 10.0).min(env.timeout_s as f64))
    });
    let stage_one = matches!(
        Parser::from(env.log_parser),
        Parser::Pytest | Parser::PytestOptions | Parser::PytestV2
    );
    let accepted = accepted_keys(&state);
    let ctx = Arc::new(Ctx {
        env_override: env_override(&env),
        project: project.clone(),
        repo,
        clean,
        env,
        registry,
        pristine: prepared.pristine.clone(),
        venv: prepared.env.clone(),
        stable_count: base.passing.len(),
        stable: stable_tests(&base),
        test_files: test_files.iter().cloned().collect(),
        module_tests,
        sources,
        timeout,
        seed: opts.seed,
        max_break_share: opts.max_break_share,
        max_fail_to_pass: opts.max_fail_to_pass,
        final_validate: opts.final_validate,
        hint_module: opts.hint_module,
        sandbox: opts.sandbox.clone(),
        stage_one,
        accepted: Mutex::new(accepted.clone()),
    });

    let done = state.done_ids();
    let todo: Vec<Mutation> = order
        .into_iter()
        .filter(|m| !done.contains(&m.id()))
        .take(opts.max_tries.unwrap_or(usize::MAX))
        .collect();
    let tried = try_mutants(&ctx, &mut state, todo, accepted, opts).await?;
    let mut s = summary(&state, &per_op, &project, &base);
    s.source_files = files.len();
    s.unparseable_files = unparseable;
    s.tried_this_session = tried;
    s.elapsed_s = started.elapsed().as_secs_f64();
    Ok(s)
}

/// The project `opts.input` names, resolved off the async runtime (it downloads and unpacks).
async fn resolve_project(opts: &SynthOptions) -> Result<Project, SynthError> {
    let input = opts.input.clone();
    tokio::task::spawn_blocking(move || crate::project::resolve(&input))
        .await
        .map_err(|e| crate::input_from("resolving the project", e))?
}

/// The clean task's environment. Without a spec for it, the one in the envs directory is used
/// when there is one, else a default spec is written there (and said) for the user to edit.
fn resolve_env(
    opts: &SynthOptions,
    registry: &mut EnvRegistry,
    repo: &str,
    project: &Project,
    clean: &Task,
) -> Result<RepoEnv, SynthError> {
    match registry.resolve(clean) {
        Ok(e) => return Ok(e),
        Err(TaskError::NoEnv { .. }) => {}
        Err(e) => return Err(e.into()),
    }
    let dir = opts.envs_dir.clone().unwrap_or_else(|| {
        opts.out
            .parent()
            .map_or_else(|| PathBuf::from("envs"), |p| p.join("envs"))
    });
    let path = dir.join(format!("{}.toml", normalize(&project.name)));
    if path.exists() {
        registry.add_dir(&dir)?;
        eprintln!("using the environment spec {}", path.display());
    } else {
        std::fs::create_dir_all(&dir).map_err(|e| SynthError::Io {
            path: dir.display().to_string(),
            source: e,
        })?;
        let text = default_env_spec(repo, &project.name, &project.version);
        std::fs::write(&path, &text).map_err(|e| SynthError::Io {
            path: path.display().to_string(),
            source: e,
        })?;
        registry.add_text(&path.display().to_string(), &text)?;
        eprintln!(
            "no environment spec for {repo}: wrote {} (edit it and pass --envs {} if the tests need more)",
            path.display(),
            dir.display()
        );
    }
    Ok(registry.resolve(clean)?)
}

/// The operators asked for, sorted and once each (the order the header records).
fn operators(opts: &SynthOptions) -> Vec<Operator> {
    let mut ops = opts.operators.clone();
    ops.sort();
    ops.dedup();
    ops
}

/// The progress file's header: what a resumed run must match.
fn run_header(opts: &SynthOptions, project: &Project, repo: &str, ops: &[Operator]) -> Header {
    let mut config = json!({
        "operators": ops.iter().map(|o| o.name()).collect::<Vec<_>>(),
        "files": opts.files,
        "max_break_share": opts.max_break_share,
        "final_validate": opts.final_validate,
        "hint_module": opts.hint_module,
    });
    // Options added after the first release go in only when set, so older progress records
    // still match.
    if let Value::Object(c) = &mut config {
        if !opts.functions.is_empty() {
            c.insert("functions".into(), json!(opts.functions));
        }
        if let Some(n) = opts.max_fail_to_pass {
            c.insert("max_fail_to_pass".into(), json!(n));
        }
    }
    if let (Some(l), Value::Object(c)) = (&opts.llm, &mut config) {
        c.insert(
            "llm".into(),
            json!({"model": l.label, "rewrites": l.rewrites}),
        );
    }
    Header {
        schema_version: PROGRESS_SCHEMA_VERSION,
        kind: "run".into(),
        project: project.name.clone(),
        version: project.version.clone(),
        repo: repo.to_string(),
        sdist_sha256: project.sdist.sha256.clone(),
        seed: opts.seed,
        config,
    }
}

/// The baseline of the clean tree: the recorded one on resume, else run and recorded.
async fn recorded_baseline(
    state: &mut State,
    clean: &Task,
    env: &RepoEnv,
    prepared: &PreparedTask,
    opts: &SynthOptions,
    label: &str,
) -> Result<BaselineRecord, SynthError> {
    if let Some(b) = state.baseline.clone() {
        return Ok(b);
    }
    let b = baseline(
        clean,
        env,
        &prepared.pristine,
        &prepared.env,
        &opts.sandbox,
        label,
    )
    .await?;
    state.record_baseline(&b)?;
    Ok(b)
}

/// The tests that passed at baseline, as the status map a mutant's run is compared with.
fn stable_tests(base: &BaselineRecord) -> StatusMap {
    let mut stable = StatusMap::new();
    for t in &base.passing {
        stable.insert(t.as_str(), PASSED);
    }
    stable
}

/// The Python test files the baseline ran.
fn baseline_test_files(base: &BaselineRecord) -> BTreeSet<String> {
    base.passing
        .iter()
        .chain(&base.excluded)
        .map(|t| test_file(t).to_string())
        .filter(|f| f.ends_with(".py"))
        .collect()
}

/// The operator mutations of the library files, and what the run needs to know about them.
struct Mutants {
    /// The library files considered.
    files: Vec<String>,
    /// Text of each readable file.
    sources: BTreeMap<String, String>,
    all: Vec<Mutation>,
    /// Per operator: (candidates, mutations made).
    per_op: BTreeMap<Operator, (usize, usize)>,
    /// Files that could not be read or parsed, with why.
    unparseable: Vec<String>,
    /// Per file, the test files that mention its module.
    module_tests: BTreeMap<String, Vec<String>>,
    /// Files that parsed (the LLM stage rewrites functions of these).
    parsed_files: Vec<String>,
}

/// Mutations of every library file under `tree`, narrowed to `--functions` when given.
fn mutations(
    tree: &std::path::Path,
    test_files: &BTreeSet<String>,
    ops: &[Operator],
    opts: &SynthOptions,
) -> Mutants {
    let tests_text: BTreeMap<String, String> = test_files
        .iter()
        .filter_map(|f| Some((f.clone(), std::fs::read_to_string(tree.join(f)).ok()?)))
        .collect();
    let files = source_files(tree, test_files, &opts.files);
    let mut m = Mutants {
        files: Vec::new(),
        sources: BTreeMap::new(),
        all: Vec::new(),
        per_op: BTreeMap::new(),
        unparseable: Vec::new(),
        module_tests: BTreeMap::new(),
        parsed_files: Vec::new(),
    };
    for f in &files {
        let Ok(text) = std::fs::read_to_string(tree.join(f)) else {
            m.unparseable.push(format!("{f}: not UTF-8"));
            continue;
        };
        match mutations_seeded(f, &text, ops, opts.seed) {
            Ok(fm) => {
                for (op, n) in &fm.candidates_by_op {
                    m.per_op.entry(*op).or_default().0 += n;
                }
                for mu in &fm.mutations {
                    m.per_op.entry(mu.operator).or_default().1 += 1;
                }
                m.all.extend(fm.mutations);
                m.parsed_files.push(f.clone());
            }
            Err(e) => m.unparseable.push(e.to_string()),
        }
        m.module_tests.insert(f.clone(), mentioning(f, &tests_text));
        m.sources.insert(f.clone(), text);
    }
    m.files = files;
    if !opts.functions.is_empty() {
        let wanted = |function: &str| opts.functions.iter().any(|f| function.contains(f.as_str()));
        m.all.retain(|mu| wanted(&mu.function));
        // Candidates and parsed counts follow the filter too.
        m.per_op.clear();
        for mu in &m.all {
            let e = m.per_op.entry(mu.operator).or_default();
            e.0 += 1;
            e.1 += 1;
        }
    }
    m
}

/// Dedupe keys of the tasks already written (a resumed run does not accept them again).
fn accepted_keys(state: &State) -> BTreeSet<String> {
    let mut accepted: BTreeSet<String> = BTreeSet::new();
    for t in &state.tasks {
        let syn = t.get("synth");
        let region = syn.and_then(|s| s.get("region")).and_then(Value::as_str);
        let f2p: Vec<String> = t
            .get("FAIL_TO_PASS")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        if let Some(r) = region
            && let Some((file, func)) = r.split_once("::")
        {
            accepted.insert(dedupe_key(file, func, &f2p));
        }
    }
    accepted
}

/// Evaluate `todo` (up to `workers` at once, consumed in order) until `max_tasks` tasks are
/// written, recording each mutant's outcome; returns how many were tried.
async fn try_mutants(
    ctx: &Arc<Ctx>,
    state: &mut State,
    todo: Vec<Mutation>,
    mut accepted: BTreeSet<String>,
    opts: &SynthOptions,
) -> Result<usize, SynthError> {
    let pb = &opts.progress;
    if state.tasks.len() < opts.max_tasks {
        pb.start("synth", todo.len() as u64, 0);
    }
    pb.status(&format!("{}/{} tasks", state.tasks.len(), opts.max_tasks));
    let mut tried = 0;
    if state.tasks.len() < opts.max_tasks {
        let mut stream = futures::stream::iter(todo)
            .map(|m| {
                let ctx = ctx.clone();
                async move {
                    let v = ctx.evaluate(&m).await;
                    (m, v)
                }
            })
            .buffered(opts.workers.max(1));
        while state.tasks.len() < opts.max_tasks {
            let Some((m, v)) = stream.next().await else {
                break;
            };
            tried += 1;
            let mut rec = MutantRecord {
                id: m.id(),
                operator: m.operator,
                file: m.file.clone(),
                outcome: String::new(),
                survived: false,
                detail: String::new(),
            };
            match v {
                Verdict::Dropped {
                    reason,
                    detail,
                    survived,
                } => {
                    rec.outcome = reason.to_string();
                    rec.detail = detail;
                    rec.survived = survived;
                }
                Verdict::Validated(row, key) => {
                    rec.survived = true;
                    if accepted.contains(&key) {
                        rec.outcome = "duplicate".into();
                    } else {
                        state.write_task(*row)?;
                        accepted.insert(key.clone());
                        if let Ok(mut a) = ctx.accepted.lock() {
                            a.insert(key);
                        }
                        rec.outcome = "accepted".into();
                    }
                }
            }
            state.record_mutant(&rec)?;
            pb.advance(
                1,
                &format!("{}/{} tasks", state.tasks.len(), opts.max_tasks),
            );
        }
    }
    pb.finish("");
    Ok(tried)
}

/// The run's summary from its progress, with the baseline's counts and the LLM stage's drops.
fn summary(
    state: &State,
    per_op: &BTreeMap<Operator, (usize, usize)>,
    project: &Project,
    base: &BaselineRecord,
) -> Summary {
    let mut s = summary_from(
        state,
        per_op,
        &format!("{} {}", project.name, project.version),
    );
    s.baseline_passing = base.passing.len();
    s.baseline_excluded = base.excluded.len();
    for r in state.llm.values() {
        if r.outcome != "ok" {
            *s.dropped.entry(r.outcome.clone()).or_default() += 1;
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_files_skip_tests_docs_and_scripts() {
        let d = tempfile::tempdir().unwrap();
        for f in [
            "setup.py",
            "pkg/__init__.py",
            "pkg/core.py",
            "pkg/_version.py",
            "pkg/tests/test_core.py",
            "tests/test_x.py",
            "tests/helpers.py",
            "docs/conf.py",
            "test_top.py",
            "src/other/mod.py",
        ] {
            let p = d.path().join(f);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, "x = 1\n").unwrap();
        }
        let tf = BTreeSet::new();
        assert_eq!(
            source_files(d.path(), &tf, &[]),
            ["pkg/__init__.py", "pkg/core.py", "src/other/mod.py"]
        );
        assert_eq!(
            source_files(d.path(), &tf, &["core".into()]),
            ["pkg/core.py"]
        );
    }

    #[test]
    fn module_tests_are_found_by_whole_word() {
        let tests: BTreeMap<String, String> = [
            ("tests/test_a.py", "from pkg.core import f\n"),
            ("tests/test_b.py", "from pkg import score\n"),
            ("tests/test_c.py", "import pkg\n"),
        ]
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
        assert_eq!(mentioning("pkg/core.py", &tests), ["tests/test_a.py"]);
        assert_eq!(mentioning("pkg/__init__.py", &tests).len(), 3);
    }

    #[test]
    fn default_env_spec_is_a_valid_spec() {
        let mut reg = EnvRegistry::default();
        reg.add_text("t", &default_env_spec("pypi/x", "x", "1.0"))
            .unwrap();
        assert!(reg.has_repo("pypi/x"));
    }
}
