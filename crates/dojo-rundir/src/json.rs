//! How error messages name a JSON value's type.

use serde_json::Value;

/// The type of `v` with its article, for "expected a string, found an array": `null`,
/// `a boolean`, `a number`, `a string`, `an array`, `an object`.
pub fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// [`type_name`], with the value itself for booleans and numbers (`a number (2)`), where the
/// expectation is about the value ("0 or 1").
pub fn describe(v: &Value) -> String {
    match v {
        Value::Bool(_) | Value::Number(_) => format!("{} ({v})", type_name(v)),
        _ => type_name(v).to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names_and_descriptions() {
        assert_eq!(type_name(&json!(null)), "null");
        assert_eq!(type_name(&json!([1])), "an array");
        assert_eq!(type_name(&json!({})), "an object");
        assert_eq!(describe(&json!(2)), "a number (2)");
        assert_eq!(describe(&json!(true)), "a boolean (true)");
        assert_eq!(describe(&json!("x")), "a string");
    }
}
