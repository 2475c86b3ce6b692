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
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dojo_grade::parsers::{PASSED, StatusMap};
use dojo_grade::{
    ErrorKind, GradeOptions, Parser, derive_lists, grade_in_sandbox, status_map_of,
    validate_in_sandbox,
};
use dojo_sandbox::{Pristine, PythonEnv, Sandbox, SandboxOptions};
use dojo_task::{EnvRegistry, RepoEnv, Task, TaskError};
use futures::StreamExt;
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{Map, Value, json};

use crate::diff::{changed_lines, unified_diff};
use crate::llm::{self, LlmSource};
use crate::operators::{Mutation, Operator, mutations_seeded};
use crate::project::{Input, Project, normalize};
use crate::state::{
    BaselineRecord, Header, LlmRecord, MutantRecord, PROGRESS_SCHEMA_VERSION, State,
};
use crate::statement::problem_statement;
use crate::summary::Summary;
use crate::{SynthError, sample};

/// Version of the `synth` provenance object in each task line.
pub const PROVENANCE_SCHEMA_VERSION: u32 = 1;

/// How to run.
#[derive(Debug, Clone)]
pub struct SynthOptions {
    pub input: Input,
    /// The tasks' `repo`; default: an env spec's repo whose name is the project's, else
    /// `pypi/<name>` (`local/<name>` for a directory).
    pub repo: Option<String>,
    /// Environment specs overriding the embedded ones; a spec `dojo synth` writes goes here.
    pub envs_dir: Option<PathBuf>,
    /// The task file (JSONL); `<out>.progress.jsonl` beside it.
    pub out: PathBuf,
    /// Stop after this many tasks (in the file, resumed ones included).
    pub max_tasks: usize,
    /// Stop after trying this many mutants in this session.
    pub max_tries: Option<usize>,
    pub seed: u64,
    pub workers: usize,
    pub operators: Vec<Operator>,
    /// Only mutate source files whose path contains one of these (all when empty).
    pub files: Vec<String>,
    /// Only mutate functions whose qualified name (`Class.method`) contains one of these (all
    /// when empty): a single-function curriculum step.
    pub functions: Vec<String>,
    /// Drop mutants that break more than this many tests (tasks with a short list of failing
    /// tests are easier to localize).
    pub max_fail_to_pass: Option<usize>,
    /// Drop mutants that break more than this share of the baseline-passing tests.
    pub max_break_share: f64,
    /// Wall-clock limit of one mutant test run; default: 3 × the slowest baseline run + 10 s,
    /// at most the environment's `timeout_s`.
    pub mutant_timeout: Option<Duration>,
    /// Validate each finished task as `dojo validate` does before writing it.
    pub final_validate: bool,
    /// Name the mutated module in `hints_text` (an easier curriculum step).
    pub hint_module: bool,
    pub progress: bool,
    pub sandbox: SandboxOptions,
    /// A model that also rewrites functions with a subtle bug (`llm_rewrite`).
    pub llm: Option<LlmSource>,
}

impl SynthOptions {
    /// Defaults for everything but the input and output.
    pub fn new(input: Input, out: PathBuf) -> SynthOptions {
        SynthOptions {
            input,
            repo: None,
            envs_dir: None,
            out,
            max_tasks: 10,
            max_tries: None,
            seed: 0,
            workers: 1,
            operators: Operator::ALL.to_vec(),
            files: Vec::new(),
            functions: Vec::new(),
            max_fail_to_pass: None,
            max_break_share: 0.5,
            mutant_timeout: None,
            final_validate: true,
            hint_module: false,
            progress: true,
            sandbox: SandboxOptions::default(),
            llm: None,
        }
    }
}

/// A test run's parsed result.
struct Run {
    sm: StatusMap,
    log: String,
    duration_s: f64,
}

enum RunError {
    Timeout,
    Infra(String),
    /// The sandbox's writable space ran out (`ENOSPC`). The sandbox caps it
    /// ([`dojo_sandbox::Limits::workspace_bytes`]), so a mutant that makes the suite write
    /// without bound fills its own tmpfs, never the host's disk; its failing tests say nothing
    /// about the bug, so it never becomes a task.
    DiskFull(String),
}

