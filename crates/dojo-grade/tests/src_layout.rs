//! A src-layout project whose test command sets its own `PYTHONPATH` (`PYTHONPATH=src pytest`,
//! common for such projects): the observer must still load, since it is not reached through
//! `PYTHONPATH` or `PYTEST_PLUGINS` but from the environment's site-packages. Before, pytest
//! could not import the plugin named in `PYTEST_PLUGINS`, exited 4, and the correct gold patch
//! was graded unresolved as the agent's failure.
//!
//! The real thing: the bundled `tkem__cachetools-1` (cachetools 8.0.2 from its PyPI sdist,
//! `src/cachetools`), with the package not installed, so the tests import it through the test
//! command's `PYTHONPATH=src` alone. Validated for real: the test patch alone fails, the gold
//! patch resolves, and the observer watched the gold run.
//!
//! Needs the sandbox's kernel features, uv and PyPI access (for the sdist and pytest);
//! otherwise SKIPPED (under `CI=true` a missing feature fails instead).

use std::path::PathBuf;
use std::time::Duration;

mod common;
use common::skip;

use dojo_grade::{GradeOptions, validate_in_sandbox};
use dojo_task::{EnvRegistry, load_selected};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_test_command_setting_pythonpath_validates_with_the_observer() {
    if !common::sandboxes_or_skip() {
        return;
    }
    let tasks = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tasksets/mini/tasks.jsonl"
    ));
    let task = load_selected(&tasks, &["tkem__cachetools-1".to_string()])
        .unwrap()
        .remove(0);
    let mut env = EnvRegistry::embedded().unwrap().resolve(&task).unwrap();
    env.spec.editable = false;
    env.env.remove("PYTHONPATH");
    env.test_cmd = format!("PYTHONPATH=src {}", env.test_cmd);
    let (_prepared, mut sb) = match common::prepared_sandbox(&task, &env).await {
        Ok(p) => p,
        Err(e) => return skip(e),
    };
    let opts = GradeOptions {
        timeout: Some(Duration::from_secs(240)),
        ..Default::default()
    };
    let v = validate_in_sandbox(&mut sb, &task, &env, &opts).await;
    sb.teardown().await.unwrap();
    let gold = v.gold.as_ref().expect("gold run");
    assert!(
        v.ok,
        "{:?}\n{:?}\n{}",
        v.problems, gold.error, gold.test_output
    );
    assert!(
        gold.test_output.contains("PYTHONPATH=src"),
        "{}",
        gold.test_output
    );
    let seen = gold.observer.as_ref().expect("observer report");
    assert!(seen.loaded && seen.agrees(), "{seen:?}");
    assert!(seen.observed >= task.f2p().len(), "{seen:?}");
}
