//! One worker protocol, two workers: every case of the committed conformance corpus
//! (`tests/data/worker_conformance/cases.json`) runs against the Rust worker (`npu-audit __worker
//! JOB.json [--serve]`, on the CPU runtime the tool provisions) and against
//! `src/execution/exec/emulated_worker.py` (the same protocol in Python, run natively here by a host Python
//! with NumPy and the onnxruntime release of the tool's CPU build, in a virtual environment this
//! test makes under the tool's cache from `tests/data/numpy-ort-requirements.txt`). They must
//! agree: the same exit, the same `result.json` but for the fields listed in [`MASKED`] (times,
//! memory and the version's spelling, which emulated_worker.py documents as differing),
//! byte-identical `.npy` outputs and the same frames in `--serve` mode. The few documented
//! differences (an EP other than the CPU's, `delta_root`) are cases of their own, each worker held
//! to its own expectation. Every job, result and ready frame is also checked against
//! `docs/worker.schema.json`, the schema derived from `src/execution/exec/job.rs`, which must be the one the
//! code derives.

use crate::common::{self, repo, venv_python};

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use wait_timeout::ChildExt;

/// The corpus, relative to the repository.
const CORPUS: &str = "tests/data/worker_conformance";

/// Fields of a result (`result.json`, a ready frame's JSON) that are not compared: what the two
/// workers measure differently (import against library load, getrusage of another runtime) and
/// the version's spelling (`onnxruntime.__version__` against `GetVersionString`; both are
/// checked against the catalogue's CPU release instead). Each element of `run_ms` is masked too,
/// its length compared; the run time of an outputs frame likewise.
const MASKED: [&str; 6] = [
    "load_ms",
    "register_ms",
    "session_create_ms",
    "io_ms",
    "peak_rss_mb",
    "ort_version",
];

/// How long a worker may take on one case; a worker still running then is a `hang`.
const CASE_LIMIT: Duration = Duration::from_secs(120);
/// How long a worker injected with `hang` is given before it is called hung.
const HANG_LIMIT: Duration = Duration::from_secs(3);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Rust,
    Python,
}

impl Side {
    fn name(self) -> &'static str {
        match self {
            Side::Rust => "rust",
            Side::Python => "python",
        }
    }
}

/// What both workers need: the CPU runtime the tool provisions, the Python that runs
/// emulated_worker.py.
struct Workers {
    ort: String,
    python: PathBuf,
}

fn workers() -> Workers {
    let out = common::bin()
        .args(["runtime", "path", "cpu"])
        .output()
        .expect("run npu-audit");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the CPU runtime cannot be provisioned: {stderr}");
    let ort = String::from_utf8(out.stdout).expect("utf-8").trim().to_string();
    let python = venv_python("tests/data/numpy-ort-requirements.txt", "numpy-ort");
    Workers { ort, python }
}

/// The release of the tool's CPU build, which both workers must report.
fn cpu_release() -> String {
    npu_audit::execution::runtime::Build::get("cpu")
        .expect("a cpu build")
        .version
        .clone()
}

fn cases() -> Vec<Value> {
    let text = std::fs::read_to_string(repo(CORPUS).join("cases.json")).expect("the corpus's cases.json");
    let doc: Value = serde_json::from_str(&text).expect("cases.json is JSON");
    doc["cases"].as_array().expect("cases").clone()
}

/// The job template of a case with its placeholders replaced.
fn job_text(case: &Value, w: &Workers, out: &Path) -> String {
    let name = case["job"].as_str().expect("job");
    let template = std::fs::read_to_string(repo(CORPUS).join(format!("jobs/{name}.json")))
        .unwrap_or_else(|e| panic!("jobs/{name}.json: {e}"));
    template
        .replace("@REPO@", env!("CARGO_MANIFEST_DIR"))
        .replace("@CORPUS@", &repo(CORPUS).display().to_string())
        .replace("@ORT@", &w.ort)
        .replace("@OUT@", &out.display().to_string())
}

