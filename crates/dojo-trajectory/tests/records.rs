//! The trajectory record as its readers meet it on disk: a full record survives a write and a
//! read unchanged, records of an older or a newer schema version are refused by name (never
//! half-read), and a file whose last line was torn by a killed writer still yields every whole
//! record before it.

use std::io::Write;
use std::path::Path;

use dojo_trajectory::{
    ActionRecord, Blame, ChatMessage, CompressionEvent, Event, JsonlReader, ProblemKind,
    PromptPart, SCHEMA_VERSION, Step, StopReason, ToolOutcome, Trajectory, TrajectoryError,
    read_jsonl,
};
use serde_json::json;

/// A record with every optional part filled in.
fn full_record(task: &str, sample: u32) -> Trajectory {
    let mut t = Trajectory::new(task, sample);
    t.run_id = Some("run-1".into());
    t.policy.kind = "openai".into();
    t.policy.model = Some("Qwen/Qwen3-8B".into());
    t.policy.config = json!({"base_url": "http://127.0.0.1:8000/v1"});
    t.sampling.temperature = Some(0.7);
    t.sampling.seed = Some(7);
    t.sampling.extra.insert("top_k".into(), json!(20));
    t.agent.tool_set = "swe-master".into();
    t.agent.action_format = "native".into();
    t.messages = vec![
        ChatMessage::system("You are an agent."),
        ChatMessage::user("Fix the bug: <é & \"quotes\">"),
        ChatMessage::assistant("looking"),
        ChatMessage::tool("c1", "a.py\nb.py"),
        ChatMessage::assistant("done"),
    ];
    t.steps = vec![
        Step {
            index: 1,
            started_ms: 3,
            llm_ms: 40,
            tool_ms: 5,
            assistant_message: 2,
            observation_messages: vec![3],
            prompt_token_ids: Some(vec![1, 2, 3]),
            completion_token_ids: Some(vec![4, 5]),
            llm_retries: 1,
            action: Some(ActionRecord {
                tool: "execute_bash".into(),
                arguments: json!({"command": "ls"}),
                call_id: "c1".into(),
            }),
            tool: Some(ToolOutcome {
                exit_code: Some(0),
                duration_ms: 5,
                ..Default::default()
            }),
            ..Default::default()
        },
        Step {
            index: 2,
            assistant_message: 4,
            prompt: Some(vec![
                PromptPart::Message(0),
                PromptPart::Message(1),
                PromptPart::Summary(0),
            ]),
            format_error: None,
            ..Default::default()
        },
    ];
    t.compressions.push(CompressionEvent {
        at_step: 2,
        turns: (1, 1),
        messages: (2, 4),
        summary: ChatMessage::user("[COMPRESSED HISTORY - Turns 1-1]"),
        usage: Default::default(),
        llm_ms: 12,
    });
    t.events.push(Event {
        step: 1,
        kind: "llm_retry".into(),
        blame: Blame::Infrastructure,
        message: "503".into(),
    });
    t.started_at_ms = 1_700_000_000_000;
    t.wall_ms = 1234;
    t.llm_calls = 3;
    t.stop_reason = StopReason::Submitted;
    t.patch = Some("diff --git a/a.py b/a.py\n".into());
    t.grading = Some(json!({"resolved": true, "tests": {"FAIL_TO_PASS": ["t1"]}}));
    t.set_grade(true);
    t.environment.dojo_version = "0.1.0".into();
    t.environment.sandbox_backend = Some("namespace".into());
    t.environment.extra.insert("gpu".into(), json!("none"));
    t.metadata.insert("group".into(), json!(4));
    t
}

fn write_lines(path: &Path, lines: &[&str], last_newline: bool) {
    let mut f = std::fs::File::create(path).unwrap();
    for (i, l) in lines.iter().enumerate() {
        if i + 1 < lines.len() || last_newline {
            writeln!(f, "{l}").unwrap();
        } else {
            write!(f, "{l}").unwrap();
        }
    }
}

#[test]
fn a_full_record_round_trips_through_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("trajectories.jsonl");
    let records = [
        full_record("a", 0),
        full_record("a", 1),
        full_record("b", 0),
    ];
    let lines: Vec<String> = records.iter().map(Trajectory::to_json_line).collect();
    let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
    write_lines(&path, &refs, true);

    let report = read_jsonl(&path).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    assert_eq!(report.trajectories, records);
    // Serialising what was read gives the same bytes: nothing is lost or reordered.
    assert_eq!(report.trajectories[0].to_json_line(), lines[0]);
    let t = &report.trajectories[0];
    assert_eq!(t.schema_version, SCHEMA_VERSION);
    assert!(t.is_resolved() && t.is_graded());
    assert_eq!(t.graded_reward(), Some(1.0));
    assert_eq!(t.prompt_of(2).unwrap().len(), 3);
}

