//! Sandbox benchmark: create / first command / reset / diff / teardown of a
//! namespace sandbox side by side with `git clone --shared` + checkout and `cp -a`, on sympy 1.12
//! (large) and flask 3.0.0 (small) sdists; per-command overhead against a bare fork/exec; 64
//! concurrent sandboxes with memory per idle sandbox.
//!
//! `dojo sandbox run --source DIR -- true` as a whole command (a release `dojo` binary, `--dojo
//! PATH`, default `target/release/dojo`) next to `git clone --shared` of the same repository.
//!
//! Run: `cargo run --release -p dojo-bench --no-default-features --example sandbox_bench [-- --out
//! FILE] [--runs N] [--only overhead|cli]` (as root on a host where `dojo sandbox doctor` shows the
//! namespace backend).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use dojo_sandbox::{ExecRequest, Pristine, PristineStore, Sandbox, SandboxOptions, Source};

const SYMPY: (&str, &str, &str) = (
    "https://files.pythonhosted.org/packages/e5/57/3485a1a3dff51bfd691962768b14310dae452431754bfc091250be50dd29/sympy-1.12.tar.gz",
    "ebf595c8dac3e0fdc4152c51878b498396ec7f30e7a914d6071e674d49420fb8",
    "sympy-1.12.tar.gz",
);
const FLASK: (&str, &str, &str) = (
    "https://files.pythonhosted.org/packages/d8/09/c1a7354d3925a3c6c8cfdebf4245bae67d633ffda1ba415add06ffc839c5/flask-3.0.0.tar.gz",
    "cfadcdb638b609361d29ec22360d6070a77d7463dcb3ab08d2c2f2f168845f58",
    "flask-3.0.0.tar.gz",
);

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() {
        f64::NAN
    } else {
        v[v.len() / 2]
    }
}

fn sh(cmd: &str, cwd: &Path) {
    // The pristine trees belong to the sandbox uid: trust them for the baseline's git.
    let cfg = std::env::temp_dir().join("dojo-bench-gitconfig");
    if !cfg.exists() {
        std::fs::write(&cfg, "[safe]\n\tdirectory = *\n").unwrap();
    }
    let st = Command::new("bash")
        .arg("-c")
        .arg(cmd)
        .current_dir(cwd)
        .env("GIT_CONFIG_GLOBAL", &cfg)
        .status()
        .expect("bash");
    assert!(st.success(), "{cmd} failed");
}

#[derive(Default)]
struct Row {
    create: Vec<f64>,
    first: Vec<f64>,
    reset: Vec<f64>,
    diff: Vec<f64>,
    teardown: Vec<f64>,
}

impl Row {
    fn fmt(&self, name: &str) -> String {
        let f = |v: &Vec<f64>| {
            if v.is_empty() {
                "–".to_string()
            } else {
                format!("{:.1}", median(v.clone()))
            }
        };
        format!(
            "| {name} | {} | {} | {} | {} | {} |",
            f(&self.create),
            f(&self.first),
            f(&self.reset),
            f(&self.diff),
            f(&self.teardown)
        )
    }
}

const EDIT: &str = "echo '# bench edit' >> README* 2>/dev/null; echo x > new_file.txt";

async fn bench_sandbox(p: &Pristine, runs: usize) -> Row {
    let mut r = Row::default();
    for _ in 0..runs {
        let t = Instant::now();
        let mut sb = Sandbox::create(p, None, &SandboxOptions::default())
            .await
            .unwrap();
        r.create.push(ms(t.elapsed()));
        let t = Instant::now();
        let out = sb.exec(&ExecRequest::new(["true"])).await.unwrap();
        assert!(out.success());
        r.first.push(ms(t.elapsed()));
        let out = sb.exec(&ExecRequest::shell(EDIT)).await.unwrap();
        assert!(out.success());
        let t = Instant::now();
        let d = sb.diff().await.unwrap();
        r.diff.push(ms(t.elapsed()));
        assert!(d.contains("new_file.txt"));
        let t = Instant::now();
        sb.reset().await.unwrap();
        r.reset.push(ms(t.elapsed()));
        let t = Instant::now();
        sb.teardown().await.unwrap();
        r.teardown.push(ms(t.elapsed()));
    }
    dojo_sandbox::trash::flush();
    r
}

