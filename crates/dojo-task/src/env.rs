//! Environment specs: how a repository at a version gets its sandbox environment and how its
//! tests are run. Data files in `envs/` (schema: `envs/README.md`), embedded at build time,
//! overridable by a directory and per task.

use std::collections::BTreeMap;
use std::path::Path;

use dojo_sandbox::PythonEnvSpec;
use dojo_sandbox::pyenv::Installer;

use crate::TaskError;
use crate::harness::{EvalType, LogParser};
use crate::model::{EnvOverride, Task};

/// The files under the repository's `envs/` at build time: (relative path, contents).
mod embedded {
    include!(concat!(env!("OUT_DIR"), "/embedded_envs.rs"));
}

/// SWE-bench's `NON_TEST_EXTS`: test-patch files with these endings are not test directives.
/// (`csv` has no dot upstream; kept as is.)
pub const NON_TEST_EXTS: &[&str] = &[
    ".json", ".png", "csv", ".txt", ".md", ".jpg", ".jpeg", ".pkl", ".yml", ".yaml", ".toml",
];

/// What gets appended to the test command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Directives {
    /// The files of the test patch (pytest and most runners).
    Files,
    /// Django's runtests labels: `tests/a/b.py` → `a.b`.
    Django,
    /// Nothing (the command already names its tests, e.g. taken from an `eval_script`).
    None,
}

impl Directives {
    fn parse(s: &str) -> Option<Directives> {
        match s {
            "files" => Some(Directives::Files),
            "django" => Some(Directives::Django),
            "none" => Some(Directives::None),
            _ => None,
        }
    }
}

/// One table of an env file (`[default]` or `[versions."X"]`): every key optional.
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Table {
    python: Option<String>,
    requirements: Option<Vec<String>>,
    /// A requirements file of the repository (see [`crate::requirements`]).
    requirements_file: Option<String>,
    install: Option<Vec<String>>,
    editable: Option<bool>,
    /// Schema 3: shell commands run first in the build, at the workspace root.
    pre_install: Option<Vec<String>>,
    /// Schema 3: `"uv"` (default) or `"pip"`.
    installer: Option<Installer>,
    /// Schema 3: the tests reach the network (off by default).
    network: Option<bool>,
    /// Schema 3: how many CPUs the tests see.
    cpus: Option<u32>,
    /// Schema 3: an eval script's reinstall may reach the package index while grading.
    reinstall_network: Option<bool>,
    /// Schema 4: resolve every install of the build as of this day (`YYYY-MM-DD`).
    exclude_newer: Option<String>,
    /// Schema 5: programs the tests need from the host, each with the Debian package that has
    /// it (`dot = "graphviz"`): what the harness's image installs with `apt-get`.
    host_programs: Option<BTreeMap<String, String>>,
    test_cmd: Option<String>,
    log_parser: Option<LogParser>,
    timeout_s: Option<u64>,
    test_directives: Option<String>,
    eval_type: Option<EvalType>,
    env: Option<BTreeMap<String, String>>,
}

impl From<&EnvOverride> for Table {
    fn from(o: &EnvOverride) -> Table {
        Table {
            python: o.python.clone(),
            requirements: o.requirements.clone(),
            requirements_file: None,
            install: o.install.clone(),
            editable: o.editable,
            pre_install: None,
            installer: None,
            network: None,
            cpus: None,
            reinstall_network: None,
            exclude_newer: None,
            host_programs: None,
            test_cmd: o.test_cmd.clone(),
            log_parser: o.log_parser,
            timeout_s: o.timeout_s,
            test_directives: o.test_directives.clone(),
            eval_type: o.eval_type,
            env: o.env.clone(),
        }
    }
}

#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct EnvFile {
    /// Absent in version-1 files (which still load); see [`ENV_SCHEMA_VERSION`].
    schema_version: Option<u32>,
    repo: String,
    #[serde(default)]
    default: Table,
    #[serde(default)]
    versions: BTreeMap<String, Table>,
}

/// The env file format this build writes and reads: 2 added `requirements_file`, 3 added
/// `pre_install`, `installer`, `network`, `cpus` and `reinstall_network`, 4 `exclude_newer`, 5
/// `host_programs`. A
/// file without `schema_version` is version 1 (every key of an older version means the same in
/// the newer ones).
pub const ENV_SCHEMA_VERSION: u32 = 5;