/// Whether a test log or an error says the sandbox's disk is full (`ENOSPC` as Python, the
/// shell, git and the sandbox report it).
fn says_disk_full(text: &str) -> bool {
    text.contains("No space left on device") || text.contains("[Errno 28]")
}

/// Plain words stay bare (readable commands); anything else is quoted.
fn shell_quote(s: &str) -> String {
    if s.bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"/._-:".contains(&b))
    {
        s.to_string()
    } else {
        dojo_patch::shell_quote(s)
    }
}

/// The file a test id names ([`dojo_patch::id_file`]); the id itself for other styles.
fn test_file(id: &str) -> &str {
    dojo_patch::id_file(id).unwrap_or(id)
}

/// Run the tests (`files`, or the whole suite) with `patch` applied, through the grader.
async fn run_tests(
    sb: &Sandbox,
    task: &Task,
    env: &RepoEnv,
    files: &[String],
    patch: Option<&str>,
    timeout: Duration,
) -> Result<Run, RunError> {
    let mut env = env.clone();
    if !files.is_empty() {
        let args: Vec<String> = files.iter().map(|f| shell_quote(f)).collect();
        env.test_cmd = format!("{} {}", env.test_cmd, args.join(" "));
    }
    let opts = GradeOptions {
        timeout: Some(timeout),
        run_empty_patch: true,
        ..Default::default()
    };
    let r = grade_in_sandbox(sb, task, &env, patch, &opts).await;
    if r.outcome == dojo_grade::Verdict::Error {
        let error = r.error.as_deref().unwrap_or("");
        return Err(match r.error_kind {
            Some(ErrorKind::Timeout) => RunError::Timeout,
            _ if says_disk_full(error) || says_disk_full(&r.test_output) => {
                RunError::DiskFull(error.to_string())
            }
            k => RunError::Infra(format!("{}: {error}", k.map_or("error", |k| k.as_str()))),
        });
    }
    if says_disk_full(&r.test_output) {
        let line = r
            .test_output
            .lines()
            .find(|l| says_disk_full(l))
            .unwrap_or_default();
        return Err(RunError::DiskFull(line.trim().to_string()));
    }
    let parser = Parser::from(env.log_parser);
    Ok(Run {
        sm: status_map_of(&r, parser),
        duration_s: r.test_duration_s.unwrap_or(0.0),
        log: r.test_output,
    })
}

fn tail(log: &str, n: usize) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

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
            return dropped("final_validation", problems, true);
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
    async fn validate_task(&self, row: &Map<String, Value>) -> Result<(), String> {
        let loc = dojo_task::Location {
            file: "(synthesized)".into(),
            unit: "task",
            index: 1,
        };
        let task = Task::from_row(row.clone(), &loc).map_err(|e| e.to_string())?;
        let env = self.registry.resolve(&task).map_err(|e| e.to_string())?;
        let prepared = dojo_task::Preparer::default()
            .prepare(&task, &env)
            .await
            .map_err(|e| e.to_string())?;
        let mut sb = Sandbox::create(&prepared.pristine, Some(&prepared.env), &self.sandbox)
            .await
            .map_err(|e| format!("creating a sandbox: {e}"))?;
        let v = validate_in_sandbox(&mut sb, &task, &env, &GradeOptions::default()).await;
        if let Err(e) = sb.teardown().await {
            tracing::warn!("sandbox teardown: {e}");
        }
        if v.ok {
            Ok(())
        } else {
            Err(v.problems.join("; "))
        }
    }
}

/// The `repo` of the tasks.
fn default_repo(registry: &EnvRegistry, input: &Input) -> String {
    let name = normalize(input.name());
    if let Some(r) = registry
        .repos()
        .find(|r| r.rsplit('/').next().is_some_and(|n| normalize(n) == name))
    {
        return r.to_string();
    }
    match input {
        Input::Pypi { .. } => format!("pypi/{name}"),
        Input::Dir { .. } => format!("local/{name}"),
    }
}

