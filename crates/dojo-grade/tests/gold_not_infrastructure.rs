//! The guard rejects no gold patch: every gold patch of the real SWE-bench dev-split instances
//! in `../shared/data/swebench` and of the bundled tasks is classified as the grading flow
//! classifies a model patch, and none may touch rejected test infrastructure (a rule that did
//! would grade correct fixes unresolved). Skipped when the shared data is absent.

use std::path::Path;

use dojo_grade::guard;

#[test]
fn no_gold_patch_is_rejected_as_test_infrastructure() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let files = [
        root.join("../shared/data/swebench/swebench_dev.jsonl"),
        root.join("../shared/data/swebench/swebench_lite_dev.jsonl"),
        root.join("tasksets/mini/tasks.jsonl"),
    ];
    let mut checked = 0;
    for f in files.iter().filter(|f| f.exists()) {
        for t in dojo_task::load_tasks(f).unwrap() {
            let touches = guard::classify(
                &dojo_patch::Patch::parse(&t.patch),
                &guard::task_test_files(&t),
                |_| None,
            );
            assert_eq!(
                guard::rejection_reason(&touches),
                None,
                "{}: {touches:?}",
                t.instance_id
            );
            checked += 1;
        }
    }
    if checked == 0 {
        println!("SKIPPED: no task files found");
        return;
    }
    println!("{checked} gold patches: none touches rejected test infrastructure");
}