impl Table {
    /// The oldest schema version that has every key this table uses.
    fn needs_version(&self) -> (u32, &'static str) {
        if self.host_programs.is_some() {
            return (5, "host_programs");
        }
        if self.exclude_newer.is_some() {
            return (4, "exclude_newer");
        }
        let v3 = [
            (self.pre_install.is_some(), "pre_install"),
            (self.installer.is_some(), "installer"),
            (self.network.is_some(), "network"),
            (self.cpus.is_some(), "cpus"),
            (self.reinstall_network.is_some(), "reinstall_network"),
        ];
        if let Some((_, k)) = v3.iter().find(|(used, _)| *used) {
            return (3, k);
        }
        if self.requirements_file.is_some() {
            return (2, "requirements_file");
        }
        (1, "")
    }
}

/// A resolved environment for one task: the sandbox environment plus how to run and read its tests.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RepoEnv {
    pub repo: String,
    pub version: String,
    /// What `dojo_sandbox` builds the shared venv from (before the requirements file is read:
    /// [`crate::prepare`] adds its lines).
    pub spec: PythonEnvSpec,
    /// A requirements file of the repository, read at preparation (at the task's
    /// `environment_setup_commit`), its lines installed before `spec.requirements`, which
    /// override them by name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requirements_file: Option<String>,
    /// The command without test directives (or the eval_script's full command).
    pub test_cmd: String,
    /// How the test log is parsed.
    pub log_parser: LogParser,
    pub timeout_s: u64,
    pub directives: Directives,
    pub eval_type: EvalType,
    pub env: BTreeMap<String, String>,
    /// Shell lines to run after the model patch and before the test patch: the task's
    /// `eval_script` commands before its test command ([`crate::pre_test_commands`]); empty
    /// without an eval script.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pre_test: Vec<String>,
    /// The eval script's reinstall may reach the package index: grading sandboxes get the
    /// network (the whole grading run, tests included), as a dependency added by the patch
    /// can only be installed from there.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub reinstall_network: bool,
    /// Programs the tests need on the host (program → Debian package). Preparation fails, as
    /// the environment's failure, when one is missing: without it the tests that use it skip
    /// or fail, and a correct patch would be graded unresolved as if it were the agent's.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub host_programs: BTreeMap<String, String>,
    /// Where the spec came from (file, and whether a task override or eval_script applied).
    pub origin: String,
}

impl RepoEnv {
    /// The full test command for `task`: `test_cmd` plus the test-patch directives.
    pub fn test_command(&self, task: &Task) -> String {
        let dirs = test_directives(&task.test_patch, self.directives);
        if dirs.is_empty() {
            self.test_cmd.clone()
        } else {
            format!("{} {}", self.test_cmd, dirs.join(" "))
        }
    }
}

/// SWE-bench's `get_test_directives`.
pub fn test_directives(test_patch: &str, kind: Directives) -> Vec<String> {
    if kind == Directives::None {
        return Vec::new();
    }
    let files = dojo_patch::harness_targets(test_patch)
        .into_iter()
        .filter(|d| !NON_TEST_EXTS.iter().any(|ext| d.ends_with(ext)));
    match kind {
        Directives::Django => files
            .map(|d| {
                let d = d.strip_suffix(".py").unwrap_or(&d);
                let d = d.strip_prefix("tests/").unwrap_or(d);
                d.replace('/', ".")
            })
            .collect(),
        _ => files.collect(),
    }
}

/// The test command of an eval_script: the lines between the start and end markers.
pub fn eval_script_test_cmd(script: &str) -> Option<String> {
    let start = ": '>>>>> Start Test Output'";
    let end = ": '>>>>> End Test Output'";
    let (_, rest) = script.split_once(start)?;
    let (body, _) = rest.split_once(end)?;
    let cmd = body.trim();
    (!cmd.is_empty()).then(|| cmd.to_string())
}

/// All known env files, keyed by repo; later sources override earlier ones.
#[derive(Debug, Clone, Default)]
pub struct EnvRegistry {
    files: BTreeMap<String, (String, EnvFile)>,
}