/// The spec `dojo synth` writes for a project that has none: pytest, pinned as the bundled
/// benchmark pins it, the project installed editable.
pub fn default_env_spec(repo: &str, project: &str, version: &str) -> String {
    format!(
        r#"# Environment spec written by `dojo synth` for {project} {version}: no spec was found.
# Edit it (the packages the tests need, the test command) and pass its directory with --envs.
repo = "{repo}"

[default]
python = "3.11"
requirements = ["pytest==8.3.3", "pluggy==1.5.0", "iniconfig==2.0.0", "packaging==24.1"]
install = []
editable = true
test_cmd = "python -m pytest -rA -p no:cacheprovider"
log_parser = "pytest"
timeout_s = 300
"#
    )
}

fn env_override(env: &RepoEnv) -> Value {
    json!({
        "python": env.spec.python,
        "requirements": env.spec.requirements,
        "install": env.spec.install,
        "editable": env.spec.editable,
        "test_cmd": env.test_cmd,
        "log_parser": env.log_parser,
        "timeout_s": env.timeout_s,
        "test_directives": serde_json::to_value(env.directives).unwrap_or(Value::Null),
        "eval_type": env.eval_type,
        "env": env.env,
    })
}

fn clean_task(repo: &str, p: &Project) -> Result<Task, SynthError> {
    let row = json!({
        "instance_id": format!("{}.{}.baseline", repo.replace('/', "__"), p.version),
        "repo": repo,
        "patch": "-",
        "test_patch": "",
        "version": p.version,
        "source": {"kind": "sdist", "url": p.sdist.url, "sha256": p.sdist.sha256,
                   "filename": p.sdist.filename, "bug_patch": ""},
    });
    let loc = dojo_task::Location {
        file: "(dojo synth)".into(),
        unit: "task",
        index: 1,
    };
    Ok(Task::from_row(
        row.as_object().cloned().unwrap_or_default(),
        &loc,
    )?)
}

/// Directories whose Python files are never mutated.
const SKIP_DIRS: &[&str] = &[
    ".git",
    "tests",
    "test",
    "testing",
    "docs",
    "doc",
    "documentation",
    "examples",
    "example",
    "benchmarks",
    "bench",
    "scripts",
    "tools",
    "build",
    ".tox",
    ".nox",
    "__pycache__",
];

/// Library source files under `root` (relative paths, sorted).
fn source_files(root: &Path, test_files: &BTreeSet<String>, filters: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(root.join(&rel)) else {
            continue;
        };
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let p = rel.join(&name);
            let Ok(ft) = e.file_type() else { continue };
            if ft.is_dir() {
                if !SKIP_DIRS.contains(&name.as_str()) && !name.ends_with(".egg-info") {
                    stack.push(p);
                }
            } else if ft.is_file() && name.ends_with(".py") {
                let s = p.to_string_lossy().replace('\\', "/");
                let top_level_script = !s.contains('/')
                    && matches!(name.as_str(), "setup.py" | "noxfile.py" | "fabfile.py");
                let version_file =
                    matches!(name.as_str(), "_version.py" | "version.py" | "__main__.py");
                if dojo_patch::is_test_file(&s)
                    || top_level_script
                    || version_file
                    || test_files.contains(&s)
                {
                    continue;
                }
                if filters.is_empty() || filters.iter().any(|f| s.contains(f.as_str())) {
                    out.push(s);
                }
            }
        }
    }
    out.sort();
    out
}

/// The test files that mention `file`'s module by name (as a whole word).
fn mentioning(file: &str, tests: &BTreeMap<String, String>) -> Vec<String> {
    let p = Path::new(file);
    let stem = p.file_stem().and_then(|s| s.to_str()).unwrap_or("");
    let stem = if stem == "__init__" {
        p.parent()
            .and_then(|d| d.file_name())
            .and_then(|s| s.to_str())
            .unwrap_or("")
    } else {
        stem
    };
    if stem.is_empty() {
        return Vec::new();
    }
    let word = |text: &str| {
        text.match_indices(stem).any(|(i, _)| {
            let before = text[..i].chars().next_back();
            let after = text[i + stem.len()..].chars().next();
            let ident = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
            !ident(before) && !ident(after)
        })
    };
    tests
        .iter()
        .filter(|(_, text)| word(text))
        .map(|(f, _)| f.clone())
        .collect()
}