/// The bytes a case writes to a serving worker's standard input.
fn serve_input(steps: &[Value]) -> Vec<u8> {
    let mut bytes = Vec::new();
    for step in steps {
        if let Some(hex) = step["raw"].as_str() {
            bytes.extend(decode_hex(hex));
            continue;
        }
        let pad = decode_hex(step["pad"].as_str().unwrap_or(""));
        let tensors = step["sample"].as_array().expect("sample or raw");
        bytes.push(b'S');
        bytes.extend((tensors.len() as u64).to_le_bytes());
        for t in tensors {
            let (name, file) = (t[0].as_str().unwrap(), t[1].as_str().unwrap());
            let mut npy = std::fs::read(repo(CORPUS).join("inputs").join(file)).expect("corpus input");
            npy.extend(&pad);
            bytes.extend((name.len() as u64).to_le_bytes());
            bytes.extend(name.as_bytes());
            bytes.extend((npy.len() as u64).to_le_bytes());
            bytes.extend(npy);
        }
    }
    bytes
}

fn decode_hex(hex: &str) -> Vec<u8> {
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex"))
        .collect()
}

/// The command that runs one side's worker on `job`.
fn worker_command(side: Side, w: &Workers, job: &Path, serve: bool) -> Command {
    let mut cmd = match side {
        Side::Rust => {
            let mut c = Command::new(assert_cmd::cargo::cargo_bin("npu-audit"));
            c.arg("__worker").arg(job);
            c
        }
        Side::Python => {
            // As runtime::emulation starts it: no user site, no bytecode, one BLAS thread.
            let mut c = Command::new(&w.python);
            c.args(["-s", "-B"])
                .arg(repo("src/execution/exec/emulated_worker.py"))
                .arg(job)
                .env("PYTHONNOUSERSITE", "1")
                .env("PYTHONDONTWRITEBYTECODE", "1")
                .env("OPENBLAS_NUM_THREADS", "1")
                .env("OMP_NUM_THREADS", "1");
            c
        }
    };
    if serve {
        cmd.arg("--serve");
    }
    cmd.env_remove("NPU_AUDIT_FAULT_INJECT");
    cmd
}

/// `cmd` run with `out` on a full file system of its own (a 4 KiB tmpfs, filled, in a mount
/// namespace of the worker's own).
fn on_full_disk(cmd: Command, out: &Path) -> Command {
    const SCRIPT: &str = "mount -t tmpfs -o size=4k npu-audit-full \"$0\" || exit 90; \
                          head -c 65536 /dev/zero > \"$0/fill\" 2>/dev/null; exec \"$@\"";
    let mut wrapped = Command::new("unshare");
    wrapped
        .args(["-rm", "sh", "-c", SCRIPT])
        .arg(out)
        .arg(cmd.get_program());
    wrapped.args(cmd.get_args());
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => wrapped.env(k, v),
            None => wrapped.env_remove(k),
        };
    }
    wrapped
}

/// How a worker ended (a code, `signal N`, `hang`), its standard output and its log.
struct Ended {
    exit: Value,
    stdout: Vec<u8>,
    log: String,
}

fn run_process(mut cmd: Command, stdin: Option<Vec<u8>>, limit: Duration, log: &Path) -> Ended {
    cmd.stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(log).expect("log"));
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    let writer = stdin.map(|bytes| {
        let mut pipe = child.stdin.take().expect("stdin");
        // A worker that stops reading (it failed) makes this fail: its answer is what counts.
        std::thread::spawn(move || {
            let _ = pipe.write_all(&bytes);
        })
    });
    let mut stdout = child.stdout.take().expect("stdout");
    let reader = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = stdout.read_to_end(&mut b);
        b
    });
    let exit = match child.wait_timeout(limit).expect("wait") {
        Some(status) => {
            use std::os::unix::process::ExitStatusExt;
            match (status.code(), status.signal()) {
                (Some(code), _) => json!(code),
                (None, Some(signal)) => json!(format!("signal {signal}")),
                (None, None) => json!("unknown"),
            }
        }
        None => {
            let _ = child.kill();
            let _ = child.wait();
            json!("hang")
        }
    };
    if let Some(w) = writer {
        let _ = w.join();
    }
    let stdout = reader.join().expect("reader");
    let log = std::fs::read_to_string(log).unwrap_or_default();
    Ended { exit, stdout, log }
}

