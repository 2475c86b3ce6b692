//! The environment every sandboxed command starts with, and argv[0] resolved against its PATH
//! (the caller resolves it; the command's process only tries the candidates).

use std::collections::BTreeMap;
use std::ffi::CString;

use crate::sys::{CArgv, cstr};

/// Where the Python environment is mounted (read-only) inside every sandbox.
pub const VENV_PATH: &str = "/venv";
/// Base environment of every command.
/// git refuses a repository whose top directory another uid owns ("dubious ownership"), and
/// the overlay's root is not owned by the sandbox user; agents and build backends such as
/// setuptools-scm run git at /testbed. Command-scope config is protected, so git honours
/// `safe.directory` given this way.
pub(crate) const GIT_SAFE_DIRECTORY_ENV: [(&str, &str); 3] = [
    ("GIT_CONFIG_COUNT", "1"),
    ("GIT_CONFIG_KEY_0", "safe.directory"),
    ("GIT_CONFIG_VALUE_0", "*"),
];

pub(crate) fn base_env(
    venv: Option<&str>,
    extra: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    let sys_path = crate::SYSTEM_PATH;
    match venv {
        Some(v) => {
            env.insert("PATH".into(), format!("{v}/bin:{sys_path}"));
            env.insert("VIRTUAL_ENV".into(), v.to_string());
        }
        None => {
            env.insert("PATH".into(), sys_path.into());
        }
    }
    env.insert("HOME".into(), "/tmp".into());
    env.insert("USER".into(), "root".into());
    env.insert("LOGNAME".into(), "root".into());
    env.insert("SHELL".into(), "/bin/bash".into());
    env.insert("LANG".into(), "C.UTF-8".into());
    env.insert("LC_ALL".into(), "C.UTF-8".into());
    env.insert("TMPDIR".into(), "/tmp".into());
    env.insert("PIP_DISABLE_PIP_VERSION_CHECK".into(), "1".into());
    for (k, v) in GIT_SAFE_DIRECTORY_ENV {
        env.insert(k.into(), v.into());
    }
    for (k, v) in extra {
        env.insert(k.clone(), v.clone());
    }
    env
}

/// A host program (`uv`, `slirp4netns`) on the host's own `PATH`, which dojo runs outside any
/// sandbox; the first that is a file.
pub(crate) fn on_host_path(name: &str) -> Option<std::path::PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// argv[0] resolved against PATH (candidates tried in order by the child).
pub(crate) fn exe_candidates(argv0: &str, env: &BTreeMap<String, String>) -> Vec<CString> {
    if argv0.contains('/') {
        return vec![cstr(argv0)];
    }
    env.get("PATH")
        .map(String::as_str)
        .unwrap_or("/usr/bin:/bin")
        .split(':')
        .filter(|d| !d.is_empty())
        .map(|d| cstr(format!("{d}/{argv0}")))
        .collect()
}
pub(crate) fn envp(env: &BTreeMap<String, String>) -> CArgv {
    CArgv::new(env.iter().map(|(k, v)| cstr(format!("{k}={v}"))).collect())
}
