//! Hand-built trajectory records with known answers, for tests and examples.

use dojo_trajectory::{Step, StopReason, Trajectory};
use serde_json::json;

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