/// One side's run of one case, before normalization.
struct Run {
    ended: Ended,
    result: Option<Value>,
    frames: Vec<Value>,
    files: BTreeMap<String, Value>,
    out: PathBuf,
}

fn run_case(case: &Value, side: Side, w: &Workers, dir: &Path) -> Run {
    let side_dir = dir.join(side.name());
    let out = side_dir.join("out");
    std::fs::create_dir_all(&out).unwrap();
    let job = side_dir.join("job.json");
    std::fs::write(&job, job_text(case, w, &out)).unwrap();
    let steps = case["serve"].as_array();
    let mut cmd = worker_command(side, w, &job, steps.is_some());
    cmd.current_dir(&side_dir);
    if let Some(env) = case["env"].as_object() {
        cmd.envs(env.iter().map(|(k, v)| (k, v.as_str().expect("env value"))));
    }
    if case["no_space"] == true {
        cmd = on_full_disk(cmd, &out);
    }
    let limit = if case["expect"]["exit"] == "hang" {
        HANG_LIMIT
    } else {
        CASE_LIMIT
    };
    let ended = run_process(cmd, steps.map(|s| serve_input(s)), limit, &side_dir.join("worker.log"));
    let result = std::fs::read(out.join("result.json"))
        .ok()
        .map(|b| serde_json::from_slice(&b).expect("result.json is JSON"));
    let frames = if steps.is_some() {
        parse_frames(&ended.stdout)
    } else {
        Vec::new()
    };
    Run {
        result,
        frames,
        files: npy_files(&out),
        out,
        ended,
    }
}

/// Every `.npy` under `out`, by relative path: its size and SHA-256.
fn npy_files(out: &Path) -> BTreeMap<String, Value> {
    let mut files = BTreeMap::new();
    let mut dirs = vec![out.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten() {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "npy") {
                let bytes = std::fs::read(&path).unwrap();
                let rel = path.strip_prefix(out).unwrap().display().to_string();
                files.insert(rel, tensor_bytes(&bytes));
            }
        }
    }
    files
}

/// Bytes compared by size and SHA-256 (byte for byte, without printing them).
fn tensor_bytes(bytes: &[u8]) -> Value {
    json!({"bytes": bytes.len(), "sha256": npu_audit::foundation::hash::sha256_hex(bytes)})
}

/// The frames of a serving worker's standard output (src/execution/exec/wire.rs), each as JSON: a ready
/// frame's result, an error's text, an outputs frame's names and bytes; what does not parse
/// ends the list as a `damaged` frame.
fn parse_frames(mut b: &[u8]) -> Vec<Value> {
    fn take<'a>(b: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
        (b.len() >= n).then(|| {
            let (head, rest) = b.split_at(n);
            *b = rest;
            head
        })
    }
    fn u64_of(b: &mut &[u8]) -> Option<u64> {
        Some(u64::from_le_bytes(take(b, 8)?.try_into().ok()?))
    }
    fn text(b: &mut &[u8]) -> Option<Vec<u8>> {
        let n = u64_of(b)? as usize;
        Some(take(b, n)?.to_vec())
    }
    fn frame(b: &mut &[u8]) -> Option<Value> {
        Some(match take(b, 1)?[0] {
            b'R' => json!({"kind": "R", "result": serde_json::from_slice::<Value>(&text(b)?).ok()?}),
            b'E' => json!({"kind": "E", "error": String::from_utf8(text(b)?).ok()?}),
            b'O' => {
                let run_ms = f64::from_le_bytes(take(b, 8)?.try_into().ok()?);
                let count = u64_of(b)?;
                let mut outputs = Vec::new();
                for _ in 0..count {
                    let name = String::from_utf8(text(b)?).ok()?;
                    outputs.push(json!({"name": name, "npy": tensor_bytes(&text(b)?)}));
                }
                let timed = run_ms.is_finite() && run_ms >= 0.0;
                json!({"kind": "O", "run_ms": if timed { "<masked>" } else { "not a time" }, "outputs": outputs})
            }
            _ => return None,
        })
    }
    let mut frames = Vec::new();
    while !b.is_empty() {
        let at = b.len();
        match frame(&mut b) {
            Some(f) => frames.push(f),
            None => {
                frames.push(json!({"kind": "damaged", "bytes_left": at}));
                break;
            }
        }
    }
    frames
}

