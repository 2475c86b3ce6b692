//! Prompt templates (minijinja). The defaults ship in `crates/dojo-agent/prompts/` and follow the
//! SWE-Master / OpenHands workflow in our own words; any of them can be replaced by a file of the
//! same name in a directory given in the agent configuration.

use std::path::Path;

use minijinja::{Environment, UndefinedBehavior};
use serde::Serialize;
use serde_json::{Map, Value};

/// Template names; a prompt directory may override any of them with `<name>.jinja`.
pub const TEMPLATES: &[&str] = &["system", "instance", "tools_text", "step", "summary"];

fn default_source(name: &str) -> &'static str {
    match name {
        "system" => include_str!("../prompts/system.jinja"),
        "instance" => include_str!("../prompts/instance.jinja"),
        "tools_text" => include_str!("../prompts/tools_text.jinja"),
        "step" => include_str!("../prompts/step.jinja"),
        "summary" => include_str!("../prompts/summary.jinja"),
        _ => "",
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PromptError {
    #[error("reading prompt template {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("prompt template {name}: {source}")]
    Template {
        name: String,
        #[source]
        source: minijinja::Error,
    },
}

/// The compiled prompt templates.
pub struct Prompts {
    env: Environment<'static>,
}

impl std::fmt::Debug for Prompts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Prompts")
    }
}

impl Prompts {
    /// The built-in templates.
    pub fn builtin() -> Result<Self, PromptError> {
        Self::load(None)
    }

    /// Built-ins, with `<dir>/<name>.jinja` overriding each template that exists there.
    pub fn load(dir: Option<&Path>) -> Result<Self, PromptError> {
        let mut env = Environment::new();
        // A missing variable is a bug in the template or the task, not an empty string.
        env.set_undefined_behavior(UndefinedBehavior::Strict);
        for name in TEMPLATES {
            let source = match dir.map(|d| d.join(format!("{name}.jinja"))) {
                Some(p) if p.exists() => {
                    std::fs::read_to_string(&p).map_err(|source| PromptError::Io {
                        path: p.display().to_string(),
                        source,
                    })?
                }
                _ => default_source(name).to_string(),
            };
            env.add_template_owned(name.to_string(), source)
                .map_err(|source| PromptError::Template {
                    name: name.to_string(),
                    source,
                })?;
        }
        Ok(Prompts { env })
    }

    /// Render template `name` with `ctx`.
    pub fn render(&self, name: &str, ctx: &impl Serialize) -> Result<String, PromptError> {
        let err = |source| PromptError::Template {
            name: name.to_string(),
            source,
        };
        let t = self.env.get_template(name).map_err(err)?;
        let out = t
            .render(minijinja::Value::from(minijinja::value::Serde(ctx)))
            .map_err(err)?;
        Ok(out.trim_end().to_string())
    }
}

/// Variables for the system and instance prompts: the task's variables (at least
/// `problem_statement`) plus `workspace`, `max_steps`, `action_format` and `tools_text`.
pub fn prompt_vars(task_vars: &Map<String, Value>, extra: &[(&str, Value)]) -> Map<String, Value> {
    let mut m = task_vars.clone();
    for (k, v) in extra {
        m.entry(k.to_string()).or_insert_with(|| v.clone());
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::ToolRegistry;
    use serde_json::json;

    fn vars(format: &str) -> Value {
        let tools = ToolRegistry::named("swe-master").unwrap().schemas();
        json!({"workspace": "/testbed", "problem_statement": "Division by zero in `mean([])`.", "tools": tools,
               "action_format": format, "max_steps": 150, "tools_text": ""})
    }

    #[test]
    fn builtin_prompts_snapshot() {
        let p = Prompts::builtin().unwrap();
        insta::assert_snapshot!("system", p.render("system", &vars("native")).unwrap());
        insta::assert_snapshot!("instance", p.render("instance", &vars("native")).unwrap());
        insta::assert_snapshot!(
            "tools_text_xml",
            p.render("tools_text", &vars("xml")).unwrap()
        );
        insta::assert_snapshot!(
            "tools_text_hermes",
            p.render("tools_text", &vars("hermes")).unwrap()
        );
        insta::assert_snapshot!(
            "step",
            p.render(
                "step",
                &json!({"step": 3, "max_steps": 150, "remaining": 147})
            )
            .unwrap()
        );
    }

    #[test]
    fn missing_variables_are_errors_and_overrides_apply() {
        let p = Prompts::builtin().unwrap();
        let err = p
            .render("instance", &json!({"workspace": "/testbed"}))
            .unwrap_err();
        assert!(err.to_string().contains("instance"), "{err}");
        let dir = std::env::temp_dir().join(format!("dojo-prompts-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("instance.jinja"), "Fix: {{ problem_statement }}").unwrap();
        let p = Prompts::load(Some(&dir)).unwrap();
        assert_eq!(
            p.render("instance", &json!({"problem_statement": "x"}))
                .unwrap(),
            "Fix: x"
        );
        std::fs::write(dir.join("step.jinja"), "{% if %}").unwrap();
        assert!(
            Prompts::load(Some(&dir))
                .unwrap_err()
                .to_string()
                .contains("step")
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
