//! From a task to what its sandboxes are created from: the pristine tree and the Python
//! environment. The one owner of task preparation: grading (`dojo eval`, `dojo validate`),
//! rollouts, and every later stage that needs a task's tree call [`Preparer::prepare`].
//!
//! - [`Preparer`]: async, and prepares each (task, environment) once per preparer: concurrent
//!   callers for the same key wait for one preparation and share its result (the K samples of a
//!   rollout, the jobs of an eval). Across preparers and processes the built trees and venvs are
//!   shared through `$DOJO_HOME` (built once, published atomically, see `dojo_cache`).
//! - [`prepare`]: the same work, blocking and without the in-memory cache (tests, tools).
//! - [`task_source`]: the tree's [`Source`] alone.
//!
//! For sdist tasks the tree is the sdist unpacked (single top directory stripped) with the
//! task's `bug_patch` applied, cached under `$DOJO_HOME/task-src/<key>`; the sandbox then
//! commits it as one commit, so no history reveals the fix. For git tasks (SWE-bench rows) the
//! repository must be present locally under `repos_dir` as `owner__name` (or `name`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};

use dojo_cache::Cache;
use dojo_sandbox::{Pristine, PristineStore, PythonEnv, Source};

use crate::model::{SdistSource, Task};
use crate::{RepoEnv, TaskError, requirements};

/// Where to find what a task needs.
#[derive(Debug, Clone, Default)]
pub struct PrepareOptions {
    /// Local clones or mirrors of the repositories of git-based tasks (`owner__name` or `name`).
    pub repos_dir: Option<PathBuf>,
}

/// What a task's sandboxes are created from.
#[derive(Debug, Clone)]
pub struct PreparedTask {
    pub pristine: Pristine,
    pub env: PythonEnv,
}

/// What a preparation left for its waiting callers: the prepared task, or the step that failed
/// and why (a [`TaskError::Prepare`] is rebuilt from it for each caller).
type Shared = Result<Arc<PreparedTask>, Failed>;

/// A failed preparation, as kept for every caller waiting on it.
#[derive(Debug, Clone)]
struct Failed {
    step: String,
    source: Cause,
}

/// Prepares tasks, each (task, environment) at most once: see the module docs.
///
/// A failure is kept like a success, for the preparer's lifetime, so the samples of a task
/// whose environment cannot be built fail at once instead of each retrying the build; make a
/// new preparer to try again.
#[derive(Debug, Default)]
pub struct Preparer {
    options: PrepareOptions,
    prepared: Mutex<HashMap<String, Arc<tokio::sync::OnceCell<Shared>>>>,
}

impl Preparer {
    pub fn new(options: PrepareOptions) -> Preparer {
        Preparer {
            options,
            prepared: Mutex::default(),
        }
    }

    pub fn options(&self) -> &PrepareOptions {
        &self.options
    }

    /// The pristine tree and Python environment of `task` in environment `env`, built (or
    /// found in `$DOJO_HOME`) on a blocking thread the first time, shared after that.
    /// Errors are [`TaskError::Prepare`], naming the instance and the step that failed.
    pub async fn prepare(
        &self,
        task: &Task,
        env: &RepoEnv,
    ) -> Result<Arc<PreparedTask>, TaskError> {
        // Tasks with the same id and environment spec have the same tree and venv.
        let key = format!(
            "{}\0{}",
            task.instance_id,
            serde_json::to_string(&env.spec).unwrap_or_default()
        );
        let cell = {
            // A poisoned lock only means another caller panicked while inserting: the map is
            // still a valid map.
            let mut m = self.prepared.lock().unwrap_or_else(|e| e.into_inner());
            m.entry(key).or_default().clone()
        };
        let shared = cell
            .get_or_init(|| async {
                let (t, e, o) = (task.clone(), env.clone(), self.options.clone());
                match tokio::task::spawn_blocking(move || prepare(&t, &e, &o)).await {
                    Ok(Ok(p)) => Ok(Arc::new(p)),
                    Ok(Err(TaskError::Prepare { step, source, .. })) => {
                        Err(Failed { step, source })
                    }
                    Ok(Err(other)) => Err(Failed {
                        step: "prepare".into(),
                        source: Arc::new(other),
                    }),
                    Err(join) => Err(Failed {
                        step: "the preparing thread".into(),
                        source: Arc::new(join),
                    }),
                }
            })
            .await;
        shared
            .clone()
            .map_err(|Failed { step, source }| TaskError::Prepare {
                instance_id: task.instance_id.clone(),
                step,
                source,
            })
    }
}

