//! Getting the data and the repositories: the public task datasets by name (SWE-bench
//! Verified / Lite, SWE-Gym, SWE-rebench, SWE-smith), from the Hugging Face hub when it is
//! reachable or from a local file otherwise, normalised to dojo's task JSONL; and a bare git
//! mirror per repository a task file needs, usable as `--repos DIR`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::TaskError;
use crate::load::read_tasks;

/// A public dataset dojo knows by a short name.
#[derive(Debug, Clone, Copy)]
pub struct Dataset {
    pub name: &'static str,
    /// The Hugging Face dataset id.
    pub hf_id: &'static str,
    pub split: &'static str,
}

/// The datasets `dojo tasks fetch` knows by name (any other `owner/name` is taken as a hub id).
pub const DATASETS: &[Dataset] = &[
    Dataset {
        name: "swe-bench-verified",
        hf_id: "princeton-nlp/SWE-bench_Verified",
        split: "test",
    },
    Dataset {
        name: "swe-bench-lite",
        hf_id: "princeton-nlp/SWE-bench_Lite",
        split: "test",
    },
    Dataset {
        name: "swe-bench",
        hf_id: "princeton-nlp/SWE-bench",
        split: "test",
    },
    Dataset {
        name: "swe-gym",
        hf_id: "SWE-Gym/SWE-Gym",
        split: "train",
    },
    Dataset {
        name: "swe-rebench",
        hf_id: "nebius/SWE-rebench",
        split: "test",
    },
    Dataset {
        name: "swe-smith",
        hf_id: "SWE-bench/SWE-smith",
        split: "train",
    },
];

/// `(hub id, default split)` of a short name or an `owner/name` hub id.
pub fn dataset(name: &str) -> Result<(String, String), TaskError> {
    let key = name.to_ascii_lowercase().replace('_', "-");
    if let Some(d) = DATASETS
        .iter()
        .find(|d| d.name == key || d.hf_id.eq_ignore_ascii_case(name))
    {
        return Ok((d.hf_id.to_string(), d.split.to_string()));
    }
    match name.split_once('/') {
        Some((o, n)) if !o.is_empty() && !n.is_empty() && !n.contains('/') => {
            Ok((name.to_string(), "test".to_string()))
        }
        _ => Err(TaskError::UnknownDataset {
            name: name.to_string(),
            known: DATASETS
                .iter()
                .map(|d| d.name)
                .collect::<Vec<_>>()
                .join(", "),
        }),
    }
}

/// The hub: `$HF_ENDPOINT` (as the `huggingface_hub` client reads it), else huggingface.co.
pub fn hub_endpoint() -> String {
    std::env::var("HF_ENDPOINT")
        .ok()
        .filter(|e| !e.is_empty())
        .unwrap_or_else(|| "https://huggingface.co".into())
        .trim_end_matches('/')
        .to_string()
}

/// The hub's answer was not the list of Parquet URLs asked for.
#[derive(Debug, thiserror::Error)]
#[error("{api} did not answer a list of Parquet URLs: {source}")]
struct UnexpectedAnswer {
    api: String,
    #[source]
    source: serde_json::Error,
}

/// Download the Parquet shards of `hf_id`'s `split` (the hub's converted Parquet, config
/// `default`) into `dir`; the error says how to do without the hub.
pub fn download_from_hub(hf_id: &str, split: &str, dir: &Path) -> Result<Vec<PathBuf>, TaskError> {
    download_at(&hub_endpoint(), hf_id, split, dir)
}