async fn baseline(
    ctx_clean: &Task,
    env: &RepoEnv,
    pristine: &Pristine,
    venv: &PythonEnv,
    sb_opts: &SandboxOptions,
    project: &str,
) -> Result<BaselineRecord, SynthError> {
    let timeout = Duration::from_secs(env.timeout_s);
    let mut runs = Vec::new();
    for i in 0..2 {
        let fail = |reason: String, log: &str| SynthError::Baseline {
            project: project.to_string(),
            reason,
            log_tail: tail(log, 40),
        };
        let sb = Sandbox::create(pristine, Some(venv), sb_opts)
            .await
            .map_err(|e| fail(format!("creating a sandbox: {e}"), ""))?;
        let r = run_tests(&sb, ctx_clean, env, &[], None, timeout).await;
        let _ = sb.teardown().await;
        let r = match r {
            Ok(r) => r,
            Err(RunError::Timeout) => {
                return Err(fail(
                    format!(
                        "run {} of the test suite timed out after {timeout:?}",
                        i + 1
                    ),
                    "",
                ));
            }
            Err(RunError::Infra(e)) => return Err(fail(format!("run {}: {e}", i + 1), "")),
            Err(RunError::DiskFull(e)) => {
                return Err(fail(
                    format!(
                        "run {} of the test suite filled the sandbox's disk ({e}); raise the sandbox's workspace limit",
                        i + 1
                    ),
                    "",
                ));
            }
        };
        if r.sm.is_empty() {
            return Err(fail(
                "the test suite reported no test results (no tests, a collection error, or tests that need the network?)".into(),
                &r.log,
            ));
        }
        runs.push(r);
    }
    let (_, stable) = derive_lists(&runs[0].sm, &runs[1].sm);
    if stable.is_empty() {
        return Err(SynthError::Baseline {
            project: project.to_string(),
            reason: "no test passes at baseline".into(),
            log_tail: tail(&runs[0].log, 40),
        });
    }
    let stable_set: BTreeSet<&str> = stable.iter().map(String::as_str).collect();
    let mut excluded: BTreeSet<String> = BTreeSet::new();
    for r in &runs {
        for (k, _) in r.sm.iter() {
            if !stable_set.contains(k) {
                excluded.insert(k.to_string());
            }
        }
    }
    Ok(BaselineRecord {
        passing: stable,
        excluded: excluded.into_iter().collect(),
        duration_s: runs.iter().map(|r| r.duration_s).fold(0.0, f64::max),
    })
}

fn summary_from(state: &State, fm: &BTreeMap<Operator, (usize, usize)>, project: &str) -> Summary {
    let mut s = Summary {
        project: project.to_string(),
        tasks: state.tasks.len(),
        ..Default::default()
    };
    for (op, (cands, parsed)) in fm {
        let c = s.per_operator.entry(*op).or_default();
        c.candidates = *cands;
        c.parsed = *parsed;
    }
    let mut task_ids: BTreeSet<String> = BTreeSet::new();
    for t in &state.tasks {
        let syn = t.get("synth");
        let id = syn
            .and_then(|s| s.get("mutation_id"))
            .and_then(Value::as_str);
        let op = syn
            .and_then(|s| s.get("operator"))
            .and_then(Value::as_str)
            .and_then(Operator::by_name);
        if let (Some(id), Some(op)) = (id, op) {
            task_ids.insert(id.to_string());
            let c = s.per_operator.entry(op).or_default();
            c.tried += 1;
            c.survived += 1;
            c.validated += 1;
        }
    }
    for m in state.mutants.values() {
        if task_ids.contains(&m.id) {
            continue;
        }
        let c = s.per_operator.entry(m.operator).or_default();
        c.tried += 1;
        if m.survived {
            c.survived += 1;
        }
        if m.outcome != "accepted" {
            *s.dropped.entry(m.outcome.clone()).or_default() += 1;
        }
    }
    s
}