/// A result as compared: the output directory's path as `@OUT@`, the [`MASKED`] fields and each
/// run time replaced (a field present in one result and absent from the other still differs).
fn normalized_result(v: &Value, out: &Path) -> Value {
    let out = out.display().to_string();
    let mut v = replace_strings(v, &out);
    if let Some(obj) = v.as_object_mut() {
        for k in MASKED {
            if let Some(x) = obj.get_mut(k) {
                *x = json!("<masked>");
            }
        }
        if let Some(Value::Array(times)) = obj.get_mut("run_ms") {
            for t in times.iter_mut() {
                let timed = t.as_f64().is_some_and(|x| x.is_finite() && x >= 0.0);
                *t = json!(if timed { "<masked>" } else { "not a time" });
            }
        }
    }
    v
}

fn replace_strings(v: &Value, out: &str) -> Value {
    match v {
        Value::String(s) => Value::String(s.replace(out, "@OUT@")),
        Value::Array(a) => Value::Array(a.iter().map(|x| replace_strings(x, out)).collect()),
        Value::Object(o) => Value::Object(o.iter().map(|(k, x)| (k.clone(), replace_strings(x, out))).collect()),
        other => other.clone(),
    }
}

/// Everything of a run that the two workers must agree on, as one JSON value.
fn observed(run: &Run) -> Value {
    let frames: Vec<Value> = run
        .frames
        .iter()
        .map(|f| match f.get("result") {
            Some(r) => json!({"kind": "R", "result": normalized_result(r, &run.out)}),
            None => replace_strings(f, &run.out.display().to_string()),
        })
        .collect();
    json!({
        "exit": run.ended.exit,
        "result": run.result.as_ref().map(|r| normalized_result(r, &run.out)),
        "frames": frames,
        "files": run.files,
    })
}

/// A documented difference: the fields not compared (of the result, or `frames`, and with
/// `outputs` the files).
fn without(mut v: Value, fields: &[&str]) -> Value {
    for f in fields {
        if let Some(r) = v["result"].as_object_mut() {
            r.remove(*f);
        }
        if *f == "frames" {
            v["frames"] = Value::Null;
        }
        if *f == "outputs" {
            v["files"] = Value::Null;
        }
    }
    v
}

/// Where `a` and `b` differ, one line per differing leaf (path: a vs b).
fn differences(path: &str, a: &Value, b: &Value, out: &mut Vec<String>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for k in keys {
                let (p, q) = (x.get(k).unwrap_or(&Value::Null), y.get(k).unwrap_or(&Value::Null));
                if x.contains_key(k) != y.contains_key(k) {
                    out.push(format!("{path}/{k}: present in one only ({p} vs {q})"));
                } else {
                    differences(&format!("{path}/{k}"), p, q, out);
                }
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (p, q)) in x.iter().zip(y).enumerate() {
                differences(&format!("{path}/{i}"), p, q, out);
            }
        }
        _ if a != b => out.push(format!("{path}: rust {a} vs python {b}")),
        _ => {}
    }
}

/// What a case expects of one side, checked: the exit, and for a result its `ok`, `phase` and a
/// part of its `error`, and the kinds of its frames.
fn check_expectation(run: &Run, expect: &Value) -> Vec<String> {
    let mut wrong = Vec::new();
    if run.ended.exit != expect["exit"] {
        wrong.push(format!("exit {} (expected {})", run.ended.exit, expect["exit"]));
    }
    match (&run.result, expect["exit"] == 0) {
        (Some(r), true) => {
            for k in ["ok", "phase"] {
                if r[k] != expect[k] {
                    wrong.push(format!("{k} {} (expected {})", r[k], expect[k]));
                }
            }
            if let Some(part) = expect["error"].as_str() {
                let error = r["error"].as_str().unwrap_or_default();
                if error.is_empty() || !error.contains(part) {
                    wrong.push(format!("error {:?} (expected one containing {part:?})", r["error"]));
                }
            } else if !r["error"].is_null() {
                wrong.push(format!("error {} (expected none)", r["error"]));
            }
        }
        (None, false) => {}
        (Some(_), false) => wrong.push("a result.json where none was expected".into()),
        (None, true) => wrong.push("no result.json".into()),
    }
    if let Some(kinds) = expect["frames"].as_str() {
        let got: String = run.frames.iter().map(|f| f["kind"].as_str().unwrap_or("?")).collect();
        if got != kinds {
            wrong.push(format!("frames {got:?} (expected {kinds:?})"));
        }
    }
    wrong
}

