//! The clean project before any mutant: the repository name and environment spec of its tasks,
//! the clean task itself, the source files worth mutating and the tests that mention them, and
//! the baseline run of its suite.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use dojo_grade::derive_lists;
use dojo_sandbox::{Pristine, PythonEnv, Sandbox, SandboxOptions};
use dojo_task::{EnvRegistry, RepoEnv, Task};
use serde_json::{Value, json};

use crate::SynthError;
use crate::project::{Input, Project, normalize};
use crate::runner::{RunError, run_tests, tail};
use crate::state::BaselineRecord;

/// The `repo` of the tasks.
pub(crate) fn default_repo(registry: &EnvRegistry, input: &Input) -> String {
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

pub(crate) fn env_override(env: &RepoEnv) -> Value {
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

pub(crate) fn clean_task(repo: &str, p: &Project) -> Result<Task, SynthError> {
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
pub(crate) const SKIP_DIRS: &[&str] = &[
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
pub(crate) fn source_files(
    root: &Path,
    test_files: &BTreeSet<String>,
    filters: &[String],
) -> Vec<String> {
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
pub(crate) fn mentioning(file: &str, tests: &BTreeMap<String, String>) -> Vec<String> {
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

pub(crate) async fn baseline(
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
            .map_err(|source| SynthError::BaselineSandbox {
                project: project.to_string(),
                source,
            })?;
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
