//! The target model for rendering: `dojo-chat`'s chat template + tokenizer behind [`ChatModel`].

use crate::render::ChatModel;

/// Loads the target model: `default` (the bundled SmolLM2) or a GGUF path.
pub fn load(spec: &str) -> Result<Box<dyn ChatModel>, String> {
    Err(format!(
        "cannot load model {spec:?}: dojo-chat's tokenizer/template API is not available in this build yet"
    ))
}