fn download_at(ep: &str, hf_id: &str, split: &str, dir: &Path) -> Result<Vec<PathBuf>, TaskError> {
    let offline = |source: Box<dyn std::error::Error + Send + Sync>| TaskError::Hub {
        hf_id: hf_id.to_string(),
        split: split.to_string(),
        endpoint: ep.to_string(),
        source,
    };
    let io_at = |path: &Path| {
        let path = path.display().to_string();
        move |source| TaskError::Io { path, source }
    };
    let api = format!("{ep}/api/datasets/{hf_id}/parquet/default/{split}");
    let body = dojo_cache::http_get(&api, "application/json").map_err(|e| offline(e.into()))?;
    let urls: Vec<String> = serde_json::from_slice(&body).map_err(|e| {
        offline(Box::new(UnexpectedAnswer {
            api: api.clone(),
            source: e,
        }))
    })?;
    if urls.is_empty() {
        return Err(offline(format!("{api} lists no Parquet file").into()));
    }
    std::fs::create_dir_all(dir).map_err(io_at(dir))?;
    let mut files = Vec::new();
    for (i, url) in urls.iter().enumerate() {
        // Named after the URL: a shard already here (written whole, atomically) is not
        // downloaded again.
        let f = dir.join(format!(
            "{i:04}-{}.parquet",
            &dojo_cache::sha256_hex(url)[..16]
        ));
        if !f.is_file() {
            let bytes = dojo_cache::http_get(url, "*/*").map_err(|e| offline(e.into()))?;
            dojo_rundir::write_atomic(&f, &bytes).map_err(io_at(&f))?;
        }
        files.push(f);
    }
    Ok(files)
}

/// What normalising produced.
#[derive(Debug, Default)]
pub struct FetchReport {
    pub written: usize,
    /// Rows that are not valid tasks (each error names file, row, instance and field).
    pub invalid: Vec<String>,
    pub duplicates: usize,
}

/// `dojo tasks fetch NAME`: the dataset's tasks (from `from`, else from the hub, downloaded
/// once under `$DOJO_HOME/datasets`) normalised into `out`. Returns the hub id, the split
/// (`split`, else the dataset's usual one) and what was written.
pub fn fetch_dataset(
    name: &str,
    out: &Path,
    from: &[PathBuf],
    split: Option<String>,
) -> Result<(String, String, FetchReport), TaskError> {
    let (hf_id, default_split) = dataset(name)?;
    let split = split.unwrap_or(default_split);
    let inputs = if from.is_empty() {
        // Kept under $DOJO_HOME: a second fetch (another --out) needs no download.
        let dir = dojo_cache::dojo_home()
            .join("datasets")
            .join(hf_id.replace('/', "__"))
            .join(&split);
        download_from_hub(&hf_id, &split, &dir)?
    } else {
        from.to_vec()
    };
    let rep = normalise(&inputs, out)?;
    Ok((hf_id, split, rep))
}

impl FetchReport {
    /// What `dojo tasks fetch` prints: the count written to `out` of `hf_id` (`split`), then the
    /// first invalid rows.
    pub fn summary(&self, out: &Path, hf_id: &str, split: &str) -> String {
        let mut lines = vec![format!(
            "{}: {} tasks of {hf_id} ({split}); {} invalid row(s), {} duplicate(s) left out",
            out.display(),
            self.written,
            self.invalid.len(),
            self.duplicates
        )];
        lines.extend(self.invalid.iter().take(5).map(|e| format!("  {e}")));
        lines.join("\n")
    }
}

/// Read every task of `inputs` (JSONL, JSON or Parquet) and write the valid ones to `out` as
/// dojo's task JSONL: one row per line, every field kept, `FAIL_TO_PASS` / `PASS_TO_PASS` as
/// JSON arrays, the first of duplicated `instance_id`s kept.
pub fn normalise(inputs: &[PathBuf], out: &Path) -> Result<FetchReport, TaskError> {
    let mut rep = FetchReport::default();
    let mut seen = std::collections::HashSet::new();
    // The tasks are in memory already (read_tasks loads whole files): the output is built there
    // too and written once, atomically, so a failure leaves `out` as it was.
    let mut w = Vec::new();
    let out_err = |source| TaskError::Io {
        path: out.display().to_string(),
        source,
    };
    for f in inputs {
        let loaded = read_tasks(f)?;
        rep.invalid
            .extend(loaded.errors.iter().map(ToString::to_string));
        for t in loaded.tasks {
            if !seen.insert(t.instance_id.clone()) {
                rep.duplicates += 1;
                continue;
            }
            let mut row = t.raw.clone();
            for (field, list) in [("FAIL_TO_PASS", t.f2p()), ("PASS_TO_PASS", t.p2p())] {
                if row.get(field).is_some_and(|v| !v.is_null()) {
                    let arr = list.iter().cloned().map(Value::String).collect();
                    row.insert(field.to_string(), Value::Array(arr));
                }
            }
            serde_json::to_writer(&mut w, &row).map_err(|e| out_err(e.into()))?;
            w.write_all(b"\n").map_err(out_err)?;
            rep.written += 1;
        }
    }
    dojo_rundir::write_atomic(out, &w).map_err(out_err)?;
    Ok(rep)
}

