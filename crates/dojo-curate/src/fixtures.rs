//! Hand-built trajectory records with known answers, for tests. Compiled only for this crate's
//! tests and with the `fixtures` feature (which the integration tests enable), never into a
//! normal build.

use dojo_trajectory::{Step, StopReason, Trajectory};
use serde_json::{Value, json};

use crate::export::{MessagesRow, RowMeta};

/// A graded record of `turns` `execute_bash` turns (`Look {i}`) then a bare submit (`Done.`),
/// each answered by a tool observation; observations name the sample, so records of different
/// samples are different conversations.
pub fn record(task: &str, sample: u32, reward: f64, turns: usize) -> Trajectory {
    let mut msgs = vec![
        json!({"role": "system", "content": "You are an agent."}),
        json!({"role": "user", "content": format!("Fix {task}.")}),
    ];
    let mut t = Trajectory::new(task, sample);
    for i in 0..=turns {
        let (content, name, args) = if i == turns {
            ("Done.".to_string(), "submit", "{}".to_string())
        } else {
            (
                format!("Look {i}"),
                "execute_bash",
                format!("{{\"command\": \"ls {i}\"}}"),
            )
        };
        t.steps.push(Step {
            index: i as u32 + 1,
            assistant_message: msgs.len(),
            ..Default::default()
        });
        msgs.push(json!({"role": "assistant", "content": content, "tool_calls": [
            {"id": format!("c{i}"), "type": "function", "function": {"name": name, "arguments": args}}]}));
        msgs.push(json!({"role": "tool", "tool_call_id": format!("c{i}"), "content": format!("out {i} of {sample}")}));
    }
    t.messages = msgs
        .into_iter()
        .filter_map(|m| serde_json::from_value(m).ok())
        .collect();
    t.policy.kind = "test".into();
    t.stop_reason = StopReason::Submitted;
    t.reward = Some(reward);
    t.resolved = Some(reward >= 1.0);
    t
}

/// Export rows whose tool calls carry varied arguments: different keys per call, an integer key
/// that is a float elsewhere, nested objects and lists, an empty object, and (with `mixed`) a key
/// that is a number in one call and a string in another.
pub fn rows_with_varied_arguments(mixed: bool) -> Vec<MessagesRow> {
    let call = |id: &str, name: &str, args: Value| json!({"id": id, "type": "function", "function": {"name": name, "arguments": args}});
    let mut args = vec![
        vec![json!({"command": "ls -la"}), json!({"command": "pwd"})],
        vec![json!({"path": "src/a.py", "line": 3, "opts": {"tags": ["x", "y"]}})],
        vec![json!({"path": "b.py", "line": 2.5, "flag": true, "timeout": 10})],
        vec![json!({"opts": {"depth": 2, "tags": []}})],
        vec![json!({})],
    ];
    if mixed {
        args.push(vec![json!({"timeout": "10s"})]);
    }
    args.iter()
        .enumerate()
        .map(|(i, calls)| {
            let mut messages = vec![json!({"role": "user", "content": "u"})];
            messages.push(json!({"role": "assistant", "content": "", "tool_calls":
                calls.iter().enumerate().map(|(k, a)| call(&format!("c{k}"), "f", a.clone())).collect::<Vec<_>>()}));
            for k in 0..calls.len() {
                messages.push(json!({"role": "tool", "tool_call_id": format!("c{k}"), "content": "ok"}));
            }
            MessagesRow {
                meta: RowMeta {
                    task_id: format!("t{i}"),
                    traj_id: format!("t{i}#0"),
                    sample: 0,
                    part: 0,
                    source: "test".into(),
                    reward: 1.0,
                    num_turns: 1,
                },
                messages,
                tools: vec![],
            }
        })
        .collect()
}