/// Build (or find in `$DOJO_HOME`) the pristine tree and the Python environment of `task`.
/// Blocking (downloads, unpacking, `uv`); async code calls [`Preparer::prepare`].
pub fn prepare(
    task: &Task,
    env: &RepoEnv,
    opts: &PrepareOptions,
) -> Result<PreparedTask, TaskError> {
    let missing = missing_host_programs(env);
    if !missing.is_empty() {
        let list: Vec<String> = missing
            .iter()
            .map(|(prog, pkg)| format!("`{prog}` (Debian/Ubuntu: apt-get install {pkg})"))
            .collect();
        return Err(prepare_err(
            task,
            "host programs",
            message(format!(
                "{} version {:?} needs {} on this machine, as the harness's image has it; \
                 without it the tests that use it do not run",
                env.repo,
                env.version,
                list.join(", ")
            )),
        ));
    }
    let source = task_source(task, opts)?;
    let store = PristineStore::open().map_err(|e| err(task, "pristine", e))?;
    let pristine = store.build(&source).map_err(|e| err(task, "pristine", e))?;
    let spec = resolved_spec(task, env, opts, &pristine)?;
    let venv = PythonEnv::build(&spec, Some(&pristine)).map_err(|e| {
        let step = format!(
            "environment of {} version {:?}, from {}",
            env.repo, env.version, env.origin
        );
        err(task, &step, e)
    })?;
    Ok(PreparedTask {
        pristine,
        env: venv,
    })
}

/// The programs of `env.host_programs` that no directory of the sandbox's `PATH` has, each
/// with its package.
pub fn missing_host_programs(env: &RepoEnv) -> Vec<(&str, &str)> {
    env.host_programs
        .iter()
        .filter(|(prog, _)| {
            !dojo_sandbox::SYSTEM_PATH
                .split(':')
                .any(|d| Path::new(d).join(prog).is_file())
        })
        .map(|(prog, pkg)| (prog.as_str(), pkg.as_str()))
        .collect()
}

/// Reads a file of the task's repository by path (`None`: absent).
type ReadFile = dyn Fn(&str) -> Option<String>;

/// The environment spec with the repository's requirements file read in (when the env names
/// one): the file at the task's `environment_setup_commit` (else its base commit) of its
/// `--repos` repository, or in the tree for sdist tasks; its lines first, the spec's pinned
/// requirements after them and overriding them by name.
pub fn resolved_spec(
    task: &Task,
    env: &RepoEnv,
    opts: &PrepareOptions,
    pristine: &Pristine,
) -> Result<dojo_sandbox::PythonEnvSpec, TaskError> {
    let Some(file) = &env.requirements_file else {
        return Ok(env.spec.clone());
    };
    let fail = |e: Cause| prepare_err(task, "requirements_file", e);
    let read: Box<ReadFile> = match (task.sdist(), &opts.repos_dir) {
        (None, Some(root)) => {
            let repo = find_repo(root, &task.repo).map_err(|e| fail(Arc::new(e)))?;
            let commit = if task.environment_setup_commit.is_empty() {
                task.base_commit.clone()
            } else {
                task.environment_setup_commit.clone()
            };
            // The commit must exist: a missing file is then a plain "not found".
            requirements::git_file(&repo, &commit, file).map_err(|e| fail(Arc::new(e)))?;
            Box::new(move |p: &str| requirements::git_file(&repo, &commit, p).ok().flatten())
        }
        _ => {
            let root = pristine.path.clone();
            Box::new(move |p: &str| std::fs::read_to_string(root.join(p)).ok())
        }
    };
    let text =
        read(file).ok_or_else(|| fail(message(format!("{file} not found in the repository"))))?;
    let lines =
        requirements::parse_requirements(file, &text, &*read).map_err(|e| fail(Arc::new(e)))?;
    let mut spec = env.spec.clone();
    spec.requirements = requirements::merge_pinned(lines, &env.spec.requirements);
    Ok(spec)
}

/// The shared cause of a [`TaskError::Prepare`].
type Cause = Arc<dyn std::error::Error + Send + Sync>;

/// A cause that is only a message (nothing failed under it).
fn message(text: String) -> Cause {
    Arc::from(Box::<dyn std::error::Error + Send + Sync>::from(text))
}