impl EnvRegistry {
    /// The specs embedded in the binary (the repository's `envs/**/*.toml`).
    pub fn embedded() -> Result<EnvRegistry, TaskError> {
        let mut reg = EnvRegistry::default();
        for (name, text) in embedded::EMBEDDED {
            reg.add_text(&format!("(embedded) envs/{name}"), text)?;
        }
        Ok(reg)
    }

    /// Embedded specs, overridden by every `*.toml` under `dir` (recursively) when given.
    pub fn with_dir(dir: Option<&Path>) -> Result<EnvRegistry, TaskError> {
        let mut reg = EnvRegistry::embedded()?;
        if let Some(d) = dir {
            reg.add_dir(d)?;
        }
        Ok(reg)
    }

    pub fn add_dir(&mut self, dir: &Path) -> Result<(), TaskError> {
        let io = |e: std::io::Error| TaskError::Io {
            path: dir.display().to_string(),
            source: e,
        };
        let mut stack = vec![dir.to_path_buf()];
        let mut files = Vec::new();
        while let Some(d) = stack.pop() {
            for entry in std::fs::read_dir(&d).map_err(io)? {
                let p = entry.map_err(io)?.path();
                if p.is_dir() {
                    stack.push(p);
                } else if p.extension().is_some_and(|e| e == "toml") {
                    files.push(p);
                }
            }
        }
        files.sort();
        for p in files {
            let text = std::fs::read_to_string(&p).map_err(|e| TaskError::Io {
                path: p.display().to_string(),
                source: e,
            })?;
            self.add_text(&p.display().to_string(), &text)?;
        }
        Ok(())
    }

    /// Add one file's text; `origin` names it in errors.
    pub fn add_text(&mut self, origin: &str, text: &str) -> Result<(), TaskError> {
        let f: EnvFile = toml::from_str(text).map_err(|source| TaskError::EnvToml {
            origin: origin.to_string(),
            source,
        })?;
        let check = |t: &Table, where_: &str| -> Result<(), TaskError> {
            check_table(t).map_err(|problem| TaskError::EnvTable {
                origin: origin.to_string(),
                table: where_.to_string(),
                source: Box::new(problem),
            })
        };
        match f.schema_version {
            None | Some(1..=ENV_SCHEMA_VERSION) => {}
            Some(v) => {
                return Err(TaskError::Env {
                    origin: origin.to_string(),
                    reason: format!(
                        "schema_version {v}: this build reads versions 1 to {ENV_SCHEMA_VERSION} (upgrade dojo)"
                    ),
                });
            }
        }
        let declared = f.schema_version.unwrap_or(1);
        if let Some((v, key)) = std::iter::once(&f.default)
            .chain(f.versions.values())
            .map(Table::needs_version)
            .max_by_key(|(v, _)| *v)
            .filter(|(v, _)| *v > declared)
        {
            return Err(TaskError::Env {
                origin: origin.to_string(),
                reason: format!("{key} needs schema_version = {v} (the file declares {declared})"),
            });
        }
        check(&f.default, "[default]")?;
        for (v, t) in &f.versions {
            check(t, &format!("[versions.\"{v}\"]"))?;
        }
        self.files.insert(f.repo.clone(), (origin.to_string(), f));
        Ok(())
    }

    pub fn repos(&self) -> impl Iterator<Item = &str> {
        self.files.keys().map(String::as_str)
    }

    pub fn has_repo(&self, repo: &str) -> bool {
        self.files.contains_key(repo)
    }

    /// The environment of `task`: defaults ← `[default]` ← `[versions."v"]` ← task `env` ←
    /// `eval_script` test command and task `log_parser`.
    pub fn resolve(&self, task: &Task) -> Result<RepoEnv, TaskError> {
        let (layers, origin) = self.layers(task)?;
        let mut env = merged(task, &layers, origin);
        if let Some(script) = &task.eval_script {
            let cmd = eval_script_test_cmd(script).ok_or_else(|| TaskError::Invalid {
                location: "(task)".into(),
                instance_id: task.instance_id.clone(),
                field: "eval_script".into(),
                reason: "has no test command between ': '>>>>> Start Test Output'' and ': '>>>>> End Test Output''".into(),
            })?;
            env.test_cmd = cmd;
            env.directives = Directives::None;
            env.pre_test =
                crate::pre_test_commands(script, &task.base_commit, env.reinstall_network);
            // What the harness installs before the tests is installed before the tests: in
            // this task's environment build (its own environment), not from the network at
            // grading.
            for args in crate::eval_script::package_installs(script) {
                env.spec.install.push(format!("dojo_pip_install {args}"));
            }
            env.origin.push_str(" + eval_script");
        }
        if let Some(p) = task.log_parser {
            env.log_parser = p;
        }
        if let Some(t) = task.eval_type {
            env.eval_type = t;
        }
        Ok(env)
    }