/// The result and ready frames of a run against docs/worker.schema.json, and the reported
/// runtime release.
fn check_documents(run: &Run, schema: &jsonschema::Validator, release: &str) -> Vec<String> {
    let mut wrong = Vec::new();
    let ready = run.frames.iter().filter_map(|f| f.get("result"));
    for (what, doc) in run
        .result
        .iter()
        .map(|r| ("result.json", r))
        .chain(ready.map(|r| ("ready frame", r)))
    {
        for e in schema.iter_errors(doc) {
            wrong.push(format!("{what} outside the schema at {}: {e}", e.instance_path()));
        }
        if !doc["ort_version"].is_null() && doc["ort_version"] != release {
            wrong.push(format!(
                "{what}: ort_version {} (the CPU build is {release})",
                doc["ort_version"]
            ));
        }
    }
    wrong
}

fn worker_schema() -> jsonschema::Validator {
    let file = repo(npu_audit::execution::exec::schema::WORKER_SCHEMA_FILE);
    let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let schema: Value = serde_json::from_str(&text).expect("the worker schema is JSON");
    jsonschema::draft202012::new(&schema).expect("the worker schema compiles")
}

/// The job of a case against the schema: inside it unless the case says why not (then outside).
fn check_job(case: &Value, w: &Workers, schema: &jsonschema::Validator) -> Vec<String> {
    let text = job_text(case, w, Path::new("/nonexistent/out"));
    let valid = serde_json::from_str::<Value>(&text).is_ok_and(|job| schema.is_valid(&job));
    match (valid, case["job_outside_schema"].is_string()) {
        (true, true) => vec!["the job is inside the schema, yet the case says it is not".into()],
        (false, false) => vec!["the job is outside the schema".into()],
        _ => Vec::new(),
    }
}