/// GitHub, where `dojo repos sync` clones from by default.
pub const GITHUB: &str = "https://github.com";

/// The SWE-bench organisation's smaller mirrors of the repositories whose upstream history is
/// too large to bring to most machines: each holds every base and environment-setup commit of
/// SWE-bench (Verified, Lite, full) in a fraction of the upstream's size (django 250 MB,
/// matplotlib 444 MB, scikit-learn 160 MB). The other SWE-bench repositories come from
/// upstream.
pub const SWE_BENCH_MIRRORS: &[(&str, &str)] = &[
    ("django/django", "swe-bench/django__django"),
    ("matplotlib/matplotlib", "swe-bench/matplotlib__matplotlib"),
    (
        "scikit-learn/scikit-learn",
        "swe-bench/scikit-learn__scikit-learn",
    ),
];

/// Where `dojo repos sync` takes a repository from.
#[derive(Debug, Clone)]
pub enum RepoSource {
    /// `{base}/{owner}/{name}.git` (default [`GITHUB`], where the repositories of
    /// [`SWE_BENCH_MIRRORS`] come from their SWE-bench mirrors).
    Url(String),
    /// A directory holding a clone or mirror per repository, laid out as `--repos` is
    /// (`owner__name` or `name`).
    Dir(PathBuf),
}

impl RepoSource {
    /// `--from`: an existing directory, else a URL base; GitHub without one.
    pub fn parse(from: Option<&str>) -> RepoSource {
        match from {
            Some(f) if Path::new(f).is_dir() => RepoSource::Dir(PathBuf::from(f)),
            Some(f) => RepoSource::Url(f.trim_end_matches('/').to_string()),
            None => RepoSource::Url(GITHUB.into()),
        }
    }

    /// The clone URL or directory of `repo`.
    pub fn locate(&self, repo: &str) -> Result<String, TaskError> {
        match self {
            RepoSource::Url(base) => {
                let mirrored = SWE_BENCH_MIRRORS
                    .iter()
                    .find(|(upstream, _)| upstream.eq_ignore_ascii_case(repo))
                    .map(|(_, m)| *m)
                    .filter(|_| base == GITHUB);
                Ok(format!("{base}/{}.git", mirrored.unwrap_or(repo)))
            }
            RepoSource::Dir(d) => crate::find_repo(d, repo)
                .map(|p| p.display().to_string())
                .map_err(|e| match e {
                    TaskError::NoRepo { repo, at, or, .. } => TaskError::NoRepo {
                        repo,
                        at,
                        or,
                        via: " (--from)",
                    },
                    e => e,
                }),
        }
    }
}

/// What syncing one repository did.
#[derive(Debug)]
pub struct RepoSync {
    pub repo: String,
    pub mirror: PathBuf,
    /// "cloned" or "fetched", or the error.
    pub result: Result<&'static str, TaskError>,
    /// Commits the tasks need that the mirror lacks, each with what needs it (`base of
    /// django__django-11099`, `environment setup of …`: the first task that does).
    pub missing_commits: Vec<MissingCommit>,
}

/// A commit a task needs that a mirror lacks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MissingCommit {
    pub commit: String,
    /// `base` or `environment setup`.
    pub role: &'static str,
    pub instance_id: String,
}

impl std::fmt::Display for MissingCommit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({} of {})", self.commit, self.role, self.instance_id)
    }
}

impl RepoSync {
    /// Synced, and holding every commit the tasks need.
    pub fn ready(&self) -> bool {
        self.result.is_ok() && self.missing_commits.is_empty()
    }
}