    /// The tables that apply to `task`, lowest first (`[default]`, `[versions."v"]`, the task's
    /// own `env`), and where they come from, for [`RepoEnv::origin`].
    fn layers(&self, task: &Task) -> Result<(Vec<Table>, String), TaskError> {
        let mut layers: Vec<Table> = Vec::new();
        let mut origin = String::new();
        match self.files.get(&task.repo) {
            Some((o, f)) => {
                origin.push_str(o);
                layers.push(f.default.clone());
                if let Some(v) = f.versions.get(&task.version) {
                    layers.push(v.clone());
                    origin.push_str(&format!(" [versions.\"{}\"]", task.version));
                }
            }
            None if task.env.is_some() => origin.push_str("(task env only)"),
            None => {
                return Err(TaskError::NoEnv {
                    instance_id: task.instance_id.clone(),
                    repo: task.repo.clone(),
                });
            }
        }
        if let Some(o) = &task.env {
            let t = Table::from(o);
            check_table(&t).map_err(|problem| TaskError::InvalidField {
                location: "(task)".into(),
                instance_id: task.instance_id.clone(),
                field: "env".into(),
                source: Box::new(problem),
            })?;
            layers.push(t);
            origin.push_str(" + task env");
        }
        Ok((layers, origin))
    }
}

/// The environment `layers` (lowest first) give: each setting from the highest layer that has
/// it, else its default.
fn merged(task: &Task, layers: &[Table], origin: String) -> RepoEnv {
    let pick = |f: fn(&Table) -> Option<String>| layers.iter().rev().find_map(f);
    RepoEnv {
        repo: task.repo.clone(),
        version: task.version.clone(),
        spec: PythonEnvSpec {
            python: pick(|t| t.python.clone()).unwrap_or_else(|| "3.11".into()),
            requirements: layers
                .iter()
                .rev()
                .find_map(|t| t.requirements.clone())
                .unwrap_or_default(),
            install: layers
                .iter()
                .rev()
                .find_map(|t| t.install.clone())
                .unwrap_or_default(),
            editable: layers.iter().rev().find_map(|t| t.editable).unwrap_or(true),
            pre_install: layers
                .iter()
                .rev()
                .find_map(|t| t.pre_install.clone())
                .unwrap_or_default(),
            installer: layers
                .iter()
                .rev()
                .find_map(|t| t.installer)
                .unwrap_or_default(),
            network: layers.iter().rev().find_map(|t| t.network).unwrap_or(false),
            cpus: layers.iter().rev().find_map(|t| t.cpus),
            exclude_newer: pick(|t| t.exclude_newer.clone()),
        },
        requirements_file: pick(|t| t.requirements_file.clone()),
        test_cmd: pick(|t| t.test_cmd.clone()).unwrap_or_else(|| "pytest -rA".into()),
        log_parser: layers
            .iter()
            .rev()
            .find_map(|t| t.log_parser)
            .unwrap_or(LogParser::Pytest),
        timeout_s: layers
            .iter()
            .rev()
            .find_map(|t| t.timeout_s)
            .unwrap_or(1800),
        directives: pick(|t| t.test_directives.clone())
            .and_then(|d| Directives::parse(&d))
            .unwrap_or(Directives::Files),
        eval_type: layers
            .iter()
            .rev()
            .find_map(|t| t.eval_type)
            .unwrap_or_default(),
        env: layers
            .iter()
            .rev()
            .find_map(|t| t.env.clone())
            .unwrap_or_default(),
        pre_test: Vec::new(),
        reinstall_network: layers
            .iter()
            .rev()
            .find_map(|t| t.reinstall_network)
            .unwrap_or(false),
        host_programs: layers
            .iter()
            .rev()
            .find_map(|t| t.host_programs.clone())
            .unwrap_or_default(),
        origin,
    }
}