fn err(
    task: &Task,
    step: &str,
    source: impl std::error::Error + Send + Sync + 'static,
) -> TaskError {
    prepare_err(task, step, Arc::new(source))
}

fn prepare_err(task: &Task, step: &str, source: Cause) -> TaskError {
    TaskError::Prepare {
        instance_id: task.instance_id.clone(),
        step: step.to_string(),
        source,
    }
}

/// The source of `task`'s pristine tree; for sdists this downloads (once) and builds the
/// bug-injected tree in the cache.
pub fn task_source(task: &Task, opts: &PrepareOptions) -> Result<Source, TaskError> {
    if let Some(s) = task.sdist() {
        let cache = Cache::open().map_err(|e| err(task, "cache", e))?;
        let dir = sdist_tree(&cache, task, s)?;
        return Ok(Source::Dir { path: dir });
    }
    let Some(root) = &opts.repos_dir else {
        return Err(prepare_err(
            task,
            "source",
            message(format!(
                "task has no `source` and no repository directory was given (--repos DIR holding {})",
                task.repo.replace('/', "__")
            )),
        ));
    };
    let repo = find_repo(root, &task.repo).map_err(|e| err(task, "source", e))?;
    Ok(Source::Git {
        repo: repo.clone(),
        commit: task.base_commit.clone(),
    })
}

/// The local repository of `repo` (`owner/name`) under a `--repos` directory: `owner__name`,
/// else `name`. The error names both places looked at and the option.
pub fn find_repo(root: &Path, repo: &str) -> Result<PathBuf, TaskError> {
    let name = repo.rsplit('/').next().unwrap_or(repo);
    let [at, or] = [root.join(repo.replace('/', "__")), root.join(name)];
    if at.exists() {
        Ok(at)
    } else if or.exists() {
        Ok(or)
    } else {
        Err(TaskError::NoRepo {
            repo: repo.to_string(),
            at,
            or,
            via: "",
        })
    }
}

/// Download the sdist, unpack it, strip its top directory and apply the bug patch, once per
/// (sdist, bug patch); returns the cached tree.
pub fn sdist_tree(cache: &Cache, task: &Task, s: &SdistSource) -> Result<PathBuf, TaskError> {
    let archive = cache
        .fetch(&s.url, &s.sha256, &s.filename)
        .map_err(|e| err(task, "download", e))?;
    let key = dojo_cache::sha256_hex(format!("sdist-tree-v1\0{}\0{}", s.sha256, s.bug_patch));
    cache
        .get_or_build("task-src", &key, |tmp| {
            build_tree(&archive, &s.bug_patch, tmp)
        })
        .map_err(|e| err(task, "unpack", e))
}

/// Run a command to completion; the error names `what` and carries its output.
pub(crate) fn run(cmd: &mut Command, what: &str) -> Result<(), TaskError> {
    let out = cmd.output().map_err(|source| TaskError::Spawn {
        what: what.to_string(),
        source,
    })?;
    if out.status.success() {
        Ok(())
    } else {
        Err(TaskError::Command {
            what: what.to_string(),
            status: out.status,
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        })
    }
}

fn io_at(path: &Path) -> impl Fn(std::io::Error) -> TaskError + '_ {
    move |source| TaskError::Io {
        path: path.display().to_string(),
        source,
    }
}

fn build_tree(archive: &Path, bug_patch: &str, dest: &Path) -> Result<(), TaskError> {
    // The cache stores a download under its own file name, so the extension tells the format.
    let unpack = dest.join(".dojo-unpack");
    let top = dojo_cache::archive::unpack(archive, &unpack)?;
    for e in std::fs::read_dir(&top).map_err(io_at(&top))? {
        let p = e.map_err(io_at(&top))?.path();
        let Some(name) = p.file_name() else { continue };
        std::fs::rename(&p, dest.join(name)).map_err(|source| TaskError::Io {
            path: format!("moving {}", p.display()),
            source,
        })?;
    }
    std::fs::remove_dir_all(&unpack).map_err(io_at(&unpack))?;
    if !bug_patch.trim().is_empty() {
        apply_in_dir(dest, bug_patch).map_err(|e| TaskError::BugPatch(Box::new(e)))?;
    }
    Ok(())
}