#[test]
fn unknown_fields_of_the_current_version_are_tolerated() {
    let mut v = serde_json::to_value(full_record("a", 0)).unwrap();
    v["added_by_a_newer_writer"] = json!({"x": 1});
    let t = Trajectory::from_json(&v.to_string()).unwrap();
    assert_eq!(t, full_record("a", 0));
}

#[test]
fn older_and_newer_schema_versions_are_refused_by_name() {
    let good = full_record("a", 0).to_json_line();
    let current = format!("\"schema_version\":{SCHEMA_VERSION}");
    for version in [0, SCHEMA_VERSION + 1, 99] {
        let line = good.replacen(&current, &format!("\"schema_version\":{version}"), 1);
        match Trajectory::from_json(&line) {
            Err(TrajectoryError::UnsupportedSchema { found, supported }) => {
                assert_eq!((found, supported), (u64::from(version), SCHEMA_VERSION));
            }
            other => panic!("version {version}: {other:?}"),
        }
    }
    let missing = good.replacen(&format!("{current},"), "", 1);
    assert!(matches!(
        Trajectory::from_json(&missing),
        Err(TrajectoryError::NoSchemaVersion)
    ));

    // In a file, each is a problem naming file and line, and reading goes on.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mixed.jsonl");
    let old = good.replacen(&current, "\"schema_version\":0", 1);
    let future = good.replacen(&current, "\"schema_version\":99", 1);
    write_lines(&path, &[&old, &good, &future, &missing, &good], true);
    let report = read_jsonl(&path).unwrap();
    assert_eq!(report.trajectories.len(), 2);
    let kinds: Vec<_> = report.problems.iter().map(|p| (p.line, p.kind)).collect();
    assert_eq!(
        kinds,
        [
            (1, ProblemKind::UnsupportedSchema),
            (3, ProblemKind::UnsupportedSchema),
            (4, ProblemKind::Corrupt),
        ]
    );
    let msg = report.problems[0].to_string();
    assert!(
        msg.contains("mixed.jsonl:1") && msg.contains("schema_version 0"),
        "{msg}"
    );
    assert!(report.problems[1].to_string().contains("schema_version 99"));
}

#[test]
fn a_torn_last_line_is_reported_as_truncated_wherever_the_write_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("torn.jsonl");
    let good = full_record("a", 0).to_json_line();
    // Every cut of the last record (every third char boundary, to keep the test quick) is an
    // interrupted write.
    for cut in (1..good.len())
        .filter(|&c| good.is_char_boundary(c))
        .step_by(3)
    {
        write_lines(&path, &[&good, &good[..cut]], false);
        let mut reader = JsonlReader::open(&path).unwrap();
        assert_eq!(reader.next().unwrap().unwrap(), full_record("a", 0));
        let p = reader.next().unwrap().unwrap_err();
        assert_eq!(
            (p.line, p.kind),
            (2, ProblemKind::Truncated),
            "cut at {cut}"
        );
        assert!(reader.next().is_none());
        assert_eq!(reader.records_seen(), 2);
        assert_eq!(reader.bytes_read(), (good.len() + 1 + cut) as u64);
    }
}

#[test]
fn a_record_torn_mid_file_does_not_hide_the_records_after_it() {
    // A writer killed mid-line, then resumed by appending: the torn line is in the middle.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("resumed.jsonl");
    let good = full_record("a", 0).to_json_line();
    let torn = &good[..good.len() / 2];
    write_lines(&path, &[&good, torn, "", &good], true);
    let mut reader = JsonlReader::open(&path).unwrap();
    let mut seen = Vec::new();
    for item in reader.by_ref() {
        seen.push(item.map(|t| t.task_id).map_err(|p| (p.line, p.kind)));
    }
    assert_eq!(
        seen,
        [
            Ok("a".to_string()),
            Err((2, ProblemKind::Truncated)),
            Ok("a".to_string())
        ]
    );
    // The blank line is skipped but counted in the line numbers.
    assert_eq!(reader.line(), 4);
    assert_eq!(reader.records_seen(), 3);
}