/// What is wrong with one table of an environment spec (the caller names the table).
#[derive(Debug, thiserror::Error)]
enum TableProblem {
    #[error("test_directives = {0:?} (expected \"files\", \"django\" or \"none\")")]
    TestDirectives(String),
    #[error("python = {0:?} is not a version like \"3.11\"")]
    Python(String),
    #[error("timeout_s must be positive")]
    ZeroTimeout,
    #[error("cpus must be positive")]
    ZeroCpus,
    #[error("exclude_newer = {0:?} is not a day like \"2024-01-31\"")]
    ExcludeNewer(String),
}

fn check_table(t: &Table) -> Result<(), TableProblem> {
    if let Some(d) = &t.test_directives
        && Directives::parse(d).is_none()
    {
        return Err(TableProblem::TestDirectives(d.clone()));
    }
    if let Some(p) = &t.python
        && !p
            .split('.')
            .all(|x| !x.is_empty() && x.bytes().all(|b| b.is_ascii_digit()))
    {
        return Err(TableProblem::Python(p.clone()));
    }
    if t.timeout_s == Some(0) {
        return Err(TableProblem::ZeroTimeout);
    }
    if t.cpus == Some(0) {
        return Err(TableProblem::ZeroCpus);
    }
    if let Some(d) = &t.exclude_newer
        && !is_day(d)
    {
        return Err(TableProblem::ExcludeNewer(d.clone()));
    }
    Ok(())
}