impl std::fmt::Display for RepoSync {
    /// The `dojo repos sync` line of one repository: what was done, or what is wrong.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (&self.result, self.missing_commits.first()) {
            (Ok(what), None) => write!(f, "{}: {what} → {}", self.repo, self.mirror.display()),
            (Ok(what), Some(_)) => {
                const SHOWN: usize = 5;
                let shown: Vec<String> = self
                    .missing_commits
                    .iter()
                    .take(SHOWN)
                    .map(ToString::to_string)
                    .collect();
                let more = self.missing_commits.len().saturating_sub(SHOWN);
                write!(
                    f,
                    "{}: {what} → {}, but it lacks {} commit(s) the tasks need: {}{}",
                    self.repo,
                    self.mirror.display(),
                    self.missing_commits.len(),
                    shown.join(", "),
                    if more > 0 {
                        format!(" and {more} more")
                    } else {
                        String::new()
                    }
                )
            }
            (Err(e), _) => write!(f, "{}: FAILED: {e}", self.repo),
        }
    }
}

/// The last line of `dojo repos sync` into `mirror`: repositories, how many are ready.
pub fn sync_summary(results: &[RepoSync], mirror: &Path) -> String {
    format!(
        "{} repositories, {} ready; use --repos {}",
        results.len(),
        results.iter().filter(|r| r.ready()).count(),
        mirror.display()
    )
}

/// Make (or update) a bare mirror `mirror/owner__name` of every repository of `tasks`, then
/// check that it holds each task's `base_commit` and `environment_setup_commit`. The directory
/// is then what `--repos` takes.
pub fn sync_repos(tasks: &[crate::Task], mirror: &Path, from: &RepoSource) -> Vec<RepoSync> {
    // Per repository: each commit with the first task that needs it, and as what.
    type Needs<'a> = Vec<(&'a str, &'static str, &'a str)>;
    let mut by_repo: std::collections::BTreeMap<&str, Needs> = Default::default();
    for t in tasks.iter().filter(|t| t.sdist().is_none()) {
        let v = by_repo.entry(t.repo.as_str()).or_default();
        v.push((&t.base_commit, "base", &t.instance_id));
        if !t.environment_setup_commit.is_empty() {
            v.push((
                &t.environment_setup_commit,
                "environment setup",
                &t.instance_id,
            ));
        }
    }
    let mut out = Vec::new();
    for (repo, commits) in by_repo {
        let dest = mirror.join(repo.replace('/', "__"));
        let result = sync_one(repo, &dest, from);
        let mut missing: Vec<MissingCommit> = Vec::new();
        if result.is_ok() {
            let mut checked = std::collections::HashSet::new();
            for (c, role, id) in commits {
                if !checked.insert(c) {
                    continue;
                }
                let ok = git(&dest)
                    .args(["cat-file", "-e", &format!("{c}^{{commit}}")])
                    .output()
                    .is_ok_and(|o| o.status.success());
                if !ok {
                    missing.push(MissingCommit {
                        commit: c.to_string(),
                        role,
                        instance_id: id.to_string(),
                    });
                }
            }
        }
        out.push(RepoSync {
            repo: repo.to_string(),
            mirror: dest,
            result,
            missing_commits: missing,
        });
    }
    out
}

fn git(dir: &Path) -> Command {
    let mut c = Command::new("git");
    c.arg("-C")
        .arg(dir)
        .env("GIT_TERMINAL_PROMPT", "0")
        .stdin(std::process::Stdio::null());
    c
}