fn bench_clone(p: &Pristine, scratch: &Path, runs: usize) -> Row {
    let mut r = Row::default();
    for i in 0..runs {
        let ws = scratch.join(format!("clone-{i}"));
        let t = Instant::now();
        sh(
            &format!(
                "git clone -q --shared --no-checkout {} {} && git -C {} checkout -q dojo-base",
                p.path.display(),
                ws.display(),
                ws.display()
            ),
            scratch,
        );
        r.create.push(ms(t.elapsed()));
        let t = Instant::now();
        let st = Command::new("true").current_dir(&ws).status().unwrap();
        assert!(st.success());
        r.first.push(ms(t.elapsed()));
        sh(EDIT, &ws);
        let t = Instant::now();
        sh(
            "git add -A && git diff --cached --binary dojo-base >/dev/null && git reset -q",
            &ws,
        );
        r.diff.push(ms(t.elapsed()));
        let t = Instant::now();
        sh("git reset -q --hard dojo-base && git clean -fdxq", &ws);
        r.reset.push(ms(t.elapsed()));
        let t = Instant::now();
        std::fs::remove_dir_all(&ws).unwrap();
        r.teardown.push(ms(t.elapsed()));
    }
    r
}

fn bench_cp(p: &Pristine, scratch: &Path, runs: usize) -> Row {
    let mut r = Row::default();
    for i in 0..runs {
        let ws = scratch.join(format!("cp-{i}"));
        let t = Instant::now();
        sh(
            &format!("cp -a {} {}", p.path.display(), ws.display()),
            scratch,
        );
        r.create.push(ms(t.elapsed()));
        let t = Instant::now();
        std::fs::remove_dir_all(&ws).unwrap();
        r.teardown.push(ms(t.elapsed()));
    }
    r
}