/// Runs one case on both workers (at once) and says everything wrong with it.
fn conformance_of(case: &Value, w: &Workers, schema: &jsonschema::Validator, dir: &Path) -> Vec<String> {
    let (rust, python) = std::thread::scope(|s| {
        let r = s.spawn(|| run_case(case, Side::Rust, w, dir));
        let p = run_case(case, Side::Python, w, dir);
        (r.join().expect("rust run"), p)
    });
    let release = cpu_release();
    let mut wrong = check_job(case, w, schema);
    let differs = &case["differs"];
    let python_expect = if differs.is_null() {
        &case["expect"]
    } else {
        &differs["python"]
    };
    for (side, run, expect) in [("rust", &rust, &case["expect"]), ("python", &python, python_expect)] {
        let mut side_wrong = check_expectation(run, expect);
        side_wrong.extend(check_documents(run, schema, &release));
        if !side_wrong.is_empty() {
            let log: Vec<&str> = run.ended.log.lines().rev().take(5).collect();
            wrong.push(format!("{side}: {}; log ends {log:?}", side_wrong.join("; ")));
        }
    }
    let ignored: Vec<&str> = differs["fields"]
        .as_array()
        .map(|f| f.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut disagree = Vec::new();
    differences(
        "",
        &without(observed(&rust), &ignored),
        &without(observed(&python), &ignored),
        &mut disagree,
    );
    wrong.extend(disagree.into_iter().map(|d| format!("the workers disagree at {d}")));
    wrong
}

#[test]
fn both_workers_agree_on_every_case_of_the_corpus() {
    let w = workers();
    let schema = worker_schema();
    let cases = cases();
    assert!(!cases.is_empty(), "an empty corpus checks nothing");
    let tmp = common::tempdir();
    let start = Instant::now();
    let mut failures = Vec::new();
    for case in &cases {
        let name = case["name"].as_str().expect("name");
        let dir = tmp.path().join(name);
        let wrong = conformance_of(case, &w, &schema, &dir);
        if !wrong.is_empty() {
            failures.push(format!("{name}:\n  {}", wrong.join("\n  ")));
        }
    }
    eprintln!(
        "worker conformance: {} cases on both workers in {:.1} s",
        cases.len(),
        start.elapsed().as_secs_f64()
    );
    assert!(
        failures.is_empty(),
        "{} of {} cases fail:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

#[test]
fn the_corpus_covers_the_protocol() {
    let cases = cases();
    let seen = |f: &dyn Fn(&Value) -> bool| cases.iter().any(f);
    // Every exit a worker has: a result, an unreadable job or unwritable result, the injected
    // exit, a full disk, a crash and a hang.
    for exit in [
        json!(0),
        json!(2),
        json!(7),
        json!(28),
        json!("signal 6"),
        json!("hang"),
    ] {
        assert!(seen(&|c| c["expect"]["exit"] == exit), "no case exits {exit}");
    }
    // Every phase a failed result can stop in, and every fault the workers inject.
    for phase in ["load_runtime", "register_ep", "create_session", "run"] {
        let stops = |e: &Value| e["ok"] == false && e["phase"] == phase;
        assert!(
            seen(&|c| stops(&c["expect"]) || stops(&c["differs"]["python"])),
            "{phase}"
        );
    }
    let faults = |c: &Value| c["env"]["NPU_AUDIT_FAULT_INJECT"].as_str().unwrap_or("").to_string();
    for fault in ["=exit", "=crash", "=hang", "=refuse-output:", "=crash@", "=slow"] {
        assert!(seen(&|c| faults(c).contains(fault)), "no case injects {fault}");
    }
    // Serving: every frame kind a worker writes; the documented differences; job kinds.
    for kind in ['R', 'O', 'E'] {
        assert!(seen(&|c| c["expect"]["frames"]
            .as_str()
            .is_some_and(|f| f.contains(kind))));
    }
    assert!(seen(&|c| c["no_space"] == true) && seen(&|c| !c["differs"].is_null()));
    // Every job template is some case's, and every case's template exists.
    let jobs: std::collections::BTreeSet<String> = std::fs::read_dir(repo(CORPUS).join("jobs"))
        .expect("jobs/")
        .map(|e| {
            e.unwrap()
                .file_name()
                .to_string_lossy()
                .trim_end_matches(".json")
                .to_string()
        })
        .collect();
    let used: std::collections::BTreeSet<String> =
        cases.iter().map(|c| c["job"].as_str().unwrap().to_string()).collect();
    assert_eq!(jobs, used, "job templates and the cases that use them");
    let names: std::collections::BTreeSet<&str> = cases.iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(names.len(), cases.len(), "case names are unique");
}

#[test]
fn the_committed_worker_schema_is_the_one_derived_from_the_job_types() {
    let derived = npu_audit::execution::exec::schema::worker_schema_text();
    let file = npu_audit::execution::exec::schema::WORKER_SCHEMA_FILE;
    let committed = std::fs::read_to_string(repo(file)).unwrap_or_default();
    if derived != committed {
        let fresh = Path::new(env!("CARGO_TARGET_TMPDIR")).join("worker.schema.json");
        std::fs::write(&fresh, &derived).unwrap();
        panic!(
            "{file} differs from the schema derived from src/execution/exec/job.rs: the derived one is {}; \
             copy it over ({file}) and make src/execution/exec/emulated_worker.py write and read the same",
            fresh.display()
        );
    }
    // Both documents are in it, each closed to unknown fields.
    let schema: Value = serde_json::from_str(&committed).unwrap();
    for def in ["Job", "JobResult", "EpSetup", "OutputFile"] {
        assert!(schema["$defs"][def].is_object(), "no {def} in {file}");
    }
    assert_eq!(schema["$defs"]["JobResult"]["additionalProperties"], false);
}