/// Apply a unified diff to a plain directory with `git apply` (strict, like the harness's first
/// attempt), inside a throwaway repository so an enclosing repository is never touched.
pub fn apply_in_dir(dir: &Path, patch: &str) -> Result<(), TaskError> {
    let patch_file = dir.join(".dojo-patch.diff");
    let mut text = patch.to_string();
    if !text.ends_with('\n') {
        text.push('\n');
    }
    std::fs::write(&patch_file, text).map_err(io_at(&patch_file))?;
    let had_git = dir.join(".git").exists();
    let res = (|| {
        if !had_git {
            run(
                Command::new("git").arg("init").arg("-q").current_dir(dir),
                "git init",
            )?;
        }
        run(
            Command::new("git")
                .args(["apply", "--whitespace=nowarn", ".dojo-patch.diff"])
                .current_dir(dir),
            "git apply",
        )
    })();
    let _ = std::fs::remove_file(&patch_file);
    if !had_git {
        let _ = std::fs::remove_dir_all(dir.join(".git"));
    }
    res
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::EnvRegistry;
    use crate::model::Location;
    use serde_json::json;

    /// A real tarball made with tar, fetched through the cache from a file:// URL when the cache
    /// supports it, else built directly.
    #[test]
    fn tree_from_tarball_strips_top_dir_and_applies_bug() {
        let work = tempfile::tempdir().unwrap();
        let src = work.path().join("pkg-1.0");
        std::fs::create_dir_all(src.join("pkg")).unwrap();
        std::fs::write(src.join("pkg/core.py"), "def inc(x):\n    return x + 1\n").unwrap();
        let tgz = work.path().join("pkg-1.0.tar.gz");
        run(
            Command::new("tar")
                .arg("-czf")
                .arg(&tgz)
                .arg("-C")
                .arg(work.path())
                .arg("pkg-1.0"),
            "tar",
        )
        .unwrap();
        let bug = "diff --git a/pkg/core.py b/pkg/core.py\n--- a/pkg/core.py\n+++ b/pkg/core.py\n@@ -1,2 +1,2 @@\n def inc(x):\n-    return x + 1\n+    return x + 2\n";
        let dest = work.path().join("out");
        std::fs::create_dir_all(&dest).unwrap();
        build_tree(&tgz, bug, &dest).unwrap();
        let body = std::fs::read_to_string(dest.join("pkg/core.py")).unwrap();
        assert!(body.contains("x + 2"), "{body}");
        assert!(!dest.join(".git").exists() && !dest.join(".dojo-unpack").exists());

        let dest2 = work.path().join("out2");
        std::fs::create_dir_all(&dest2).unwrap();
        let bad = bug.replace("return x + 1", "return x + 9");
        let e = build_tree(&tgz, &bad, &dest2).unwrap_err();
        assert!(e.to_string().contains("git apply"), "{e}");
    }

    /// Concurrent callers for one task share one preparation, its failure included.
    #[tokio::test]
    async fn concurrent_callers_share_one_preparation() {
        let loc = Location {
            file: "f".into(),
            unit: "line",
            index: 1,
        };
        let t = Task::from_row(
            json!({"instance_id":"a__b-1","repo":"a/b","base_commit":"c","patch":"p"})
                .as_object()
                .cloned()
                .unwrap(),
            &loc,
        )
        .unwrap();
        let env = RepoEnv {
            repo: "a/b".into(),
            version: String::new(),
            spec: Default::default(),
            test_cmd: "pytest".into(),
            log_parser: crate::LogParser::Pytest,
            timeout_s: 1,
            directives: crate::Directives::Files,
            eval_type: Default::default(),
            env: Default::default(),
            requirements_file: None,
            pre_test: Vec::new(),
            reinstall_network: false,
            host_programs: Default::default(),
            origin: "test".into(),
        };
        // No repository directory: preparation fails at its first step, without touching the
        // cache, and every caller gets the same named failure.
        let p = Preparer::default();
        let (a, b) = tokio::join!(p.prepare(&t, &env), p.prepare(&t, &env));
        for e in [a.unwrap_err(), b.unwrap_err()] {
            let e = e.to_string();
            assert!(e.contains("a__b-1") && e.contains("source"), "{e}");
        }
        assert_eq!(p.prepared.lock().unwrap().len(), 1);

        // A host program the tests need and this machine lacks fails preparation first, as
        // the environment's failure, naming the program and its package (not the ones found).
        let mut needs = env.clone();
        needs.host_programs = [("sh", "dash"), ("dojo-no-such-program", "dojo-nothing")]
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .into();
        assert_eq!(
            missing_host_programs(&needs),
            [("dojo-no-such-program", "dojo-nothing")]
        );
        let e = prepare(&t, &needs, &PrepareOptions::default()).unwrap_err();
        let TaskError::Prepare { step, .. } = &e else {
            panic!("{e:?}")
        };
        assert_eq!(step, "host programs");
        let e = e.to_string();
        assert!(
            e.contains("`dojo-no-such-program` (Debian/Ubuntu: apt-get install dojo-nothing)")
                && !e.contains("`sh`"),
            "{e}"
        );
    }

    #[test]
    fn git_task_without_repos_dir_names_what_is_missing() {
        let loc = Location {
            file: "f".into(),
            unit: "line",
            index: 1,
        };
        let t = Task::from_row(
            json!({"instance_id":"a__b-1","repo":"a/b","base_commit":"c","patch":"p"})
                .as_object()
                .cloned()
                .unwrap(),
            &loc,
        )
        .unwrap();
        let e = task_source(&t, &PrepareOptions::default())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("a__b-1") && e.contains("--repos DIR holding a__b"),
            "{e}"
        );
        let dir = tempfile::tempdir().unwrap();
        let e = task_source(
            &t,
            &PrepareOptions {
                repos_dir: Some(dir.path().to_path_buf()),
            },
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("no repository for a/b at") && e.contains("--repos"),
            "{e}"
        );
        std::fs::create_dir(dir.path().join("b")).unwrap();
        assert_eq!(find_repo(dir.path(), "a/b").unwrap(), dir.path().join("b"));
    }

    /// The requirements file comes from the repository at the task's environment_setup_commit
    /// (not its base commit), `-r` includes followed, pinned requirements overriding it.
    #[test]
    fn requirements_file_at_the_environment_setup_commit() {
        let d = tempfile::tempdir().unwrap();
        let repo = d.path().join("a__b");
        std::fs::create_dir_all(repo.join("requirements")).unwrap();
        let git = |args: &[&str]| -> String {
            let o = Command::new("git")
                .arg("-C")
                .arg(&repo)
                .args(["-c", "user.name=t", "-c", "user.email=t@t"])
                .args(args)
                .output()
                .unwrap();
            assert!(o.status.success(), "{args:?}");
            String::from_utf8(o.stdout).unwrap().trim().to_string()
        };
        git(&["init", "-q"]);
        std::fs::write(repo.join("requirements/base.txt"), "six\n").unwrap();
        std::fs::write(
            repo.join("requirements/dev.txt"),
            "-r base.txt\n-e .\npytest>=6\nappdirs\n",
        )
        .unwrap();
        git(&["add", "."]);
        git(&["commit", "-qm", "setup"]);
        let setup = git(&["rev-parse", "HEAD"]);
        std::fs::write(repo.join("requirements/dev.txt"), "changed-later\n").unwrap();
        git(&["commit", "-qam", "base"]);
        let base = git(&["rev-parse", "HEAD"]);
        let loc = Location {
            file: "f".into(),
            unit: "line",
            index: 1,
        };
        let t = Task::from_row(
            json!({"instance_id":"a__b-1","repo":"a/b","base_commit": base, "patch":"p",
                   "environment_setup_commit": setup})
            .as_object()
            .cloned()
            .unwrap(),
            &loc,
        )
        .unwrap();
        let mut env = EnvRegistry::default();
        env.add_text(
            "t.toml",
            "schema_version = 2\nrepo = \"a/b\"\n[default]\nrequirements = [\"pytest==8.3.3\"]\nrequirements_file = \"requirements/dev.txt\"\n",
        )
        .unwrap();
        let env = env.resolve(&t).unwrap();
        let opts = PrepareOptions {
            repos_dir: Some(d.path().to_path_buf()),
        };
        let pristine = Pristine {
            id: "x".into(),
            path: d.path().join("unused"),
        };
        let spec = resolved_spec(&t, &env, &opts, &pristine).unwrap();
        assert_eq!(spec.requirements, ["six", "appdirs", "pytest==8.3.3"]);
        // Without a requirements file the spec is unchanged; a missing file is named.
        let mut missing = env.clone();
        missing.requirements_file = Some("nope.txt".into());
        let e = resolved_spec(&t, &missing, &opts, &pristine)
            .unwrap_err()
            .to_string();
        assert!(e.contains("a__b-1") && e.contains("nope.txt"), "{e}");
        missing.requirements_file = None;
        assert_eq!(
            resolved_spec(&t, &missing, &opts, &pristine).unwrap(),
            env.spec
        );
    }
}