/// A calendar day written `YYYY-MM-DD` in full (what uv's `--exclude-newer` and pip's
/// `--uploaded-prior-to` both read as midnight UTC of that day when given a `T00:00:00Z`).
fn is_day(d: &str) -> bool {
    d.len() == 10 && chrono::NaiveDate::parse_from_str(d, "%Y-%m-%d").is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Location;
    use serde_json::json;

    fn task(v: serde_json::Value) -> Task {
        let loc = Location {
            file: "x".into(),
            unit: "line",
            index: 1,
        };
        Task::from_row(v.as_object().cloned().unwrap(), &loc).unwrap()
    }

    #[test]
    fn embedded_covers_swebench_dev_repos() {
        let reg = EnvRegistry::embedded().unwrap();
        for r in [
            "marshmallow-code/marshmallow",
            "sqlfluff/sqlfluff",
            "pylint-dev/astroid",
            "pydicom/pydicom",
            "pvlib/pvlib-python",
            "pyvista/pyvista",
        ] {
            assert!(reg.has_repo(r), "{r} missing from embedded envs");
        }
        let t = task(
            json!({"instance_id":"pydicom__pydicom-1","repo":"pydicom/pydicom","base_commit":"c",
            "patch":"p","version":"2.3",
            "test_patch":"diff --git a/pydicom/tests/test_x.py b/pydicom/tests/test_x.py\n--- a/x\ndiff --git a/data/a.json b/data/a.json\n"}),
        );
        let env = reg.resolve(&t).unwrap();
        assert_eq!(env.spec.python, "3.10");
        assert_eq!(env.log_parser, LogParser::Pydicom);
        assert_eq!(env.test_command(&t), "pytest -rA pydicom/tests/test_x.py");
    }

    /// The Verified/Lite specs (generated by scripts/gen-envs-from-harness.py) load, and a few
    /// versions resolve to what the harness states.
    #[test]
    fn embedded_covers_swebench_verified_and_lite_repos() {
        let reg = EnvRegistry::embedded().unwrap();
        for r in [
            "astropy/astropy",
            "django/django",
            "matplotlib/matplotlib",
            "mwaskom/seaborn",
            "pallets/flask",
            "psf/requests",
            "pydata/xarray",
            "pylint-dev/pylint",
            "pytest-dev/pytest",
            "scikit-learn/scikit-learn",
            "sphinx-doc/sphinx",
            "sympy/sympy",
        ] {
            assert!(reg.has_repo(r), "{r} missing from embedded envs");
        }
        let resolve = |repo: &str, version: &str| {
            let t = task(json!({"instance_id":"x__y-1","repo":repo,"base_commit":"c",
                "patch":"p","version":version,"test_patch":""}));
            reg.resolve(&t).unwrap()
        };
        let e = resolve("pylint-dev/pylint", "2.15");
        assert_eq!(e.spec.python, "3.9");
        assert_eq!(e.spec.installer, Installer::Pip);
        assert_eq!(e.spec.cpus, Some(2));
        assert_eq!(
            e.requirements_file.as_deref(),
            Some("requirements_test.txt")
        );
        let e = resolve("psf/requests", "2.27");
        assert!(e.spec.network && !e.spec.editable);
        assert_eq!(e.spec.install, ["python -m pip install ."]);
        let e = resolve("django/django", "1.9");
        assert_eq!(e.test_cmd, "./tests/runtests.py --verbosity 2");
        assert_eq!(e.directives, Directives::Django);
        assert_eq!(e.env.get("LC_ALL").map(String::as_str), Some("en_US.UTF-8"));
        // Python 3.6's newest setuptools has no build_editable: the harness's pip, not uv.
        let e = resolve("django/django", "3.0");
        assert_eq!(
            (e.spec.python.as_str(), e.spec.installer),
            ("3.6", Installer::Pip)
        );
        let e = resolve("pallets/flask", "2.2");
        assert_eq!(e.spec.python, "3.11");
        assert_eq!(e.spec.installer, Installer::Uv);
        assert!(e.spec.editable);
        assert_eq!(e.log_parser, LogParser::Flask);
        let e = resolve("pytest-dev/pytest", "6.3");
        assert_eq!(e.spec.pre_install, ["sed -i 's/>=>=/>=/' setup.cfg"]);
        let e = resolve("sympy/sympy", "1.13");
        assert_eq!(e.requirements_file.as_deref(), Some("requirements-dev.txt"));
        assert_eq!(e.spec.requirements, ["mpmath==1.3.0"]);
    }

    #[test]
    fn layering_eval_script_and_task_override() {
        let mut reg = EnvRegistry::default();
        reg.add_text(
            "t.toml",
            r#"repo = "a/b"
[default]
python = "3.11"
requirements = ["pytest==8.3.3"]
test_cmd = "python -m pytest -rA"
[versions."2.0"]
python = "3.12"
"#,
        )
        .unwrap();
        let t = task(
            json!({"instance_id":"a","repo":"a/b","base_commit":"c","patch":"p","version":"2.0",
            "env":{"timeout_s":5},
            "eval_script":"x\n: '>>>>> Start Test Output'\npytest -rA t/test_a.py\n: '>>>>> End Test Output'\n"}),
        );
        let env = reg.resolve(&t).unwrap();
        assert_eq!(env.spec.python, "3.12");
        assert_eq!(env.spec.requirements, ["pytest==8.3.3"]);
        assert_eq!(env.timeout_s, 5);
        assert_eq!(env.test_command(&t), "pytest -rA t/test_a.py");
        assert!(env.spec.install.is_empty());
        // An eval script's requirement install becomes the task environment's last install
        // command (so its identity differs from the version's).
        let t2 = task(
            json!({"instance_id":"a","repo":"a/b","base_commit":"c","patch":"p","version":"2.0",
            "eval_script":"python -m pip install -q 'pytest<7.2'\n: '>>>>> Start Test Output'\npytest -rA t/test_a.py\n: '>>>>> End Test Output'\n"}),
        );
        let env2 = reg.resolve(&t2).unwrap();
        assert_eq!(env2.spec.install, ["dojo_pip_install -q 'pytest<7.2'"]);
        assert_ne!(env2.spec, env.spec);
        let u = task(json!({"instance_id":"u","repo":"zz/zz","base_commit":"c","patch":"p"}));
        assert!(reg.resolve(&u).unwrap_err().to_string().contains("zz/zz"));
    }

    #[test]
    fn bad_env_files_are_rejected_with_origin() {
        let mut reg = EnvRegistry::default();
        let e = reg
            .add_text("bad.toml", "repo = \"a/b\"\n[default]\npyhton = \"3.11\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("bad.toml") && e.contains("pyhton"), "{e}");
        let e = reg
            .add_text(
                "bad2.toml",
                "repo = \"a/b\"\n[versions.\"1\"]\ntest_directives = \"all\"\n",
            )
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("versions") && e.contains("test_directives"),
            "{e}"
        );
    }

    /// Version-1 files (no `schema_version`) still load; `requirements_file` needs version 2;
    /// a future version is refused, naming the file.
    #[test]
    fn schema_versions() {
        let mut reg = EnvRegistry::default();
        reg.add_text("v1.toml", "repo = \"a/b\"\n[default]\npython = \"3.11\"\n")
            .unwrap();
        reg.add_text(
            "v2.toml",
            "schema_version = 2\nrepo = \"c/d\"\n[default]\nrequirements = [\"pytest==8.3.3\"]\nrequirements_file = \"requirements/dev.txt\"\n",
        )
        .unwrap();
        let t = task(json!({"instance_id":"c__d-1","repo":"c/d","base_commit":"c","patch":"p"}));
        let env = reg.resolve(&t).unwrap();
        assert_eq!(
            env.requirements_file.as_deref(),
            Some("requirements/dev.txt")
        );
        let t = task(json!({"instance_id":"a__b-1","repo":"a/b","base_commit":"c","patch":"p"}));
        assert_eq!(reg.resolve(&t).unwrap().requirements_file, None);
        let e = reg
            .add_text(
                "v1r.toml",
                "repo = \"a/b\"\n[default]\nrequirements_file = \"r.txt\"\n",
            )
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("v1r.toml") && e.contains("schema_version = 2"),
            "{e}"
        );
        let e = reg
            .add_text("v9.toml", "schema_version = 9\nrepo = \"a/b\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("v9.toml") && e.contains("schema_version 9"),
            "{e}"
        );
    }

    /// Schema 3: ordered install steps, installer, the tests' network and CPUs, the reinstall's
    /// network; layered like every key; refused in an older file, naming the key.
    #[test]
    fn schema_3_keys() {
        let mut reg = EnvRegistry::default();
        reg.add_text(
            "v3.toml",
            r#"schema_version = 3
repo = "psf/requests"
[default]
installer = "pip"
pre_install = ["sed -i 's/x/y/' setup.cfg"]
requirements = ["pytest==8.3.3"]
install = ["echo done"]
[versions."2.27"]
network = true
cpus = 2
reinstall_network = true
"#,
        )
        .unwrap();
        let t = |v: &str| {
            task(
                json!({"instance_id":"psf__requests-1","repo":"psf/requests","base_commit":"c",
                "patch":"p","version": v,
                "eval_script":"python -m pip install -e .\n: '>>>>> Start Test Output'\npytest -rA\n: '>>>>> End Test Output'\n"}),
            )
        };
        let env = reg.resolve(&t("2.27")).unwrap();
        assert_eq!(env.spec.installer, Installer::Pip);
        assert_eq!(env.spec.pre_install, ["sed -i 's/x/y/' setup.cfg"]);
        assert_eq!(env.spec.install, ["echo done"]);
        assert!(env.spec.network && env.reinstall_network);
        assert_eq!(env.spec.cpus, Some(2));
        // The reinstall may reach the index: no PIP_NO_INDEX in its line.
        assert!(
            env.pre_test
                .iter()
                .any(|l| l.contains("pip install -e .") && !l.contains("PIP_NO_INDEX")),
            "{:?}",
            env.pre_test
        );
        let env = reg.resolve(&t("2.0")).unwrap();
        assert!(!env.spec.network && !env.reinstall_network && env.spec.cpus.is_none());
        assert!(env.pre_test.iter().any(|l| l.contains("PIP_NO_INDEX=1")));
        for (text, key) in [
            (
                "schema_version = 2\nrepo = \"a/b\"\n[default]\ninstaller = \"pip\"\n",
                "installer",
            ),
            (
                "repo = \"a/b\"\n[versions.\"1\"]\nnetwork = true\n",
                "network",
            ),
        ] {
            let e = reg.add_text("old.toml", text).unwrap_err().to_string();
            assert!(
                e.contains("old.toml") && e.contains(key) && e.contains("schema_version = 3"),
                "{e}"
            );
        }
        let e = reg
            .add_text(
                "c.toml",
                "schema_version = 3\nrepo = \"a/b\"\n[default]\ncpus = 0\n",
            )
            .unwrap_err()
            .to_string();
        assert!(e.contains("c.toml") && e.contains("cpus"), "{e}");
        let e = reg
            .add_text(
                "i.toml",
                "schema_version = 3\nrepo = \"a/b\"\n[default]\ninstaller = \"conda\"\n",
            )
            .unwrap_err()
            .to_string();
        assert!(e.contains("i.toml") && e.contains("installer"), "{e}");
    }

    /// Schema 4: `exclude_newer`, layered like every key; a day or an error naming the file,
    /// table and key; refused in a schema-3 file.
    #[test]
    fn schema_4_exclude_newer() {
        let mut reg = EnvRegistry::default();
        reg.add_text(
            "v4.toml",
            "schema_version = 4\nrepo = \"a/b\"\n[default]\nexclude_newer = \"2024-01-01\"\n[versions.\"2\"]\nexclude_newer = \"2025-06-30\"\n",
        )
        .unwrap();
        let t = |v: &str| {
            task(
                json!({"instance_id":"a__b-1","repo":"a/b","base_commit":"c","patch":"p","version":v}),
            )
        };
        let day = |v: &str| reg.resolve(&t(v)).unwrap().spec.exclude_newer;
        assert_eq!(day("1").as_deref(), Some("2024-01-01"));
        assert_eq!(day("2").as_deref(), Some("2025-06-30"));
        for bad in [
            "2024-1-01",
            "2024-13-01",
            "2024-01-32",
            "2023-02-29",
            "yesterday",
            "2024-01-01T00:00:00Z",
        ] {
            let e = reg
                .add_text(
                    "bad.toml",
                    &format!("schema_version = 4\nrepo = \"a/b\"\n[versions.\"3\"]\nexclude_newer = \"{bad}\"\n"),
                )
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("bad.toml")
                    && e.contains("[versions.\"3\"]")
                    && e.contains("exclude_newer"),
                "{e}"
            );
        }
        let e = reg
            .add_text(
                "old.toml",
                "schema_version = 3\nrepo = \"a/b\"\n[default]\nexclude_newer = \"2024-01-01\"\n",
            )
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("old.toml") && e.contains("schema_version = 4"),
            "{e}"
        );
    }

    /// Schema 5: `host_programs` (program → Debian package), layered like every key; refused in
    /// a schema-4 file.
    #[test]
    fn schema_5_host_programs() {
        let mut reg = EnvRegistry::default();
        reg.add_text(
            "v5.toml",
            "schema_version = 5\nrepo = \"a/b\"\n[versions.\"7.2\"]\nhost_programs = { dot = \"graphviz\" }\n",
        )
        .unwrap();
        let t = |v: &str| {
            task(
                json!({"instance_id":"a__b-1","repo":"a/b","base_commit":"c","patch":"p","version":v}),
            )
        };
        assert!(reg.resolve(&t("7.1")).unwrap().host_programs.is_empty());
        let e = reg.resolve(&t("7.2")).unwrap();
        assert_eq!(e.host_programs["dot"], "graphviz");
        let e = reg
            .add_text(
                "old.toml",
                "schema_version = 4\nrepo = \"a/b\"\n[default]\nhost_programs = { dot = \"graphviz\" }\n",
            )
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("old.toml") && e.contains("schema_version = 5"),
            "{e}"
        );
    }

    /// A misspelt parser or eval type fails where the spec is loaded, naming the file and key.
    #[test]
    fn unknown_log_parser_or_eval_type_fails_at_load() {
        let mut reg = EnvRegistry::default();
        let e = reg
            .add_text(
                "p.toml",
                "repo = \"a/b\"\n[default]\nlog_parser = \"pytset\"\n",
            )
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("p.toml") && e.contains("log_parser") && e.contains("pytset"),
            "{e}"
        );
        let e = reg
            .add_text(
                "e.toml",
                "repo = \"a/b\"\n[default]\neval_type = \"fail-only\"\n",
            )
            .unwrap_err()
            .to_string();
        assert!(e.contains("e.toml") && e.contains("eval_type"), "{e}");
    }

    #[test]
    fn directives_match_swebench() {
        let p = "diff --git a/tests/forms/test_a.py b/tests/forms/test_a.py\ndiff --git a/README.md b/README.md\ndiff --git a/x.csv b/x.csv\n";
        assert_eq!(
            test_directives(p, Directives::Files),
            ["tests/forms/test_a.py"]
        );
        assert_eq!(test_directives(p, Directives::Django), ["forms.test_a"]);
    }
}