fn pss_kb(pid: i32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Pss:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// A `Private_*`-style total (KiB) from smaps_rollup.
fn smaps_kb(pid: i32, prefix: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        .sum()
}

/// `true` issued back to back (no pause: a pre-warmed sandbox's next command may arrive before
/// its spare is re-armed), mean per command, the three ways in turn.
async fn back_to_back(warm: &Sandbox, cold: &Sandbox, n: usize) -> String {
    let req = ExecRequest::new(["/usr/bin/true"]);
    let (mut b, mut w, mut c) = (0.0, 0.0, 0.0);
    for _ in 0..3 {
        let t = Instant::now();
        for _ in 0..n {
            let o = tokio::process::Command::new("/usr/bin/true")
                .output()
                .await
                .unwrap();
            assert!(o.status.success());
        }
        b += ms(t.elapsed());
        for (sb, acc) in [(warm, &mut w), (cold, &mut c)] {
            let t = Instant::now();
            for _ in 0..n {
                assert!(sb.exec(&req).await.unwrap().success());
            }
            *acc += ms(t.elapsed());
        }
    }
    let per = |x: f64| x / (3 * n) as f64;
    format!(
        "Back to back (`true`, {n} in a row, 3 rounds interleaved, mean per command): bare {:.2} ms, \
         launcher {:.2} ms ({:.2}×), launcher cold {:.2} ms ({:.2}×).\n\n",
        per(b),
        per(w),
        w / b,
        per(c),
        c / b,
    )
}

/// What the idle pre-warmed supervisor costs: the launcher's child in `warm` (none in `cold`).
fn spare_memory(warm: &Sandbox, cold: &Sandbox) -> String {
    std::thread::sleep(Duration::from_millis(200));
    let (w, c) = (launcher_children(warm), launcher_children(cold));
    let Some(&spare) = w.first() else {
        return "Pre-warmed supervisor: none found (launcher not running?).\n\n".into();
    };
    let cg = match (warm.memory_usage(), cold.memory_usage()) {
        (Some(a), Some(b)) => format!(
            "; cgroup-charged memory of the idle sandbox {:.0} KiB with the spares vs {:.0} KiB without \
             (includes page cache; kernel objects of the extra pid + mount namespaces and /proc are \
             counted only where kmem accounting is on)",
            a as f64 / 1024.0,
            b as f64 / 1024.0
        ),
        _ => String::new(),
    };
    format!(
        "Memory of one idle pre-warmed supervisor, with the command process it started ahead \
         (which shares its memory; the launcher has {} such child(ren) in the warm sandbox, {} in \
         the cold one): {} KiB private (Private_Clean + Private_Dirty), {} KiB page tables, {} KiB \
         PSS (its pages shared with the launcher counted half){cg}.\n\n",
        w.len(),
        c.len(),
        smaps_kb(spare, "Private_"),
        vm_pte_kb(spare),
        pss_kb(spare),
    )
}

/// `VmPTE` (page tables, KiB) of a process.
fn vm_pte_kb(pid: i32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("VmPTE:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0)
}

/// Pids of the holder, its parent (the waiter it was forked from) and its children (the
/// pre-warmed supervisor).
fn holder_pids(sb: &Sandbox) -> Vec<i32> {
    let Some(c) = sb.holder_pid() else {
        return vec![];
    };
    let ppid = std::fs::read_to_string(format!("/proc/{c}/stat"))
        .ok()
        .and_then(|s| {
            s[s.rfind(')')? + 2..]
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()
        });
    std::iter::once(c)
        .chain(ppid)
        .chain(launcher_children(sb))
        .collect()
}

/// Direct children of a sandbox's pid 1 (idle: the pre-warmed supervisor).
fn launcher_children(sb: &Sandbox) -> Vec<i32> {
    let Some(l) = sb.holder_pid() else {
        return vec![];
    };
    std::fs::read_to_string(format!("/proc/{l}/task/{l}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

/// Wall time and CPU time (user + system of the process and the descendants it waited for),
/// ms.
#[derive(Default)]
struct Cost {
    wall: Vec<f64>,
    cpu: Vec<f64>,
}

impl Cost {
    fn time(&mut self, f: impl FnOnce()) {
        let (t, c) = (Instant::now(), dojo_bench::children_cpu_time());
        f();
        self.wall.push(ms(t.elapsed()));
        self.cpu.push(ms(dojo_bench::children_cpu_time() - c));
    }
}

/// Runs `dojo sandbox run --source DIR -- true`: the whole command (process start, recognising
/// the pristine tree, sandbox create, command, teardown).
fn dojo_run(dojo: &Path, src: &Path) {
    let out = Command::new(dojo)
        .args(["sandbox", "run", "--source"])
        .arg(src)
        .args(["--", "true"])
        .output()
        .expect("running dojo");
    assert!(
        out.status.success(),
        "dojo sandbox run failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Set every file's mtime to what it already is: content unchanged, ctime new, so the stat
/// index no longer vouches for any file and the next call reads them all (what every call did
/// before the index).
fn invalidate_stat(src: &Path) {
    for e in walkdir::WalkDir::new(src)
        .into_iter()
        .filter_entry(|e| e.file_name() != ".git")
        .flatten()
    {
        if e.file_type().is_file() {
            let m = e.metadata().unwrap().modified().unwrap();
            let f = std::fs::File::options().write(true).open(e.path()).unwrap();
            f.set_modified(m).unwrap();
        }
    }
}

/// Files under `src` that one `dojo sandbox run` opens (`strace -f -e openat`), or `None`
/// without strace.
fn files_opened(dojo: &Path, src: &Path, scratch: &Path) -> Option<usize> {
    let log = scratch.join("strace.log");
    let st = Command::new("strace")
        .args(["-f", "-qq", "-e", "trace=openat,open", "-o"])
        .arg(&log)
        .arg(dojo)
        .args(["sandbox", "run", "--source"])
        .arg(src)
        .args(["--", "true"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .ok()?;
    if !st.success() {
        return None;
    }
    let text = std::fs::read_to_string(&log).ok()?;
    let prefix = format!("\"{}/", src.display());
    Some(
        text.lines()
            .filter(|l| l.contains(&prefix) && !l.contains("O_DIRECTORY") && !l.contains("= -1"))
            .count(),
    )
}

/// `dojo sandbox run --source DIR -- true` as a whole command (a release `dojo`), on a git
/// repository of the sympy sdist, next to `git clone --shared` of that repository, interleaved.
async fn bench_cli(cache: &dojo_cache::Cache, dojo: &Path, scratch: &Path, runs: usize) -> String {
    let sdist = cache
        .fetch(SYMPY.0, SYMPY.1, SYMPY.2)
        .expect("download sdist");
    let work = scratch.join("cli");
    std::fs::create_dir_all(&work).unwrap();
    sh(
        &format!(
            "tar --no-same-owner -xzf {} && cd sympy-1.12 && git init -q && git add -A && \
             git -c user.name=bench -c user.email=bench@localhost commit -qm sympy-1.12",
            sdist.display()
        ),
        &work,
    );
    let src = work.join("sympy-1.12");
    let files = walk_count(&src);
    let t = Instant::now();
    dojo_run(dojo, &src);
    eprintln!(
        "cli: first call {:.0} ms (builds the pristine tree unless cached)",
        ms(t.elapsed())
    );
    let (mut hit, mut full, mut clone) = (Cost::default(), Cost::default(), Cost::default());
    for i in 0..runs {
        std::thread::sleep(Duration::from_millis(3));
        hit.time(|| dojo_run(dojo, &src));
        invalidate_stat(&src);
        std::thread::sleep(Duration::from_millis(3));
        full.time(|| dojo_run(dojo, &src));
        let ws = work.join(format!("clone-{i}"));
        std::thread::sleep(Duration::from_millis(3));
        clone.time(|| {
            sh(
                &format!("git clone -q --shared {} {}", src.display(), ws.display()),
                &work,
            )
        });
        std::fs::remove_dir_all(&ws).unwrap();
    }
    let opened_hit = files_opened(dojo, &src, &work);
    invalidate_stat(&src);
    let opened_full = files_opened(dojo, &src, &work);
    let _ = std::fs::remove_dir_all(&work);
    let min = |v: &[f64]| v.iter().cloned().fold(f64::MAX, f64::min);
    let (cw, cc) = (median(clone.wall.clone()), median(clone.cpu.clone()));
    let row = |name: &str, c: &Cost, opened: Option<usize>| {
        let (w, u) = (median(c.wall.clone()), median(c.cpu.clone()));
        format!(
            "| {name} | {w:.1} ({:.1}) | {u:.1} | {} | {:.1}× | {:.1}× |\n",
            min(&c.wall),
            opened.map_or("–".to_string(), |n| n.to_string()),
            cw / w,
            cc / u
        )
    };
    let mut md = format!(
        "## `dojo sandbox run --source DIR -- true`, whole command (sympy 1.12, {files} files)\n\n\
         A git repository of the sympy 1.12 sdist (`git init` + one commit); a release `dojo` \
         (`--no-default-features`). Wall time of the whole process (start, recognising the pristine tree, sandbox \
         create, `true`, teardown), medians (min) of {runs} interleaved runs, ms. `unchanged`: \
         the stat index beside the pristine cache recognises the tree (one readdir + lstat \
         pass, no file read). `every file read`: each file's ctime changed first (its mtime set \
         to itself), so every file is read and hashed again, which is what every call cost \
         before the index. Files opened under the source: one run under `strace -f -e openat`. \
         `git clone --shared` (with checkout) of the same repository in the same loop. CPU: \
         user + system time of the command and every process it waited for (`RUSAGE_CHILDREN`), \
         less sensitive to a loaded machine than wall time. {}\n\n\
         | method | wall | CPU | files opened under the source | wall speed-up over clone | CPU ratio |\n|---|---|---|---|---|---|\n",
        dojo_bench::host_line()
    );
    md.push_str(&row(
        "`dojo sandbox run`, unchanged source",
        &hit,
        opened_hit,
    ));
    md.push_str(&row(
        "`dojo sandbox run`, every file read",
        &full,
        opened_full,
    ));
    md.push_str(&row("`git clone --shared` + checkout", &clone, None));
    md.push_str(&format!(
        "\nWhole-command speed-up over `git clone --shared`: **{:.1}×** wall, {:.1}× CPU (target ≥ 10×).\n\n",
        cw / median(hit.wall.clone()),
        cc / median(hit.cpu.clone())
    ));
    md
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |k: &str| {
        args.iter()
            .position(|a| a == k)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let runs: usize = arg("--runs").and_then(|r| r.parse().ok()).unwrap_or(7);
    // `--only overhead`: just the per-command section (quick to re-measure).
    let only = arg("--only");
    let out_file = arg("--out").map(PathBuf::from);
    // The release `dojo` binary for the whole-command section.
    let dojo = arg("--dojo").map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../target/release/dojo"
        ))
    });
    let cache = dojo_cache::Cache::open().expect("cache");
    let store = PristineStore::open().expect("store");
    let scratch = std::env::temp_dir().join(format!("dojo-bench-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).unwrap();
    let mut md = String::new();
    md.push_str("# Sandbox benchmarks (dojo-sandbox)\n\n");
    md.push_str(&format!(
        "Reproduce: `cargo run --release -p dojo-bench --no-default-features --example sandbox_bench -- --runs {runs} --out benchmarks/results/sandbox.md` (as root; add `--only overhead` for just the per-command table, `--only cli` for the whole `dojo sandbox run` command; that one needs a release `dojo` first: `cargo build --release -p dojo-cli --no-default-features`).\n\n"
    ));
    md.push_str(&format!(
        "Host: kernel {}, {} CPUs, shared with other jobs (noisy). Medians of {runs} runs, milliseconds, warm page cache. \
         Sandbox = namespace backend (user/mount/pid/net ns, overlayfs userxattr with the upper dir on a 2 GiB-capped tmpfs, Landlock, seccomp, cgroup {}). \
         `first` = running `true` (sandbox: through the in-sandbox launcher: fresh pid ns, Landlock+seccomp). \
         `diff` after appending to README and adding a file. `reset` = sandbox: fresh holder over a new upper dir; clone: `git reset --hard && git clean -fdxq`.\n\n",
        std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim(),
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        dojo_sandbox::cgroup::detect().map(|c| c.version()).unwrap_or("none"),
    ));
    if only.as_deref() == Some("cli") {
        let section = bench_cli(&cache, &dojo, &scratch, runs).await;
        let _ = std::fs::remove_dir_all(&scratch);
        print!("{section}");
        if let Some(f) = out_file {
            std::fs::write(&f, &section).unwrap();
        }
        return;
    }
    let trees = if only.is_some() {
        Vec::new()
    } else {
        vec![("sympy 1.12", SYMPY), ("flask 3.0.0", FLASK)]
    };
    for (name, (url, sha, file)) in trees {
        let sdist = cache.fetch(url, sha, file).expect("download sdist");
        let t = Instant::now();
        let p = store
            .build(&Source::Archive { path: sdist })
            .expect("pristine");
        let build = t.elapsed();
        let files = walk_count(&p.path);
        eprintln!(
            "{name}: pristine ready ({:.0} ms incl. cache hit, {files} files)",
            ms(build)
        );
        let sbx = bench_sandbox(&p, runs).await;
        let clone = bench_clone(&p, &scratch, runs);
        let cp = bench_cp(&p, &scratch, runs);
        md.push_str(&format!("## {name} ({files} files)\n\n"));
        md.push_str("| method | create | first command | reset | diff | teardown |\n|---|---|---|---|---|---|\n");
        md.push_str(&sbx.fmt("dojo sandbox (overlay)"));
        md.push('\n');
        md.push_str(&clone.fmt("`git clone --shared` + checkout"));
        md.push('\n');
        md.push_str(&cp.fmt("`cp -a`"));
        md.push('\n');
        let speedup = median(clone.create.clone()) / median(sbx.create.clone());
        md.push_str(&format!(
            "\nCreate speed-up over `git clone --shared`: **{speedup:.1}×** (target ≥ 50× on sympy).\n\n"
        ));
        eprintln!("{name} done");
    }
    if only.is_none() {
        md.push_str(&bench_cli(&cache, &dojo, &scratch, runs).await);
    }

    // Per-command overhead against a bare fork/exec (tokio `Command`, i.e. posix_spawn) of the
    // same command, interleaved in the same process: through the in-sandbox launcher (what
    // `Sandbox::exec` uses) and by joining the namespaces per command (`setns`, what a
    // re-attached kept sandbox and `Sandbox::spawn` use). Then the same with the caller holding
    // 512 MB (like `dojo rollout` with the embedded engine): the setns path forks the caller.
    let p = store
        .build(&Source::Archive {
            path: cache.fetch(FLASK.0, FLASK.1, FLASK.2).unwrap(),
        })
        .unwrap();
    md.push_str(
        "## Per-command overhead\n\n\
         Medians (min in parentheses) of interleaved runs, ms. `launcher`: `Sandbox::exec` (a \
         request to the sandbox's in-sandbox launcher; a supervisor pre-warmed while idle, already \
         pid 1 of a fresh pid + mount namespace with its own /proc, takes it and forks the command \
         with Landlock, seccomp, rlimits). `cold`: the same launcher with pre-warming off (it forks \
         the supervisor and builds its namespaces after the request arrives). `setns`: joining the \
         namespaces per command (kept sandboxes re-attached by id, `Sandbox::spawn`). Bare: tokio \
         `Command` of the same binary on the host. Ratios of medians; min ratio in brackets.\n\n\
         | caller RSS | command | bare fork/exec | launcher | ratio | launcher, cold | ratio | setns join | ratio |\n|---|---|---|---|---|---|---|---|---|\n",
    );
    let mut spare_note = String::new();
    for ballast_mb in [0usize, 512] {
        let ballast = vec![1u8; ballast_mb << 20];
        let opts = SandboxOptions {
            keep: true,
            ..Default::default()
        };
        let sb = Sandbox::create(&p, None, &opts).await.unwrap();
        let joined = Sandbox::attach(sb.id()).await.unwrap();
        dojo_sandbox::set_prewarm(false);
        let cold = Sandbox::create(&p, None, &SandboxOptions::default())
            .await
            .unwrap();
        dojo_sandbox::set_prewarm(true);
        for (label, argv, n) in [
            ("`true`", vec!["/usr/bin/true"], runs * 10),
            (
                "`python3.11 -c pass`",
                vec!["/usr/bin/python3.11", "-c", "pass"],
                runs * 3,
            ),
        ] {
            let (mut bare, mut la, mut lc, mut sj) =
                (Vec::new(), Vec::new(), Vec::new(), Vec::new());
            // Each measurement starts after a short pause, so the background work a previous
            // one left (a supervisor and its namespaces going away, a spare being re-armed)
            // does not land on the next; back-to-back figures are measured separately below.
            let settle = || std::thread::sleep(Duration::from_millis(3));
            for _ in 0..n {
                settle();
                let t = Instant::now();
                let o = tokio::process::Command::new(argv[0])
                    .args(&argv[1..])
                    .output()
                    .await
                    .unwrap();
                assert!(o.status.success());
                bare.push(ms(t.elapsed()));
                for (s, v) in [(&sb, &mut la), (&cold, &mut lc), (&joined, &mut sj)] {
                    settle();
                    let t = Instant::now();
                    assert!(
                        s.exec(&ExecRequest::new(argv.clone()))
                            .await
                            .unwrap()
                            .success()
                    );
                    v.push(ms(t.elapsed()));
                }
            }
            for (name, v) in [
                ("bare", &bare),
                ("launcher", &la),
                ("cold", &lc),
                ("setns", &sj),
            ] {
                let mut v = v.clone();
                v.sort_by(f64::total_cmp);
                let q = |f: f64| v[((v.len() - 1) as f64 * f) as usize];
                eprintln!(
                    "{label} {ballast_mb} MB {name}: p10 {:.2} p25 {:.2} p50 {:.2} p75 {:.2} p90 {:.2}",
                    q(0.1),
                    q(0.25),
                    q(0.5),
                    q(0.75),
                    q(0.9)
                );
            }
            let min = |v: &[f64]| v.iter().cloned().fold(f64::MAX, f64::min);
            let b = median(bare.clone());
            let mb = min(&bare);
            let cell = |v: &[f64]| {
                let (m, lo) = (median(v.to_vec()), min(v));
                format!("{m:.2} ({lo:.2}) | {:.2}× [{:.2}×]", m / b, lo / mb)
            };
            md.push_str(&format!(
                "| {} | {label} | {b:.2} ({mb:.2}) | {} | {} | {} |\n",
                if ballast_mb == 0 {
                    "small".to_string()
                } else {
                    format!("+{ballast_mb} MB")
                },
                cell(&la),
                cell(&lc),
                cell(&sj),
            ));
        }
        if ballast_mb == 0 {
            spare_note = spare_memory(&sb, &cold);
            spare_note.push_str(&back_to_back(&sb, &cold, runs * 10).await);
        }
        sb.detach();
        joined.teardown().await.unwrap();
        cold.teardown().await.unwrap();
        drop(ballast);
    }
    md.push('\n');
    md.push_str(&spare_note);

    if only.is_some() {
        print!("{md}");
        if let Some(f) = out_file {
            std::fs::write(&f, &md).unwrap();
        }
        return;
    }
    // 64 concurrent sandboxes.
    let n = 64;
    let t = Instant::now();
    let futs: Vec<_> = (0..n)
        .map(|_| {
            let p = p.clone();
            tokio::spawn(async move { Sandbox::create(&p, None, &SandboxOptions::default()).await })
        })
        .collect();
    let mut sbs = Vec::new();
    for f in futs {
        sbs.push(f.await.unwrap().expect("create"));
    }
    let create_all = t.elapsed();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let pss: u64 = sbs.iter().flat_map(holder_pids).map(pss_kb).sum();
    let cg: Vec<u64> = sbs.iter().filter_map(|s| s.memory_usage()).collect();
    let t = Instant::now();
    let req = ExecRequest::shell("echo ok && git status --short | wc -l");
    let futs: Vec<_> = sbs.iter().map(|s| s.exec(&req)).collect();
    let outs = futures_join(futs).await;
    let run_all = t.elapsed();
    assert!(outs.iter().all(|o| o.as_ref().is_ok_and(|o| o.success())));
    let t = Instant::now();
    for s in sbs {
        s.teardown().await.unwrap();
    }
    let down_all = t.elapsed();
    dojo_sandbox::trash::flush();
    md.push_str(&format!(
        "## {n} concurrent sandboxes (flask)\n\n\
         - create all {n} (concurrently): {:.0} ms\n\
         - one command in each (`git status`), concurrently: {:.0} ms\n\
         - teardown all: {:.0} ms\n\
         - memory per idle sandbox: **{:.0} KiB PSS** (pid 1 = the in-sandbox launcher, a fresh exec of the calling binary, + its pre-warmed supervisor + its waiter, forked from the caller and mostly shared with it){}\n\n",
        ms(create_all),
        ms(run_all),
        ms(down_all),
        pss as f64 / n as f64,
        if cg.is_empty() {
            String::new()
        } else {
            format!(
                "; cgroup-charged memory per idle sandbox (page cache of the overlay metadata included): {:.0} KiB",
                cg.iter().sum::<u64>() as f64 / cg.len() as f64 / 1024.0
            )
        }
    ));
    let _ = std::fs::remove_dir_all(&scratch);
    print!("{md}");
    if let Some(f) = out_file {
        std::fs::write(&f, &md).unwrap();
        eprintln!("wrote {}", f.display());
    }
}

async fn futures_join<F: std::future::Future>(futs: Vec<F>) -> Vec<F::Output> {
    let mut out = Vec::new();
    // Poll all concurrently by spawning nothing: use a simple join over pinned futures.
    let mut pinned: Vec<_> = futs.into_iter().map(Box::pin).collect();
    let mut done: Vec<Option<F::Output>> = (0..pinned.len()).map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut all = true;
        for (i, f) in pinned.iter_mut().enumerate() {
            if done[i].is_none() {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => done[i] = Some(v),
                    std::task::Poll::Pending => all = false,
                }
            }
        }
        if all {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    })
    .await;
    for d in done {
        out.extend(d);
    }
    out
}

fn walk_count(p: &Path) -> usize {
    walkdir::WalkDir::new(p)
        .into_iter()
        .filter_entry(|e| e.file_name() != ".git")
        .flatten()
        .filter(|e| e.file_type().is_file())
        .count()
}