/// Run (or resume) a synthesis: the tasks go to `opts.out`; returns the summary.
pub async fn synthesize(opts: &SynthOptions) -> Result<Summary, SynthError> {
    let started = Instant::now();
    let input = opts.input.clone();
    let project = tokio::task::spawn_blocking(move || crate::project::resolve(&input))
        .await
        .map_err(|e| SynthError::Input(e.to_string()))??;
    let label = format!("{}=={}", project.name, project.version);
    // `--envs DIR` may not exist yet: it is also where a written spec goes.
    let mut registry = EnvRegistry::with_dir(opts.envs_dir.as_deref().filter(|d| d.exists()))?;
    let repo = opts
        .repo
        .clone()
        .unwrap_or_else(|| default_repo(&registry, &opts.input));
    let clean = clean_task(&repo, &project)?;
    let env = match registry.resolve(&clean) {
        Ok(e) => e,
        Err(TaskError::NoEnv { .. }) => {
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
                let text = default_env_spec(&repo, &project.name, &project.version);
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
            registry.resolve(&clean)?
        }
        Err(e) => return Err(e.into()),
    };
    let mut ops = opts.operators.clone();
    ops.sort();
    ops.dedup();
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
    let header = Header {
        schema_version: PROGRESS_SCHEMA_VERSION,
        kind: "run".into(),
        project: project.name.clone(),
        version: project.version.clone(),
        repo: repo.clone(),
        sdist_sha256: project.sdist.sha256.clone(),
        seed: opts.seed,
        config,
    };
    let mut state = State::open(&opts.out, &header)?;

    // The clean tree and venv, built once (cached in $DOJO_HOME).
    let prepared = dojo_task::Preparer::default()
        .prepare(&clean, &env)
        .await
        .map_err(|e| SynthError::Environment {
            project: label.clone(),
            reason: e.to_string(),
        })?;

    let base = match state.baseline.clone() {
        Some(b) => b,
        None => {
            let b = baseline(
                &clean,
                &env,
                &prepared.pristine,
                &prepared.env,
                &opts.sandbox,
                &label,
            )
            .await?;
            state.record_baseline(&b)?;
            b
        }
    };
    let mut stable = StatusMap::new();
    for t in &base.passing {
        stable.insert(t.as_str(), PASSED);
    }
    let test_files: BTreeSet<String> = base
        .passing
        .iter()
        .chain(&base.excluded)
        .map(|t| test_file(t).to_string())
        .filter(|f| f.ends_with(".py"))
        .collect();
    let tree = prepared.pristine.path.clone();
    let tests_text: BTreeMap<String, String> = test_files
        .iter()
        .filter_map(|f| Some((f.clone(), std::fs::read_to_string(tree.join(f)).ok()?)))
        .collect();

    // Mutations of every library file.
    let files = source_files(&tree, &test_files, &opts.files);
    let mut sources = BTreeMap::new();
    let mut all = Vec::new();
    let mut per_op: BTreeMap<Operator, (usize, usize)> = BTreeMap::new();
    let mut unparseable = Vec::new();
    let mut module_tests = BTreeMap::new();
    let mut parsed_files = Vec::new();
    for f in &files {
        let Ok(text) = std::fs::read_to_string(tree.join(f)) else {
            unparseable.push(format!("{f}: not UTF-8"));
            continue;
        };
        match mutations_seeded(f, &text, &ops, opts.seed) {
            Ok(fm) => {
                for (op, n) in &fm.candidates_by_op {
                    per_op.entry(*op).or_default().0 += n;
                }
                for m in &fm.mutations {
                    per_op.entry(m.operator).or_default().1 += 1;
                }
                all.extend(fm.mutations);
                parsed_files.push(f.clone());
            }
            Err(e) => unparseable.push(e.to_string()),
        }
        module_tests.insert(f.clone(), mentioning(f, &tests_text));
        sources.insert(f.clone(), text);
    }
    let wanted = |function: &str| {
        opts.functions.is_empty() || opts.functions.iter().any(|f| function.contains(f.as_str()))
    };
    if !opts.functions.is_empty() {
        all.retain(|m| wanted(&m.function));
        // Candidates and parsed counts follow the filter too.
        per_op.clear();
        for m in &all {
            let e = per_op.entry(m.operator).or_default();
            e.0 += 1;
            e.1 += 1;
        }
    }
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
        stable,
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
    let pb = if opts.progress && state.tasks.len() < opts.max_tasks {
        let pb = ProgressBar::new(todo.len() as u64);
        if let Ok(style) = ProgressStyle::with_template(
            "synth [{elapsed_precise}] {bar:30} {pos}/{len} mutants {msg}",
        ) {
            pb.set_style(style);
        }
        pb
    } else {
        ProgressBar::hidden()
    };
    pb.set_message(format!("{}/{} tasks", state.tasks.len(), opts.max_tasks));
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
            pb.inc(1);
            pb.set_message(format!("{}/{} tasks", state.tasks.len(), opts.max_tasks));
        }
    }
    pb.finish_and_clear();
    let mut s = summary_from(
        &state,
        &per_op,
        &format!("{} {}", project.name, project.version),
    );
    s.source_files = files.len();
    s.unparseable_files = unparseable;
    s.baseline_passing = base.passing.len();
    s.baseline_excluded = base.excluded.len();
    s.tried_this_session = tried;
    s.elapsed_s = started.elapsed().as_secs_f64();
    for r in state.llm.values() {
        if r.outcome != "ok" {
            *s.dropped.entry(r.outcome.clone()).or_default() += 1;
        }
    }
    Ok(s)
}