fn sync_one(repo: &str, dest: &Path, from: &RepoSource) -> Result<&'static str, TaskError> {
    use crate::prepare::run;
    if dest.join("HEAD").is_file() || dest.join(".git").exists() {
        run(
            git(dest).args(["remote", "update", "--prune"]),
            &format!("fetching {repo} into {}", dest.display()),
        )?;
        return Ok("fetched");
    }
    let src = from.locate(repo)?;
    if let Some(parent) = dest.parent() {
        std::fs::create_dir_all(parent).map_err(|source| TaskError::Io {
            path: parent.display().to_string(),
            source,
        })?;
    }
    run(
        Command::new("git")
            .env("GIT_TERMINAL_PROMPT", "0")
            .args(["clone", "--mirror", "--quiet", &src])
            .arg(dest),
        &format!("mirroring {repo} from {src}"),
    )?;
    Ok("cloned")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dataset_names() {
        let e = dataset("swe-bench-verifed").unwrap_err().to_string();
        assert!(
            e.contains("swe-bench-verified") && e.contains("owner/name"),
            "{e}"
        );
        assert_eq!(
            dataset("SWE-bench_Verified").unwrap().0,
            "princeton-nlp/SWE-bench_Verified"
        );
        assert_eq!(
            dataset("swe-bench-verified").unwrap(),
            ("princeton-nlp/SWE-bench_Verified".into(), "test".into())
        );
        assert_eq!(dataset("SWE_Gym").unwrap().0, "SWE-Gym/SWE-Gym");
        assert_eq!(dataset("princeton-nlp/SWE-bench_Lite").unwrap().1, "test");
        assert_eq!(
            dataset("me/mine").unwrap(),
            ("me/mine".into(), "test".into())
        );
    }

    /// No hub reachable (a closed loopback port stands for it): the error names the dataset,
    /// the endpoint and `--from`.
    #[test]
    fn unreachable_hub_is_a_clear_error() {
        let d = tempfile::tempdir().unwrap();
        // A port nothing listens on: bind one, note it, close it.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let e = download_at(&format!("http://127.0.0.1:{port}"), "a/b", "test", d.path())
            .unwrap_err()
            .to_string();
        for want in ["a/b", "127.0.0.1", "--from"] {
            assert!(e.contains(want), "{want:?} missing: {e}");
        }
    }

    /// A local file of rows in the hub's shapes (lists as JSON strings, a duplicate, a broken
    /// row) becomes task JSONL that loads strictly.
    #[test]
    fn normalise_a_local_file() {
        let d = tempfile::tempdir().unwrap();
        let src = d.path().join("in.jsonl");
        std::fs::write(
            &src,
            concat!(
                r#"{"instance_id":"a__b-1","repo":"a/b","base_commit":"c1","patch":"p","FAIL_TO_PASS":"[\"t::x\"]","PASS_TO_PASS":"[]","version":"1.0","extra":7}"#,
                "\n",
                r#"{"instance_id":"a__b-1","repo":"a/b","base_commit":"c1","patch":"p"}"#,
                "\n",
                r#"{"instance_id":"a__b-2","repo":"a/b","patch":"p"}"#,
                "\n",
            ),
        )
        .unwrap();
        let out = d.path().join("out.jsonl");
        let rep = normalise(&[src], &out).unwrap();
        assert_eq!((rep.written, rep.duplicates, rep.invalid.len()), (1, 1, 1));
        assert!(rep.invalid[0].contains("a__b-2") && rep.invalid[0].contains("base_commit"));
        let tasks = crate::load_tasks(&out).unwrap();
        assert_eq!(tasks[0].f2p(), ["t::x"]);
        let text = std::fs::read_to_string(&out).unwrap();
        assert!(text.contains(r#""FAIL_TO_PASS":["t::x"]"#) && text.contains(r#""extra":7"#));
        assert!(!d.path().join("out.jsonl.part").exists());
    }

    fn sh(dir: &Path, args: &[&str]) -> String {
        let o = Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(["-c", "user.name=t", "-c", "user.email=t@t"])
            .args(args)
            .output()
            .unwrap();
        assert!(o.status.success(), "{args:?}: {o:?}");
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    }

    /// Mirrors made from local repositories (`--from DIR`), updated by a second sync, checked
    /// for the tasks' commits; a repository the source lacks is an error naming it.
    #[test]
    fn sync_mirrors_from_local_repositories() {
        let d = tempfile::tempdir().unwrap();
        let src = d.path().join("src");
        let mut commits = Vec::new();
        for name in ["o__one", "two"] {
            let r = src.join(name);
            std::fs::create_dir_all(&r).unwrap();
            sh(&r, &["init", "-q"]);
            std::fs::write(r.join("f.txt"), name).unwrap();
            sh(&r, &["add", "."]);
            sh(&r, &["commit", "-qm", "one"]);
            commits.push(sh(&r, &["rev-parse", "HEAD"]));
        }
        let row = |id: &str, repo: &str, c: &str| serde_json::json!({"instance_id": id, "repo": repo, "base_commit": c, "patch": "p"});
        let tasks_file = d.path().join("t.jsonl");
        let rows = [
            row("o__one-1", "o/one", &commits[0]),
            row("o__two-1", "o/two", &commits[1]),
            row(
                "o__two-2",
                "o/two",
                "0000000000000000000000000000000000000000",
            ),
            row("x__three-1", "x/three", &commits[1]),
        ];
        std::fs::write(
            &tasks_file,
            rows.iter().map(|r| format!("{r}\n")).collect::<String>(),
        )
        .unwrap();
        let tasks = crate::load_tasks(&tasks_file).unwrap();
        let mirror = d.path().join("mirror");
        let from = RepoSource::parse(Some(src.to_str().unwrap()));
        let r = sync_repos(&tasks, &mirror, &from);
        let by: std::collections::BTreeMap<_, _> = r.iter().map(|s| (s.repo.as_str(), s)).collect();
        assert_eq!(by["o/one"].result.as_ref().ok(), Some(&"cloned"));
        assert!(by["o/one"].missing_commits.is_empty());
        assert_eq!(
            by["o/two"].missing_commits,
            [MissingCommit {
                commit: "0000000000000000000000000000000000000000".into(),
                role: "base",
                instance_id: "o__two-2".into()
            }]
        );
        let e = by["x/three"].result.as_ref().unwrap_err().to_string();
        assert!(e.contains("x/three") && e.contains("--from"), "{e}");
        // The mirror is what --repos takes.
        assert_eq!(
            crate::find_repo(&mirror, "o/one").unwrap(),
            mirror.join("o__one")
        );
        // A new upstream commit arrives with the next sync.
        let one = src.join("o__one");
        std::fs::write(one.join("f.txt"), "changed").unwrap();
        sh(&one, &["commit", "-qam", "two"]);
        let new = sh(&one, &["rev-parse", "HEAD"]);
        let r = sync_repos(&tasks, &mirror, &from);
        assert_eq!(r[0].result.as_ref().ok(), Some(&"fetched"));
        sh(
            &mirror.join("o__one"),
            &["cat-file", "-e", &format!("{new}^{{commit}}")],
        );
    }

    /// The three repositories too large to bring from upstream come from SWE-bench's mirrors
    /// (GitHub only: another URL base is taken as given); the others from upstream.
    #[test]
    fn large_swe_bench_repositories_come_from_their_mirrors() {
        let gh = RepoSource::parse(None);
        assert_eq!(
            gh.locate("django/django").unwrap(),
            "https://github.com/swe-bench/django__django.git"
        );
        assert_eq!(
            gh.locate("scikit-learn/scikit-learn").unwrap(),
            "https://github.com/swe-bench/scikit-learn__scikit-learn.git"
        );
        assert_eq!(
            gh.locate("sympy/sympy").unwrap(),
            "https://github.com/sympy/sympy.git"
        );
        let other = RepoSource::parse(Some("https://git.example/"));
        assert_eq!(
            other.locate("django/django").unwrap(),
            "https://git.example/django/django.git"
        );
    }

    #[test]
    fn sync_and_fetch_lines() {
        let r = |result, missing: &[&str]| RepoSync {
            repo: "o/n".into(),
            mirror: PathBuf::from("/m/o__n"),
            result,
            missing_commits: missing
                .iter()
                .map(|c| MissingCommit {
                    commit: c.to_string(),
                    role: "base",
                    instance_id: "o__n-1".into(),
                })
                .collect(),
        };
        let rs = [
            r(Ok("cloned"), &[]),
            r(Ok("fetched"), &["abc", "def"]),
            r(Err(TaskError::Repos("offline".into())), &[]),
        ];
        let lines: Vec<String> = rs.iter().map(|r| r.to_string()).collect();
        assert_eq!(lines[0], "o/n: cloned → /m/o__n");
        assert_eq!(
            lines[1],
            "o/n: fetched → /m/o__n, but it lacks 2 commit(s) the tasks need: abc (base of o__n-1), def (base of o__n-1)"
        );
        assert!(lines[2].starts_with("o/n: FAILED: "), "{}", lines[2]);
        assert_eq!(
            sync_summary(&rs, Path::new("/m")),
            "3 repositories, 1 ready; use --repos /m"
        );
        let rep = FetchReport {
            written: 2,
            invalid: vec!["row 3: no instance_id".into()],
            duplicates: 1,
        };
        assert_eq!(
            rep.summary(Path::new("t.jsonl"), "o/d", "test"),
            "t.jsonl: 2 tasks of o/d (test); 1 invalid row(s), 1 duplicate(s) left out\n  row 3: no instance_id"
        );
    }
}
