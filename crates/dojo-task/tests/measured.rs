//! `envs/measured.jsonl` (one measured row per SWE-bench instance, written by
//! `scripts/validation-table.py --jsonl`) and `envs/causes.json` (why each one that does not
//! validate does not) stay consistent: what `envs/COVERAGE.md` is generated from.

use std::collections::{BTreeMap, BTreeSet};

const ENVS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../envs");

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Row {
    schema_version: u32,
    instance_id: String,
    repo: String,
    version: String,
    dataset: String,
    #[allow(dead_code)]
    python: String,
    validates: bool,
    official_agrees: Option<bool>,
    #[allow(dead_code)]
    prepare_s: Option<f64>,
    #[allow(dead_code)]
    runs_s: Option<f64>,
    why_not: Option<String>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Causes {
    schema_version: u32,
    #[allow(dead_code)]
    about: String,
    /// Each kind and what a Docker-free runner here could do about it.
    kinds: BTreeMap<String, String>,
    instances: BTreeMap<String, Cause>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Cause {
    kind: String,
    cause: String,
}

#[test]
fn measured_rows_and_their_causes_agree() {
    let text = std::fs::read_to_string(format!("{ENVS}/measured.jsonl")).unwrap();
    let mut seen = BTreeSet::new();
    let mut failing = BTreeSet::new();
    for (n, line) in text.lines().enumerate() {
        let r: Row = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("envs/measured.jsonl:{}: {e}", n + 1));
        let at = format!("envs/measured.jsonl:{} ({})", n + 1, r.instance_id);
        assert_eq!(r.schema_version, 1, "{at}");
        assert!(seen.insert(r.instance_id.clone()), "{at}: a second row");
        assert!(
            ["verified", "lite", "dev"].contains(&r.dataset.as_str()),
            "{at}: dataset {}",
            r.dataset
        );
        let (owner, rest) = r.instance_id.split_once("__").expect("owner__name-N");
        assert!(
            r.repo == format!("{owner}/{}", rest.rsplit_once('-').unwrap().0),
            "{at}"
        );
        assert!(!r.version.is_empty(), "{at}");
        // A disagreement with the official grading is a grading bug, never a row to keep.
        assert_ne!(r.official_agrees, Some(false), "{at}");
        assert_eq!(r.validates, r.why_not.is_none(), "{at}");
        if !r.validates {
            failing.insert(r.instance_id);
        }
    }
    let causes: Causes =
        serde_json::from_str(&std::fs::read_to_string(format!("{ENVS}/causes.json")).unwrap())
            .unwrap_or_else(|e| panic!("envs/causes.json: {e}"));
    assert_eq!(causes.schema_version, 1);
    for (id, c) in &causes.instances {
        assert!(
            causes.kinds.contains_key(&c.kind),
            "causes.json {id}: kind {} is not one of its kinds",
            c.kind
        );
        assert!(!c.cause.is_empty(), "causes.json {id}");
        assert!(
            failing.contains(id),
            "causes.json {id}: not a measured instance that fails (stale: remove it)"
        );
    }
    let unexplained: Vec<_> = failing
        .iter()
        .filter(|id| !causes.instances.contains_key(*id))
        .collect();
    assert!(
        unexplained.is_empty(),
        "no cause in envs/causes.json for {unexplained:?}"
    );
}