/// The model's rewrites of the functions the seed picks (asking only about those the progress
/// record does not hold yet), appended to `all`; returns (functions asked, mutants kept).
async fn llm_mutants(
    l: &LlmSource,
    state: &mut State,
    sources: &BTreeMap<String, String>,
    parsed_files: &[String],
    opts: &SynthOptions,
    all: &mut Vec<Mutation>,
) -> Result<(usize, usize), SynthError> {
    let sites: Vec<llm::FunctionSite> = parsed_files
        .iter()
        .filter_map(|f| Some(llm::functions_in(f, sources.get(f)?)))
        .flatten()
        .filter(|s| {
            opts.functions.is_empty()
                || opts
                    .functions
                    .iter()
                    .any(|f| s.function.contains(f.as_str()))
        })
        .collect();
    let chosen = llm::choose(sites, opts.seed, l.rewrites);
    let todo: Vec<llm::FunctionSite> = chosen
        .iter()
        .filter(|s| !state.llm.contains_key(&s.key()))
        .cloned()
        .collect();
    if opts.progress && !todo.is_empty() {
        eprintln!(
            "asking {} to rewrite {} function(s) with a bug",
            l.label,
            todo.len()
        );
    }
    let mut stream = futures::stream::iter(todo)
        .map(|site| async move {
            let r = match sources.get(&site.file) {
                Some(src) => llm::rewrite(l, src, &site).await,
                None => Err(llm::Reject::ModelError),
            };
            (site, r)
        })
        .buffered(opts.workers.max(1));
    while let Some((site, r)) = stream.next().await {
        let rec = match r {
            Ok(m) => LlmRecord {
                site: site.key(),
                outcome: "ok".into(),
                mutation: Some(m),
            },
            Err(why) => LlmRecord {
                site: site.key(),
                outcome: why.reason().into(),
                mutation: None,
            },
        };
        state.record_llm(&rec)?;
    }
    let mut ok = 0;
    for site in &chosen {
        if let Some(m) = state.llm.get(&site.key()).and_then(|r| r.mutation.clone()) {
            ok += 1;
            all.push(m);
        }
    }
    Ok((chosen.len(), ok))
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
        assert_eq!(shell_quote("tests/test_a.py"), "tests/test_a.py");
        assert_eq!(shell_quote("a b"), "'a b'");
    }
}
